"""Massive activations and the sink as a bias (Sun et al., arXiv 2402.17762): the first token's massive residual
values, their means (the values Sun et al. substitute), the layer where they appear, and whether the sink's
contribution A_t0 v_0 acts as a nearly constant bias -- with how well that separates sink heads from the others.

Shapes: N sequences, T positions, L layers, H heads, d model width.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from sinklib.core import evaluation, metrics
from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation.interventions import ResidualOverride
from sinklib.interpretation.origin import Statistic, batches, forward, leading_rows, measure


# ----------------------------------------------------------------------------------------------- 7 bias view
@torch.inference_mode()
def first_token_values(lm: LoadedModel, ids: torch.Tensor, dims: list[int], batch_size: int = 16) -> torch.Tensor:
    """Mean signed value of residual dimensions ``dims`` at the first token after each layer: (L, len(dims)).

    Over many inputs this is the "mean value" Sun et al. substitute for the massive activations.
    """
    out = []
    for batch in batches(ids, batch_size):
        with Capture(lm, hidden_states=True, reduce={"hidden_states": lambda h, i: h[:, 0, dims]}) as cap:
            forward(lm, batch)
        out.append(cap.stack("hidden_states").double())  # (L, B, len(dims))
    return torch.cat(out, dim=1).mean(dim=1).float()


@dataclass
class MassiveMeans:
    """Sun et al.'s "mean value" of the massive activations per (layer, dim), at the two kinds of sites they edit.

    ``first``: mean of h^l[:, 0, dim] over the inputs (the start token); ``first_sd``: its sd over the inputs (0 when
    position 0 is the same BOS token in every sequence: then "set to mean" cannot change it, by construction);
    ``other``: mean of the entries at t >= 1 that meet the criterion (the first delimiter), NaN where none did;
    ``other_count``: how many such entries were seen. Each (len(layers), len(dims)). ``other_tokens``: token id ->
    how many of those entries it held (which tokens the later sites are: delimiters, as Sun et al. report, or not).
    """

    first: torch.Tensor
    first_sd: torch.Tensor
    other: torch.Tensor
    other_count: torch.Tensor
    other_tokens: dict[int, int]

    @property
    def first_is_fixed(self) -> bool:
        """Position 0 holds the same value in every input (sd < 0.1% of its magnitude): a BOS model, where "set to
        mean" cannot change position 0 by construction."""
        return self.first.numel() > 0 and float(self.first_sd.max()) < 1e-3 * float(self.first.abs().max())

    def other_or_first(self) -> torch.Tensor:
        """Replacement values for t >= 1: the delimiters' own mean, or the first token's where none was seen."""
        return torch.where(torch.isnan(self.other), self.first, self.other)


def massive_means(lm: LoadedModel, ids: torch.Tensor, layers: list[int], dims: list[int],
                  min_ratio: float = metrics.SUN_MIN_RATIO, batch_size: int = 16) -> MassiveMeans:
    """The per-site means Sun et al. substitute (locuslab/massive-activations ``lib/hook.py`` keeps one value for
    the start token and one for the delimiter), measured over ``ids``; entries at t >= 1 count when they meet
    :func:`sinklib.core.metrics.massive_mask` with ``min_ratio``. The forwards stop after the last of ``layers``."""
    return measure(lm, ids, [MassiveMeanStats(dims, min_ratio, layers)], batch_size)[0].select(layers)


class MassiveMeanStats(Statistic):
    """:func:`massive_means` as a :class:`~sinklib.interpretation.origin.Statistic`, for ``layers`` (None: every
    layer, so that the layers can be chosen afterwards -- e.g. the onset layers measured in the same pass);
    :meth:`result` gives a :class:`MassiveMeansByLayer` to :meth:`~MassiveMeansByLayer.select` from."""

    kinds = ("hidden_states",)

    def __init__(self, dims: list[int], min_ratio: float = metrics.SUN_MIN_RATIO, layers: list[int] | None = None):
        self.dims, self.min_ratio, self.layers = list(dims), min_ratio, None if layers is None else list(layers)
        self.last_layer = None if layers is None else max(layers)
        self.sums: dict[int, torch.Tensor] = {}  # layer -> (4, len(dims)): first, first^2, other, count (float64)
        self.tokens: list[tuple[int, list[int]]] = []  # (layer, token ids of its later sites), batch by batch
        self.n = 0

    def update(self, cap: Capture, batch: torch.Tensor, start: int) -> None:
        for layer in self.layers if self.layers is not None else sorted(cap.layers):
            h = cap.get("hidden_states", layer).double()  # (B, T, d)
            # the sites ResidualOverride edits: the criterion on the whole output (its median includes t = 0), then t >= 1
            hit = metrics.massive_mask(h, min_ratio=self.min_ratio)[:, 1:, self.dims] if self.dims else \
                torch.zeros(*h[:, 1:].shape[:2], 0, dtype=torch.bool)  # (B, T-1, len(dims))
            step = torch.stack([h[:, 0, self.dims].sum(0), (h[:, 0, self.dims] ** 2).sum(0),
                                (h[:, 1:, self.dims] * hit).sum(dim=(0, 1)), hit.sum(dim=(0, 1)).double()])
            self.sums[layer] = self.sums[layer] + step if layer in self.sums else step
            self.tokens.append((layer, batch[:, 1:][hit.any(-1).cpu()].tolist()))
        self.n += len(batch)

    def result(self) -> MassiveMeansByLayer:
        return MassiveMeansByLayer(self.sums, self.tokens, self.n)


@dataclass
class MassiveMeansByLayer:
    """:class:`MassiveMeanStats`'s sums per layer, from which :meth:`select` makes the :class:`MassiveMeans` of any
    layers (its rows in the order given)."""

    sums: dict[int, torch.Tensor]
    tokens: list[tuple[int, list[int]]]
    n: int

    def select(self, layers: list[int]) -> MassiveMeans:
        sums = torch.stack([self.sums[layer] for layer in layers], dim=1)  # (4, len(layers), len(dims))
        first, first_sq, other, count = sums
        mean = first / self.n
        sd = (first_sq / self.n - mean ** 2).clamp_min(0).sqrt()
        other = torch.where(count > 0, other / count.clamp_min(1), torch.full_like(other, float("nan")))
        tokens: Counter = Counter()
        for layer, ids in self.tokens:  # batch by batch, layer by layer, as one pass over ``layers`` counts them
            if layer in layers:
                tokens.update(ids)
        return MassiveMeans(mean.float(), sd.float(), other.float(), count.long(), dict(tokens.most_common()))


def onset_layers(values: torch.Tensor, min_abs: float = 100.0, jump: float = 2.0) -> list[int]:
    """Layers where a massive value appears or jumps: |v_l| > min_abs and |v_l| > jump * |v_{l-1}| (any dim).

    values: (L, n_dims), e.g. :func:`first_token_values`.
    """
    a = values.abs()
    prev = torch.cat([torch.zeros_like(a[:1]), a[:-1]])
    hit = (a > min_abs) & (a > jump * prev)
    return [i for i in range(len(a)) if bool(hit[i].any())]


def sink_as_bias(lm: LoadedModel, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per head (L, H): the implicit-bias view of the first-token sink.

    With c_t = A_{t,0} v_0, the first token's term in query t's head output (t >= 1):

    * ``value_norm_ratio`` = |v_0| / mean_{j>=1} |v_j| (a sink's value is small);
    * ``sink_share`` = mean_t |c_t| / |o_t| (how much of the output it supplies);
    * ``sink_term_spread`` = mean_t |c_t - mean_t' c_t'| / mean_t |c_t|: how far the term is from one constant
      vector, relative to its own size (0 = an exact additive bias). v_0 is one vector per sequence, so this is the
      relative spread of A_{t,0} over queries, mean_t |A_t0 - mean A| / mean A: about 0.9 for attention that decays
      like 1/(t+1), near 0 for a head that gives every query the same share of the first token;
    * ``alpha_first``.

    A term that is small *relative to the output* says nothing by itself (every head whose alpha is small passes);
    the verdict compares sink heads with the others (``separation``).
    """
    return measure(lm, ids, [SinkAsBiasStats(lm)], len(ids))[0]


class SinkAsBiasStats(Statistic):
    """:func:`sink_as_bias` as a :class:`~sinklib.interpretation.origin.Statistic`, on the first ``max_seqs``
    sequences (None: all)."""

    kinds = ("attentions", "values")

    def __init__(self, lm: LoadedModel, max_seqs: int | None = None):
        self.L, self.H, self.group = lm.n_layers, lm.n_heads, lm.n_heads // lm.n_kv_heads
        self.max_seqs = max_seqs
        self.attn, self.values = [], []

    def update(self, cap: Capture, batch: torch.Tensor, start: int) -> None:
        rows = leading_rows(batch, start, self.max_seqs)
        if rows is not None:
            self.attn.append([cap.get("attentions", i)[rows] for i in range(self.L)])  # (B, H, T, T) per layer
            self.values.append([cap.get("values", i)[rows] for i in range(self.L)])  # (B, H_kv, T, hd)

    def result(self) -> dict[str, torch.Tensor]:
        res = {k: torch.zeros(self.L, self.H) for k in ("value_norm_ratio", "sink_share", "sink_term_spread",
                                                         "alpha_first")}
        for i in range(self.L):
            A = torch.cat([a[i] for a in self.attn]).float()  # (N, H, T, T)
            v = torch.cat([v[i] for v in self.values]).float().repeat_interleave(self.group, dim=1)  # (N, H, T, hd)
            vn = v.norm(dim=-1)  # (N, H, T)
            res["value_norm_ratio"][i] = (vn[..., 0] / vn[..., 1:].mean(-1)).mean(0)
            o = A[..., 1:, :] @ v  # (N, H, T-1, hd) head outputs of queries t >= 1
            c = A[..., 1:, 0, None] * v[:, :, None, 0]  # (N, H, T-1, hd) the first token's term
            res["sink_share"][i] = (c.norm(dim=-1) / o.norm(dim=-1).clamp_min(1e-12)).mean(dim=(0, 2))
            dev = (c - c.mean(dim=2, keepdim=True)).norm(dim=-1).mean(-1)  # (N, H)
            res["sink_term_spread"][i] = (dev / c.norm(dim=-1).mean(-1).clamp_min(1e-12)).mean(0)
            res["alpha_first"][i] = metrics.alpha(A, 0).mean(0)
        return res


def separation(values: torch.Tensor, alpha: torch.Tensor, eps: float = metrics.GU_EPS) -> float | None:
    """P(a sink head's value < a non-sink head's value) over all (sink, other) pairs of heads (L, H).

    The Mann-Whitney U statistic divided by n_sink * n_other (the area under the ROC curve): 1.0 when every sink
    head lies below every other head, 0.5 when the groups are mixed, None when a group is empty (no pair to compare).
    Ties count half.
    """
    sink = alpha > eps
    a, b = values[sink].float().flatten(), values[~sink].float().flatten()
    if a.numel() == 0 or b.numel() == 0:
        return None
    below = (a[:, None] < b[None, :]).float() + 0.5 * (a[:, None] == b[None, :]).float()
    return float(below.mean())


def separation_interval(values: torch.Tensor, alpha: torch.Tensor, eps: float = metrics.GU_EPS,
                        draws: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float] | None:
    """(AUC, low, high): P(a sink head's value > an other head's value) over (L, H) heads -- :func:`separation` of
    ``-values`` -- with a percentile bootstrap interval at ``level``, sink heads and other heads resampled
    independently (``draws`` times, seeded). None when a group is empty (no pair of heads to compare)."""
    sink = alpha > eps
    a, b = values[sink].float().flatten(), values[~sink].float().flatten()
    if a.numel() == 0 or b.numel() == 0:
        return None

    def auc(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # x: (..., n), y: (..., m) -> (...)
        return ((x[..., :, None] > y[..., None, :]).float() + 0.5 * (x[..., :, None] == y[..., None, :]).float()
                ).mean(dim=(-2, -1))

    gen = torch.Generator().manual_seed(seed)
    boot = torch.cat([auc(a[torch.randint(len(a), (n, len(a)), generator=gen)],
                          b[torch.randint(len(b), (n, len(b)), generator=gen)])
                      for n in [min(100, draws - i) for i in range(0, draws, 100)]])
    tail = (1 - level) / 2
    lo, hi = torch.quantile(boot, torch.tensor([tail, 1 - tail], dtype=boot.dtype)).tolist()
    return float(auc(a, b)), lo, hi


def sink_vs_other(values: dict[str, torch.Tensor], alpha: torch.Tensor, eps: float = metrics.GU_EPS,
                  stat: str = "mean") -> dict[str, tuple[float | None, float | None]]:
    """Summarise per-head statistics (L, H) over sink heads (alpha > eps) and the other heads.

    Returns {name: (statistic over sink heads, statistic over the others)}; None where a group is empty (the
    statistic of no head does not exist).
    ``stat``: "mean" or "median".
    """
    sink = alpha > eps

    def summary(t: torch.Tensor) -> float | None:
        if t.numel() == 0:
            return None
        return float(t.float().mean() if stat == "mean" else t.float().median())

    return {name: (summary(v[sink]), summary(v[~sink])) for name, v in values.items()}


# ----------------------------------------------------------------------------------------------- the two measurements
@dataclass
class BiasTest:
    """Sun et al.'s intervention on one model: perplexities (original, every site set to its mean, set to zero,
    position 0 only set to its mean), the site means, and how many entries the zero edit overwrote."""

    ppl: dict[str, float]
    means: MassiveMeans | None  # None: no massive activation to edit (no onset layer or no dimension)
    edited: int


def bias_test(lm: LoadedModel, calibration: torch.Tensor, heldout: torch.Tensor, layers: list[int], dims: list[int],
              min_ratio: float = metrics.SUN_MIN_RATIO, batch_size: int = 16,
              means: MassiveMeans | MassiveMeansByLayer | None = None, first_only: bool = True) -> BiasTest:
    """Perplexity on ``heldout`` with the massive activations in ``layers`` x ``dims`` (located at every position by
    :func:`sinklib.core.metrics.massive_mask` with ``min_ratio``) set to their per-site mean over ``calibration``
    (:func:`massive_means`) or to zero (locuslab/massive-activations ``lib/hook.py``). With nothing to edit, every
    edit is the original model: the perplexities are equal, so "set to zero breaks it" cannot hold.

    ``batch_size`` windows per forward for the calibration; the perplexities use :func:`nll_batch_size` (the same
    numbers, each window's NLL does not depend on its batch). ``means``: the calibration's means when they were
    already measured (:class:`MassiveMeanStats` in a shared pass over ``calibration`` with these dims and
    ``min_ratio``), else measured here. ``first_only=False`` skips "set to mean, position 0 only" (not part of the
    rule: a redrawn test needs only the three perplexities the verdict reads)."""
    nll_batch = nll_batch_size(lm, heldout.shape[1], batch_size)
    original = evaluation.perplexity(lm, heldout, nll_batch)
    if not layers or not dims:
        return BiasTest({"original": original, "set to mean": original, "set to zero": original,
                         "set to mean, position 0 only": original}, None, 0)
    if means is None:
        means = massive_means(lm, calibration, layers, dims, min_ratio, batch_size)
    elif isinstance(means, MassiveMeansByLayer):
        means = means.select(layers)
    to_mean = ResidualOverride(lm.model, layers, dims, means.first, min_ratio=min_ratio,
                               other_values=means.other_or_first())
    to_zero = ResidualOverride(lm.model, layers, dims, 0.0, min_ratio=min_ratio)
    ppl = {"original": original,
           "set to mean": evaluation.perplexity(lm, heldout, nll_batch, to_mean),
           "set to zero": evaluation.perplexity(lm, heldout, nll_batch, to_zero)}
    if first_only:
        at_first = ResidualOverride(lm.model, layers, dims, means.first, positions=[0])
        ppl["set to mean, position 0 only"] = evaluation.perplexity(lm, heldout, nll_batch, at_first)
    return BiasTest(ppl, means, to_zero.edited)


CPU_NLL_TOKENS = 1024  # tokens per perplexity forward on a CPU


def nll_batch_size(lm: LoadedModel, seq_len: int, batch_size: int) -> int:
    """Windows per perplexity forward: ``batch_size``, except on a CPU, where at most :data:`CPU_NLL_TOKENS` tokens
    (at least one window). The forward's (B, T, V) float32 logits and their log-softmax are each B T V values --
    about 1 GB for 20 windows of 256 tokens of a 49k vocabulary; in batches of ~1k tokens they stay ~200 MB and the
    perplexity runs ~15% faster on one CPU thread. Each window's NLL does not depend on the batch (float rounding)."""
    if lm.device.type != "cpu":
        return batch_size
    return max(1, min(batch_size, CPU_NLL_TOKENS // max(seq_len, 1)))


def implicit_bias_separation(bias: dict[str, torch.Tensor], eps: float = metrics.GU_EPS) -> tuple[dict, int]:
    """From :func:`sink_as_bias`: the separation (:func:`separation`) of sink heads from the others on the value-norm
    ratio and the term's spread, and the number of sink heads (alpha_first > eps)."""
    auc = {k: separation(bias[k], bias["alpha_first"], eps) for k in ("value_norm_ratio", "sink_term_spread")}
    return auc, int((bias["alpha_first"] > eps).sum())
