"""The structural-origin chain of the first-token sink (arXiv 2605.06611), measured (Sun et al.'s bias view of the
same sink is in :mod:`sinklib.interpretation.massive_activations`).

Each function takes a loaded model and token ids, runs the forwards it needs under :class:`~sinklib.core.capture.Capture`
(and, where asked, an intervention), and returns plain tensors / dataclasses for plotting and JSON.
Shapes: N sequences, T positions, L layers, H heads, F MLP neurons, d model width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sinklib.core import metrics
from sinklib.core.adapters import find_layers
from sinklib.core.capture import Capture
from sinklib.core.errors import WrongFamilyError
from sinklib.core.loaded import LoadedModel


def require_gated_mlp(lm: LoadedModel, where: str) -> None:
    """The chain is stated for SwiGLU FFNs (gate, up, down projections): raise a one-line error otherwise."""
    mlp = find_layers(lm.model)[0].mlp
    if mlp is None or not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
        raise WrongFamilyError(
            f"{where} needs a Llama/Mistral/Qwen-style model with a gated MLP (gate_proj, up_proj, down_proj); "
            f"{lm.name!r} has {type(mlp).__name__}. Use smollm2-135m or a Llama-family hub id."
        )


def batches(ids: torch.Tensor, size: int):
    """Consecutive slices of ``size`` sequences: (N, T) -> (size, T), ..., the last one shorter."""
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


# ----------------------------------------------------------------------------------------------- 1 variance
@torch.inference_mode()
def variance_by_position(lm: LoadedModel, ids: torch.Tensor, layers: list[int]) -> dict[str, torch.Tensor]:
    """Per-position variance across sequences of head outputs before and after W_O, in ``layers``.

    Returns ``before_wo`` and ``after_wo``, each (len(layers), T): v_t = mean over channels of Var_n[o_{n,t}]
    (heads' channels pooled before W_O; model channels after).
    """
    parts = find_layers(lm.model)
    with Capture(lm.model, head_outputs=True, layers=layers) as cap:
        lm.model(ids.to(lm.device), use_cache=False)
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


@torch.inference_mode()
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
    W_down, whose ``top_write`` largest-|w| entries name the residual dimensions it feeds.
    """
    parts = find_layers(lm.model)
    L = len(parts)
    firsts, rests, medians = [[] for _ in range(L)], [[] for _ in range(L)], [[] for _ in range(L)]
    for batch in batches(ids, batch_size):
        with Capture(lm.model, mlp_activations=True) as cap:
            lm.model(batch.to(lm.device), use_cache=False)
        for i in range(L):
            a = cap.get("mlp_activations", i).float().abs()  # (B, T, F)
            firsts[i].append(a[:, 0])
            rests[i].append(a[:, 1:].flatten(0, 1).half())  # (B (T-1), F), kept for the pooled quantile
            medians[i].append(a.median())
    found = []
    for i in range(L):
        first = torch.cat(firsts[i]).mean(0)  # (F,)
        rest = rest_level(torch.cat(rests[i]).float(), rest_quantile)
        med = torch.stack(medians[i]).mean()
        for f in select_super_neurons(first, rest, med, min_vs_median, min_selectivity).tolist():
            w = parts[i].down_proj.weight[:, f].float().cpu()  # (d,) column of W_down
            top = (w ** 2).topk(top_write)
            found.append(SuperNeuron(i, f, float(first[f]), float(rest[f]), float(first[f] / med),
                                     top.indices.tolist(), float(top.values.sum() / (w ** 2).sum())))
    return sorted(found, key=lambda s: -s.first_abs)


def rest_level(rest: torch.Tensor, q: float = REST_QUANTILE) -> torch.Tensor:
    """Per neuron, the q-quantile (nearest rank) of |a| over positions t >= 1: rest (M, F) pooled -> (F,)."""
    k = 1 + int(round(q * (rest.shape[0] - 1)))
    return rest.kthvalue(k, dim=0).values


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
    mlp = find_layers(lm.model)[layer].mlp
    with Capture(lm.model, kinds=("mlp_activations", "mlp_inputs"), layers=[layer]) as cap:
        lm.model(ids.to(lm.device), use_cache=False)
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
@torch.inference_mode()
def disparity_by_layer(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 16) -> dict[str, torch.Tensor]:
    """Per layer l (L,), every tensor named by what it is (0-based layers):

    * ``dom_first`` / ``dom_rest``: DomRatio of the residual stream h^l *after* layer l (first token / mean of the
      others); ``norm_first`` / ``norm_rest``: |h^l|;
    * ``dom_normed_first`` / ``dom_normed_rest``: DomRatio of the same h^l after the next layer's RMSNorm (with its
      gain), i.e. the normalised input that layer l+1's attention reads -- aligned with h^l, so both curves at x = l
      describe the same state; NaN at the last layer (no attention reads it);
    * ``alpha_first``: alpha of the first token in layer l's attention.
    """
    keys = ("dom_first", "dom_rest", "dom_normed_first", "dom_normed_rest", "norm_first", "norm_rest", "alpha_first")
    acc = {k: [] for k in keys}
    for batch in batches(ids, batch_size):
        with Capture(lm.model, kinds=("attentions", "hidden_states", "attn_inputs"),
                     reduce={"attentions": lambda a, i: metrics.alpha(a, 0)}) as cap:
            lm.model(batch.to(lm.device), use_cache=False)
        h = cap.stack("hidden_states").float()  # (L, B, T, d): h^l, residual after block l
        x = cap.stack("attn_inputs").float()  # (L, B, T, d): x^l = RMSNorm_l(h^{l-1}) * g_l, read by block l
        dom, norm = metrics.dom_ratio(h), h.norm(dim=-1)  # (L, B, T)
        nan = torch.full_like(dom[:1], float("nan"))
        domn = torch.cat([metrics.dom_ratio(x[1:]), nan])  # (L, B, T): entry l = RMSNorm_{l+1}(h^l), aligned
        for name, t in (("dom", dom), ("dom_normed", domn), ("norm", norm)):
            acc[f"{name}_first"].append(t[:, :, 0])
            acc[f"{name}_rest"].append(t[:, :, 1:].mean(-1))
        acc["alpha_first"].append(cap.stack("attentions").mean(-1))  # (L, B)
    return {k: torch.cat(v, dim=1).mean(dim=1) for k, v in acc.items()}


# ----------------------------------------------------------------------------------------------- 4 lock-in
@torch.inference_mode()
def lock_in(lm: LoadedModel, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per head (L, H): |cos| between the first token's key and the top right-singular vector of the queries at
    positions t >= 1, the fraction of positive scores q_t . k_0 (t >= 1), and alpha of the first token."""
    with Capture(lm.model, kinds=("attentions", "queries", "keys"),
                 reduce={"attentions": lambda a, i: metrics.alpha(a, 0)}) as cap:
        lm.model(ids.to(lm.device), use_cache=False)
    L, H = lm.n_layers, lm.n_heads
    group = H // lm.n_kv_heads
    cos, pos = torch.zeros(L, H), torch.zeros(L, H)
    for i in range(L):
        q = cap.get("queries", i).float()  # (N, H, T, hd)
        k0 = cap.get("keys", i).float()[:, :, 0]  # (N, H_kv, hd)
        for h in range(H):
            kh = k0[:, h // group]  # (N, hd)
            qh = q[:, h, 1:]  # (N, T-1, hd)
            top = torch.linalg.svd(qh.flatten(0, 1), full_matrices=False).Vh[0]  # (hd,)
            cos[i, h] = torch.nn.functional.cosine_similarity(top, kh.mean(0), dim=0).abs()
            pos[i, h] = (torch.einsum("ntd,nd->nt", qh, kh) > 0).float().mean()
    return {"key_query_cos": cos, "positive_fraction": pos, "alpha_first": cap.stack("attentions").mean(1)}
