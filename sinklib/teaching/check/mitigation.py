"""Checks for ``notebooks/exercises/03_mitigation``: softmax-off-by-one, softpick, head-wise RMSNorm, an
attention function for transformers' registry and one training step."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from sinklib.teaching.check._core import Result, Wrong, fresh_inputs, run, same


def _masked_logits(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 3, 6, 6, generator=gen) * 3
    return logits.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))


def softmax_off_by_one(fn: Callable, quiet: bool = False) -> Result:
    """``fn(logits (..., N)) -> (..., N)``: exp(l_j) / (1 + sum_j' exp(l_j')); masked logits are -inf (weight 0).
    Rows sum to less than 1: the rest went to an implicit zero logit.

    By hand: [0, 0] -> [1/3, 1/3]; [0, -inf] -> [1/2, 0]; [ln 3] -> [3/4].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.mitigation.variants import SoftmaxOffByOne

    logits = _masked_logits(9)
    q = torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(10))
    k = torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(11))
    from sinklib.mitigation.variants import causal_logits

    return run("softmax_off_by_one", [
        ("hand case [0, 0]", lambda: same(fn(torch.tensor([0.0, 0.0])), torch.tensor([1 / 3, 1 / 3]), "weights")),
        ("hand case [0, -inf]", lambda: same(fn(torch.tensor([0.0, float("-inf")])), torch.tensor([0.5, 0.0]),
                                              "weights")),
        ("hand case [ln 3]", lambda: same(fn(torch.tensor([math.log(3.0)])), torch.tensor([0.75]), "weights")),
        ("large logits [1000, 1000] (compute it stably)", lambda: same(fn(torch.tensor([1000.0, 1000.0])),
                                                                        torch.tensor([0.5, 0.5]), "weights")),
        ("random causal (2, 3, 6, 6)", lambda: same(fn(causal_logits(q, k)), SoftmaxOffByOne(4, 3, 4).weights(q, k),
                                                     "weights")),
        ("random masked logits: masked entries get 0", lambda: same(fn(logits)[..., 0, 1:], torch.zeros(2, 3, 5),
                                                                     "weights above the diagonal")),
    ], quiet)


def softpick(fn: Callable, quiet: bool = False) -> Result:
    """``fn(logits (..., N)) -> (..., N)``: Softpick, relu(exp(l_j) - 1) / sum_j' |exp(l_j') - 1| over the visible
    keys (masked logits are -inf and count for nothing, not even in the denominator).

    By hand: [0, ln 2] -> numerators [0, 1], denominator 0 + 1 -> [0, 1]. [ln 2, -ln 2] -> exp - 1 = [1, -0.5],
    numerators [1, 0], denominator 1.5 -> [2/3, 0]: negative logits get no weight but still shrink the others.
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.mitigation.variants import Softpick, causal_logits

    q = torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(12))
    k = torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(13))
    ln2 = math.log(2.0)
    return run("softpick", [
        ("hand case [0, ln 2]", lambda: same(fn(torch.tensor([0.0, ln2])), torch.tensor([0.0, 1.0]), "weights",
                                              atol=1e-4)),
        ("hand case [ln 2, -ln 2]", lambda: same(fn(torch.tensor([ln2, -ln2])), torch.tensor([2 / 3, 0.0]),
                                                  "weights", atol=1e-4)),
        ("a masked key is not in the denominator: [ln 2, -ln 2, -inf]",
         lambda: same(fn(torch.tensor([ln2, -ln2, float("-inf")])), torch.tensor([2 / 3, 0.0, 0.0]), "weights",
                       atol=1e-4)),
        ("random causal (2, 3, 6, 6)", lambda: same(fn(causal_logits(q, k)), Softpick(4, 3, 4).weights(q, k),
                                                     "weights", atol=1e-4)),
    ], quiet)


def head_rmsnorm(fn: Callable, quiet: bool = False) -> Result:
    """``fn(o (B, H, T, hd), gain (hd,), eps) -> (B, H, T, hd)``: head-wise RMSNorm of head outputs,
    o / sqrt(mean_c o_c^2 + eps) * gain, the mean over each head's hd channels (not across heads).

    By hand (eps = 0): o = [3, 4] -> RMS = sqrt((9 + 16)/2) = 3.5355 -> [0.8485, 1.1314]; with gain [1, 2] ->
    [0.8485, 2.2627].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    o = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(14)) * 5
    g = torch.linspace(0.5, 2.0, 8)
    want = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6) * g
    r = math.sqrt(12.5)
    return run("head_rmsnorm", [
        ("hand case [3, 4], gain [1, 1]", lambda: same(fn(torch.tensor([3.0, 4.0]), torch.ones(2), 0.0),
                                                        torch.tensor([3 / r, 4 / r]), "output")),
        ("hand case [3, 4], gain [1, 2]", lambda: same(fn(torch.tensor([3.0, 4.0]), torch.tensor([1.0, 2.0]), 0.0),
                                                        torch.tensor([3 / r, 8 / r]), "output")),
        ("random (2, 3, 5, 8), eps 1e-6: the mean is over each head's channels", lambda: same(fn(o, g, 1e-6), want,
                                                                                               "output")),
    ], quiet)


def attention_function(fn: Callable, quiet: bool = False) -> Result:
    """``fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs) -> (output, weights)``:
    softmax-off-by-one written as a transformers attention function (the signature transformers' attention registry,
    ``AttentionInterface``, calls). query (B, H, T, hd); key, value (B, H_kv, N, hd) -- fewer key/value heads than
    query heads (grouped-query attention: repeat each H / H_kv times); attention_mask: None or additive (B, 1, T, N)
    to be added to the logits (None: causal). Return output (B, T, H, hd) -- transposed back -- and the weights.

    The check registers it on a tiny random Llama (2 query heads per key/value head) and compares the model's logits
    with softmax-off-by-one computed directly.
    """
    from sinklib.core.attention_switch import AttentionSwitch
    from sinklib.models import tiny_random

    def reference(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        G = query.shape[1] // key.shape[1]
        k, v = key.repeat_interleave(G, dim=1), value.repeat_interleave(G, dim=1)
        logits = query @ k.transpose(-1, -2) * (scaling or query.shape[-1] ** -0.5)
        T, N = logits.shape[-2:]
        if attention_mask is None:
            logits = logits.masked_fill(torch.ones(T, N, dtype=torch.bool).triu(N - T + 1), float("-inf"))
        else:
            logits = logits + attention_mask[..., :N]
        w = torch.softmax(torch.cat([logits, torch.zeros_like(logits[..., :1])], dim=-1), dim=-1)[..., :-1]
        return (w @ v).transpose(1, 2).contiguous(), w

    torch.manual_seed(0)
    model, inputs = tiny_random.llama()  # 4 query heads, 2 key/value heads, head_dim 8
    model.eval()
    ids = inputs["input_ids"]

    def logits_with(f):
        with torch.no_grad(), AttentionSwitch(model, "exercise", f):
            return model(ids).logits

    def on_model():
        want = logits_with(reference)
        got = logits_with(fn)
        same(got, want, "model logits", atol=1e-4)

    def shapes():
        module = model.model.layers[0].self_attn
        q, kv = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
        out, _ = fn(module, q, kv, kv, None, scaling=8 ** -0.5)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, 5, 4, 8):
            raise Wrong(f"output shape {tuple(getattr(out, 'shape', ()))}, expected (B, T, H, hd) = (1, 5, 4, 8)")

    return run("attention_function", [
        ("output shape with 4 query heads and 2 key/value heads", shapes),
        ("a tiny Llama running your function (mask as transformers passes it)", on_model),
    ], quiet)


def train_step(fn: Callable, quiet: bool = False) -> Result:
    """``fn(model, ids (B, T), optimizer) -> float``: one step of next-token training, as 03 trains every variant.
    The logits at position t predict token t + 1: loss = cross-entropy(logits[:, :-1], ids[:, 1:]) averaged over the
    B (T - 1) predictions; clear the old gradients, backpropagate, step; return the loss before the step.

    By hand: a model whose logits are all 0 over V tokens has loss ln V whatever the ids (ln 4 = 1.386 at V = 4).
    The check trains a tiny TinyLM with your step and with the reference, from the same weights, with SGD: the loss
    and the weights must match after one step and after two (two in a row catch gradients that were not cleared).
    """
    import copy

    import torch.nn.functional as F

    from sinklib.mitigation.variant_lm import TinyConfig, TinyLM

    class Zeros(torch.nn.Module):  # the hand case: logits 0 everywhere, one parameter so that SGD has work
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))

        def forward(self, ids):
            return torch.zeros(*ids.shape, 4) * self.w

    def reference(model, ids, optimizer):
        logits = model(ids)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    fn = fresh_inputs(fn)
    torch.manual_seed(0)
    start = TinyLM(TinyConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=8, rope_theta=0.0))
    ids = torch.randint(0, 16, (3, 8), generator=torch.Generator().manual_seed(1))

    def hand():
        model = Zeros()
        got = fn(model, ids % 4, torch.optim.SGD(model.parameters(), lr=0.1))
        if not isinstance(got, float | int) and not (isinstance(got, torch.Tensor) and got.numel() == 1):
            raise Wrong(f"returned {type(got).__name__}, expected the loss as a number (float(loss))")
        same(torch.tensor(float(got)), torch.tensor(math.log(4.0)), "loss of all-zero logits over 4 tokens")

    def steps(n: int):
        def case():
            mine, theirs = copy.deepcopy(start), copy.deepcopy(start)
            opt_mine = torch.optim.SGD(mine.parameters(), lr=0.5)
            opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.5)
            for i in range(n):
                got, want = fn(mine, ids, opt_mine), reference(theirs, ids, opt_theirs)
                same(torch.tensor(float(got)), torch.tensor(want), f"loss returned at step {i + 1}", atol=1e-5)
            for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
                same(p.detach(), q.detach(), f"weight {name} after {n} step{'s' if n > 1 else ''}", atol=1e-5)
        return case

    return run("train_step", [
        ("hand case: all-zero logits over 4 tokens give ln 4", hand),
        ("one step from the same weights (next-token targets, then the update)", steps(1)),
        ("two steps in a row (old gradients cleared)", steps(2)),
    ], quiet)
