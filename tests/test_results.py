import math

import pytest

from sinklib.core.results import number_matches


def test_number_matches_within_a_factor_either_side():
    assert number_matches(263, 60) == (False, "no: 60 vs 263 (0.23x)")
    assert number_matches(263, 140)[0] and number_matches(263, 520)[0]  # 0.53x and 1.98x
    assert not number_matches(263, 530)[0]
    assert number_matches(5.47, 5.47, factor=1.05) == (True, "yes: 5.47 vs 5.47 (1.00x)")


@pytest.mark.parametrize("published, measured", [(0.0, 1.0), (math.inf, 1.0), (1.0, math.nan)])
def test_number_matches_refuses_what_cannot_be_compared(published, measured):
    with pytest.raises(ValueError, match="cannot compare"):
        number_matches(published, measured)


def test_ppl_ratio_interval_is_paired_and_honest():
    import torch

    from sinklib.core.evaluation import ppl, ppl_ratio_interval

    gen = torch.Generator().manual_seed(0)
    a = 3 + torch.randn(1024, generator=gen)  # per-token NLLs that vary a lot from token to token
    ratio, lo, hi = ppl_ratio_interval(a, a + 0.05)  # every token 0.05 nats worse: a certain 5.1% rise
    assert ratio == pytest.approx(ppl(a + 0.05) / ppl(a)) and lo == pytest.approx(hi) == pytest.approx(math.exp(0.05))
    noise = a + 0.3 * torch.randn(1024, generator=gen)  # no systematic change, only noise
    ratio, lo, hi = ppl_ratio_interval(a, noise)
    assert lo < 1 < hi and lo < ratio < hi
    with pytest.raises(ValueError, match="equal-length"):
        ppl_ratio_interval(a, a[:100])
