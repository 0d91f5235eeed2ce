"""The structural-origin chain of the first-token sink (arXiv 2605.06611), measured (Sun et al.'s bias view of the
same sink is in :mod:`sinklib.interpretation.massive_activations`).

Each function takes a loaded model and token ids, runs the forwards it needs under :class:`~sinklib.core.capture.Capture`
(and, where asked, an intervention), and returns plain tensors / dataclasses for plotting and JSON. The statistics are
also :class:`Statistic` s, so that :func:`measure` can read several from one forward per batch (``chain.natural_pass``);
:func:`forward` runs a forward for its captures only (the LM head on the last position, optionally stopping after a
block).
Shapes: N sequences, T positions, L layers, H heads, F MLP neurons, d model width.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from sinklib.core import metrics
from sinklib.core.capture import Capture
from sinklib.core.errors import WrongFamilyError
from sinklib.core.loaded import LoadedModel


def require_gated_mlp(lm: LoadedModel, where: str) -> None:
    """The chain is stated for SwiGLU FFNs (gate, up, down projections) in every block: raise a one-line error
    otherwise (DeepSeek-V2's dense first block is one, its later MoE blocks are not)."""
    other = [p.mlp for p in lm.adapter.layers
             if p.mlp is None or not all(hasattr(p.mlp, n) for n in ("gate_proj", "up_proj", "down_proj"))]
    if other:
        mlp = other[0]
        raise WrongFamilyError(
            f"{where} needs a Llama/Mistral/Qwen-style model with a gated MLP (gate_proj, up_proj, down_proj); "
            f"{lm.name!r} has {type(mlp).__name__}. Use smollm2-135m or a Llama-family hub id."
        )


def batches(ids: torch.Tensor, size: int):
    """Consecutive slices of ``size`` sequences: (N, T) -> (size, T), ..., the last one shorter."""
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


class _Stopped(Exception):
    """Raised by :func:`forward`'s hook once the last block a capture needs has run."""


def forward(lm: LoadedModel, ids: torch.Tensor, last_layer: int | None = None, **kwargs):
    """Run ``ids`` (B, T) through the model for what a :class:`~sinklib.core.capture.Capture` (or an intervention)
    around the call records, not for its predictions: returns the model's output (None when stopped early).

    The language-model head runs on the last position only (``logits_to_keep=1``, where the model's forward takes
    it: (B, 1, V) logits instead of (B, T, V), about a fifth of a small model's compute), and with ``last_layer``
    the forward stops right after that block's forward hooks have run: blocks 0..last_layer compute exactly what a
    full forward computes, the later ones are skipped. ``kwargs`` go to the model (e.g. ``past_key_values``).
    """
    if _takes_logits_to_keep(type(lm.model)):
        kwargs.setdefault("logits_to_keep", 1)
    kwargs.setdefault("use_cache", False)
    handle = None
    if last_layer is not None and last_layer < len(lm.adapter.layers) - 1:
        def stop(module, args, output):
            raise _Stopped
        handle = lm.adapter.layers[last_layer].block.register_forward_hook(stop)  # after the hooks entered before
    try:
        return lm.model(ids.to(lm.device), **kwargs)
    except _Stopped:
        return None
    finally:
        if handle is not None:
            handle.remove()


_LOGITS_TO_KEEP: dict[type, bool] = {}


def _takes_logits_to_keep(cls: type) -> bool:
    if cls not in _LOGITS_TO_KEEP:
        _LOGITS_TO_KEEP[cls] = "logits_to_keep" in inspect.signature(cls.forward).parameters
    return _LOGITS_TO_KEEP[cls]


class Statistic:
    """Something measured on a model's forwards batch by batch: the capture ``kinds`` it reads (every layer),
    :meth:`update` once per batch, :meth:`result` at the end. :func:`measure` feeds several from one forward per
    batch, so statistics of the same windows share their forwards.

    ``reduce``: kind -> fn(tensor, layer), what the statistic keeps of a kind (as
    :class:`~sinklib.core.capture.Capture`'s ``reduce``); :meth:`update` reads the reduced tensors. ``last_layer``:
    the last block it reads (None: every block; the forward may stop there)."""

    kinds: tuple[str, ...] = ()
    reduce: dict = {}
    last_layer: int | None = None

    def update(self, cap: Capture, batch: torch.Tensor, start: int) -> None:
        """One batch: ``batch`` (B, T) holds sequences start..start+B-1 of the ids."""
        raise NotImplementedError

    def result(self):
        raise NotImplementedError


@torch.inference_mode()
def measure(lm: LoadedModel, ids: torch.Tensor, statistics: list[Statistic], batch_size: int = 16,
            intervention=None) -> list:
    """Run ``ids`` (N, T) in batches of ``batch_size`` once, under ``intervention`` if given, and hand every batch's
    capture (the union of the statistics' kinds) to each statistic; returns their results in order. A statistic
    that depends on the batch (a per-batch median, an edit's batch mean) sees the same batches as when run alone."""
    kinds = sorted({kind for stat in statistics for kind in stat.kinds})
    last = [stat.last_layer for stat in statistics]
    last_layer = None if None in last else max(last)
    alone = len(statistics) == 1  # one statistic: reduce in the capture (only the reduction is ever held)
    for start in range(0, len(ids), batch_size):
        batch = ids[start:start + batch_size]
        with Capture(lm, kinds=kinds, reduce=statistics[0].reduce if alone else None) as cap:
            if intervention is None:
                forward(lm, batch, last_layer=last_layer)
            else:
                with intervention:
                    forward(lm, batch, last_layer=last_layer)
        for stat in statistics:
            stat.update(cap if alone else _Reduced(cap, stat.reduce), batch, start)
        del cap  # the next batch's capture replaces it
    return [stat.result() for stat in statistics]


class _Reduced:
    """A batch's capture as one :class:`Statistic` reads it: its ``reduce`` applied to what it gets."""

    def __init__(self, cap: Capture, reduce: dict):
        self.cap, self.reduce, self.layers = cap, reduce, cap.layers

    def get(self, kind: str, layer: int) -> torch.Tensor:
        x = self.cap.get(kind, layer)
        return self.reduce[kind](x, layer) if kind in self.reduce else x

    def stack(self, kind: str) -> torch.Tensor:
        return torch.stack([self.get(kind, i) for i in sorted(self.layers)])


def leading_rows(batch: torch.Tensor, start: int, n: int | None) -> slice | None:
    """The rows of this batch among the first ``n`` sequences (None: all of them), or None when there are none."""
    if n is None:
        return slice(None)
    return slice(0, min(len(batch), n - start)) if start < n else None


# ----------------------------------------------------------------------------------------------- 1 variance
@torch.inference_mode()
def variance_by_position(lm: LoadedModel, ids: torch.Tensor, layers: list[int]) -> dict[str, torch.Tensor]:
    """Per-position variance across sequences of head outputs before and after W_O, in ``layers``.

    Returns ``before_wo`` and ``after_wo``, each (len(layers), T): v_t = mean over channels of Var_n[o_{n,t}]
    (heads' channels pooled before W_O; model channels after).
    """
    parts = lm.adapter.layers
    with Capture(lm, head_outputs=True, layers=layers) as cap:
        forward(lm, ids, last_layer=max(layers))  # the later blocks are not needed
    before, after = [], []
    for layer in layers:
        o = cap.get("head_outputs", layer)  # (N, T, H, hd)
        before.append(metrics.position_variance(o))
        after.append(metrics.position_variance(parts[layer].o_proj(o.flatten(-2).to(lm.device)).cpu()))  # (N,T,d)
    return {"before_wo": torch.stack(before), "after_wo": torch.stack(after)}


# ----------------------------------------------------------------------------------------------- 2 super neurons
@dataclass
class SuperNeuron:
    """An MLP neuron that fires (almost) only on the first token, with an outsized activation."""

    layer: int
    neuron: int
    first_abs: float  # mean |a| at position 0
    rest_abs: float  # its activation elsewhere: the q-quantile of |a| over all positions t >= 1 of all sequences
    vs_median: float  # first_abs / median |a| over all neurons and tokens of the layer
    write_dims: list[int]  # residual dimensions its W_down column writes most into
    write_share: float  # fraction of the column's squared norm in those dimensions (channel sparsity)

    @property
    def selectivity(self) -> float:
        return self.first_abs / max(self.rest_abs, 1e-12)

    def as_dict(self) -> dict:
        return {**self.__dict__, "selectivity": self.selectivity}


REST_QUANTILE = 0.95  # super-neuron selectivity: first-token |a| against this quantile of |a| at t >= 1


def find_super_neurons(
    lm: LoadedModel, ids: torch.Tensor, min_vs_median: float = 100.0, min_selectivity: float = 10.0,
    top_write: int = 2, batch_size: int = 16, rest_quantile: float = REST_QUANTILE,
) -> list[SuperNeuron]:
    """Neurons with first-token |activation| >= ``min_vs_median`` x the layer's median |a| and >= ``min_selectivity``
    x their activation elsewhere, sorted by first-token magnitude.

    "Elsewhere" is the ``rest_quantile`` quantile of |a| pooled over all positions t >= 1 of all sequences, not the
    maximum: Sun et al. (arXiv 2402.17762) find the same massive dimensions firing on the first delimiter ("." or
    newline) as on the first token, one position per window (1.6% of positions at T = 64), and a maximum would then
    reject the published neuron (Llama-2-7B layer 1, neuron 7890) with a selectivity near 1. The 0.95 quantile
    tolerates such firing on up to 5% of the other positions and still rejects a neuron that fires broadly.
    Activations a = SiLU(x W_gate) * (x W_up) (the input of W_down); the write direction is the neuron's column of
    W_down, whose ``top_write`` largest-|w| entries name the residual dimensions it feeds. The layer's median |a| is
    the mean of the per-batch medians.
    """
    stat = SuperNeuronStats(lm, min_vs_median, min_selectivity, top_write, rest_quantile)
    return measure(lm, ids, [stat], batch_size)[0]


class SuperNeuronStats(Statistic):
    """:func:`find_super_neurons` as a :class:`Statistic` (per batch: the first token's |a|, the later positions' |a|
    in float16 for the pooled quantile, the batch median)."""

    kinds = ("mlp_activations",)

    def __init__(self, lm: LoadedModel, min_vs_median: float = 100.0, min_selectivity: float = 10.0,
                 top_write: int = 2, rest_quantile: float = REST_QUANTILE):
        self.parts = lm.adapter.layers
        self.min_vs_median, self.min_selectivity = min_vs_median, min_selectivity
        self.top_write, self.rest_quantile = top_write, rest_quantile
        L = len(self.parts)
        self.firsts, self.rests, self.medians = [[] for _ in range(L)], [[] for _ in range(L)], [[] for _ in range(L)]

    def update(self, cap: Capture, batch: torch.Tensor, start: int) -> None:
        for i in range(len(self.parts)):
            a = cap.get("mlp_activations", i).float().abs()  # (B, T, F)
            self.firsts[i].append(a[:, 0])
            self.rests[i].append(a[:, 1:].flatten(0, 1).half())  # (B (T-1), F), kept for the pooled quantile
            self.medians[i].append(a.median())

    def result(self) -> list[SuperNeuron]:
        found = []
        for i, part in enumerate(self.parts):
            first = torch.cat(self.firsts[i]).mean(0)  # (F,)
            rest = rest_level(torch.cat(self.rests[i]).float(), self.rest_quantile)
            med = torch.stack(self.medians[i]).mean()
            for f in select_super_neurons(first, rest, med, self.min_vs_median, self.min_selectivity).tolist():
                w = part.down_proj.weight[:, f].float().cpu()  # (d,) column of W_down
                top = (w ** 2).topk(self.top_write)
                found.append(SuperNeuron(i, f, float(first[f]), float(rest[f]), float(first[f] / med),
                                         top.indices.tolist(), float(top.values.sum() / (w ** 2).sum())))
        return sorted(found, key=lambda s: -s.first_abs)


def rest_level(rest: torch.Tensor, q: float = REST_QUANTILE) -> torch.Tensor:
    """Per neuron, the q-quantile (nearest rank) of |a| over positions t >= 1: rest (M, F) pooled -> (F,)."""
    k = 1 + int(round(q * (rest.shape[0] - 1)))
    return rest.T.contiguous().kthvalue(k, dim=1).values  # along contiguous rows: the same values, twice as fast


def select_super_neurons(first: torch.Tensor, rest: torch.Tensor, median: torch.Tensor | float,
                         min_vs_median: float = 100.0, min_selectivity: float = 10.0) -> torch.Tensor:
    """Indices f with first[f] >= min_vs_median * median and first[f] >= min_selectivity * rest[f].

    first: (F,) mean |a| at position 0; rest: (F,) its level elsewhere (:func:`rest_level`); median: the layer's median
    |a|.
    """
    keep = (first >= min_vs_median * median) & (first >= min_selectivity * rest)
    return keep.nonzero().flatten()


@torch.inference_mode()
def neuron_by_position(lm: LoadedModel, ids: torch.Tensor, layer: int, neuron: int) -> dict[str, torch.Tensor]:
    """For one neuron: mean |activation| per position, and cosines between the normalised MLP input x_t and the
    neuron's gate and up weight rows, cos(x_t, w) = x_t . w / (|x_t| |w|), averaged over sequences. Each (T,)."""
    mlp = lm.adapter.layers[layer].mlp
    with Capture(lm, kinds=("mlp_activations", "mlp_inputs"), layers=[layer]) as cap:
        forward(lm, ids, last_layer=layer)
    a = cap.get("mlp_activations", layer)[..., neuron].float()  # (N, T)
    x = cap.get("mlp_inputs", layer).float()  # (N, T, d)
    out = {"activation": a.abs().mean(0)}
    for name in ("gate_proj", "up_proj"):
        proj = getattr(mlp, name, None)
        if proj is not None:
            w = proj.weight[neuron].float().cpu()  # (d,)
            out[f"cos_{name.split('_')[0]}"] = torch.nn.functional.cosine_similarity(x, w, dim=-1).mean(0)
    return out


# ----------------------------------------------------------------------------------------------- 3 disparity
def disparity_by_layer(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 16) -> dict[str, torch.Tensor]:
    """Per layer l (L,), every tensor named by what it is (0-based layers):

    * ``dom_first`` / ``dom_rest``: DomRatio of the residual stream h^l *after* layer l (first token / mean of the
      others); ``norm_first`` / ``norm_rest``: |h^l|;
    * ``dom_normed_first`` / ``dom_normed_rest``: DomRatio of the same h^l after the next layer's RMSNorm (with its
      gain), i.e. the normalised input that layer l+1's attention reads -- aligned with h^l, so both curves at x = l
      describe the same state; NaN at the last layer (no attention reads it);
    * ``alpha_first``: alpha of the first token in layer l's attention.
    """
    return disparity_and_first_values(lm, ids, [], batch_size)[0]


def disparity_and_first_values(lm: LoadedModel, ids: torch.Tensor, dims: list[int], batch_size: int = 16
                               ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """:func:`disparity_by_layer` and, read from the same forwards, the first token's mean signed value on residual
    dimensions ``dims`` after each layer, (L, len(dims)) -- what
    :func:`sinklib.interpretation.massive_activations.first_token_values` measures (mean over sequences, in float64).
    """
    return measure(lm, ids, [DisparityStats(dims)], batch_size)[0]


class DisparityStats(Statistic):
    """:func:`disparity_and_first_values` as a :class:`Statistic`."""

    kinds = ("attentions", "hidden_states", "attn_inputs")
    reduce = {"attentions": lambda a, i: metrics.alpha(a, 0)}  # (B, H)
    names = ("dom_first", "dom_rest", "dom_normed_first", "dom_normed_rest", "norm_first", "norm_rest",
             "alpha_first")

    def __init__(self, dims: list[int]):
        self.dims = list(dims)
        self.acc = {k: [] for k in self.names}
        self.firsts = []

    def update(self, cap: Capture, batch: torch.Tensor, start: int) -> None:
        h = cap.stack("hidden_states")  # (L, B, T, d): h^l, residual after block l
        self.firsts.append(h[:, :, 0, self.dims].double())  # (L, B, len(dims))
        h = h.float()
        x = cap.stack("attn_inputs").float()  # (L, B, T, d): x^l = RMSNorm_l(h^{l-1}) * g_l, read by block l
        dom, norm = metrics.dom_ratio(h), h.norm(dim=-1)  # (L, B, T)
        nan = torch.full_like(dom[:1], float("nan"))
        domn = torch.cat([metrics.dom_ratio(x[1:]), nan])  # (L, B, T): entry l = RMSNorm_{l+1}(h^l), aligned
        for name, t in (("dom", dom), ("dom_normed", domn), ("norm", norm)):
            self.acc[f"{name}_first"].append(t[:, :, 0])
            self.acc[f"{name}_rest"].append(t[:, :, 1:].mean(-1))
        self.acc["alpha_first"].append(cap.stack("attentions").mean(-1))  # (L, B): alpha_0, mean over heads

    def result(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        return ({k: torch.cat(v, dim=1).mean(dim=1) for k, v in self.acc.items()},
                torch.cat(self.firsts, dim=1).mean(dim=1).float())


# ----------------------------------------------------------------------------------------------- 4 lock-in
def lock_in(lm: LoadedModel, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per head (L, H): |cos| between the first token's key and the top right-singular vector of the queries at
    positions t >= 1, the fraction of positive scores q_t . k_0 (t >= 1), and alpha of the first token."""
    return measure(lm, ids, [LockInStats(lm)], len(ids))[0]


class LockInStats(Statistic):
    """:func:`lock_in` as a :class:`Statistic`, on the first ``max_seqs`` sequences (None: all)."""

    kinds = ("attentions", "queries", "keys")
    reduce = {"attentions": lambda a, i: metrics.alpha(a, 0)}  # (B, H)

    def __init__(self, lm: LoadedModel, max_seqs: int | None = None):
        self.L, self.H, self.group = lm.n_layers, lm.n_heads, lm.n_heads // lm.n_kv_heads
        self.max_seqs = max_seqs
        self.q, self.k0, self.alpha = [], [], []

    def update(self, cap: Capture, batch: torch.Tensor, start: int) -> None:
        rows = leading_rows(batch, start, self.max_seqs)
        if rows is None:
            return
        layers = sorted(cap.layers)
        self.q.append(torch.stack([cap.get("queries", i)[rows] for i in layers]))  # (L, B, H, T, hd)
        self.k0.append(torch.stack([cap.get("keys", i)[rows, :, 0] for i in layers]))  # (L, B, H_kv, hd)
        self.alpha.append(cap.stack("attentions")[:, rows])  # (L, B, H): alpha_0

    def result(self) -> dict[str, torch.Tensor]:
        queries, keys = torch.cat(self.q, dim=1), torch.cat(self.k0, dim=1)
        cos, pos = torch.zeros(self.L, self.H), torch.zeros(self.L, self.H)
        for i in range(self.L):
            q = queries[i].float()  # (N, H, T, hd)
            k0 = keys[i].float()  # (N, H_kv, hd)
            for h in range(self.H):
                kh = k0[:, h // self.group]  # (N, hd)
                qh = q[:, h, 1:]  # (N, T-1, hd)
                top = torch.linalg.svd(qh.flatten(0, 1), full_matrices=False).Vh[0]  # (hd,)
                cos[i, h] = torch.nn.functional.cosine_similarity(top, kh.mean(0), dim=0).abs()
                pos[i, h] = (torch.einsum("ntd,nd->nt", qh, kh) > 0).float().mean()
        return {"key_query_cos": cos, "positive_fraction": pos, "alpha_first": torch.cat(self.alpha, dim=1).mean(1)}
