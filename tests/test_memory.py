"""Length and memory checks fail early with one-line errors."""

import pytest
import torch

from sinklib.core import memory
from sinklib.core.analysis import profile_sinks
from sinklib.core.errors import InputError


def test_too_long_for_the_model(tiny):
    limit = memory.max_length(tiny)
    memory.check_length(tiny, limit)
    with pytest.raises(InputError, match="max_position_embeddings") as err:
        memory.check_length(tiny, limit + 1)
    assert "\n" not in str(err.value)


def test_memory_estimate_grows_quadratically_only_for_eager(smollm2):
    eager = [memory.forward_bytes(smollm2, 1, n, eager_attentions=True) for n in (1024, 2048)]
    stats = [memory.forward_bytes(smollm2, 1, n) for n in (1024, 2048)]
    assert eager[1] / eager[0] > 3.5 and stats[1] / stats[0] < 2.5
    assert 60 * memory.GiB < memory.forward_bytes(smollm2, 1, 8192, eager_attentions=True) < 90 * memory.GiB


def test_request_beyond_free_memory(smollm2, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 2 * memory.GiB)
    with pytest.raises(InputError, match="GiB is free") as err:
        memory.check_fits(smollm2, 1, 4096, eager_attentions=True)
    assert "O(N) statistics" in str(err.value)
    memory.check_fits(smollm2, 1, 512)  # the O(N) path fits in 2 GiB


def test_profile_refuses_before_allocating(tiny, monkeypatch):
    import torch

    ids = torch.zeros(1, memory.max_length(tiny) + 1, dtype=torch.long)
    with pytest.raises(InputError, match="longer than"):
        profile_sinks(tiny, ids, progress=False)


def test_batch_follows_the_memory_check(tiny, monkeypatch):
    from sinklib.core import memory

    kw = {"eager_attentions": True, "hidden_states": True}  # bytes proportional to the batch
    one = memory.forward_bytes(tiny, 1, 64, **kw)
    monkeypatch.setattr(memory, "available_bytes", lambda device: int(5 * one / 0.9))
    assert memory.fit_batch(tiny, 16, 64, **kw) == 4  # 16 -> 8 -> 4 (4 x one fits in 5 x one)
    assert memory.fit_batch(tiny, 3, 64, **kw) == 3
    monkeypatch.setattr(memory, "available_bytes", lambda device: int(0.5 * one))
    with pytest.raises(InputError, match="GiB"):
        memory.fit_batch(tiny, 16, 64, **kw)


def test_profile_progress_moves_after_every_layer(tiny):
    from sinklib.core.profile_checks import LayerProgress

    class Bar:
        def __init__(self):
            self.steps = []

        def update(self, n):
            self.steps.append(n)
            return True  # as tqdm's update does: the hook must not hand it back as the layer's output

    bar = Bar()
    ids = torch.zeros(3, 8, dtype=torch.long)
    with torch.no_grad():
        base = tiny.model(ids).logits
        with LayerProgress(tiny, bar) as tick:
            tick.batch = 3
            out = tiny.model(ids).logits
    torch.testing.assert_close(out, base)
    assert bar.steps == [1.5, 1.5]  # 3 sequences / 2 layers, once per layer
    from sinklib.core.capture import hooks_left

    assert hooks_left(tiny.model) == 0
