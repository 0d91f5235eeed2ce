"""Su et al.'s super-expert claim says how its a differs from the authors' hook (issue 43 item 14)."""

import torch

from sinklib.architectures.moe.su_claims import super_experts_claim


def test_super_experts_adapted_says_a_is_the_max_over_all_routed_tokens():
    a = torch.ones(8, 4)
    a[1, 2] = 500.0
    adapted = super_experts_claim(a).adapted
    assert "every token routed" in adapted
    assert "first routed token" in adapted and "output[0].abs().max()" in adapted
