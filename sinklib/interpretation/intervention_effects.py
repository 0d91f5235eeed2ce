"""What the interventions of the structural-origin chain (arXiv 2605.06611, links 5-6) do, and why they work or not.

* :func:`alpha_at` -- the sink score of a position, optionally under an intervention;
* :func:`token_state` / :func:`takes_first_token_state` -- does token k take on the first token's state (DomRatio,
  key direction) when an intervention should make it a sink?
* :func:`without_bos` / :func:`sink_follows_bos` -- on a model that prepends a BOS: is its sink the position or the
  token?

Shapes: N sequences, T positions, L layers, H heads.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from sinklib.core import metrics
from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation.interventions import HeadOutputAmplification, SelfOnlyAttention
from sinklib.interpretation.origin import batches


@torch.inference_mode()
def alpha_at(lm: LoadedModel, ids: torch.Tensor, key: int, intervention=None, batch_size: int = 16,
             later_only: bool = False, per_sequence: bool = False) -> torch.Tensor:
    """alpha_key per (layer, head), mean over sequences -> (L, H); optionally under an intervention.

    ``later_only``: score only queries t > key (see :func:`sinklib.core.metrics.alpha`). ``per_sequence``: keep the
    sequences apart -> (L, N, H)."""
    out = []
    reduce = {"attentions": lambda a, i: metrics.alpha(a, key, later_only)}
    for batch in batches(ids, batch_size):
        with Capture(lm.model, attentions=True, reduce=reduce) as cap:
            with intervention if intervention is not None else contextlib.nullcontext():
                lm.model(batch.to(lm.device), use_cache=False)
        out.append(cap.stack("attentions"))  # (L, B, H)
    per_seq = torch.cat(out, dim=1)
    return per_seq if per_sequence else per_seq.mean(dim=1)


@torch.inference_mode()
def token_state(lm: LoadedModel, ids: torch.Tensor, k: int, intervention=None) -> dict[str, torch.Tensor]:
    """What token k looks like next to the first token, per layer (L,), optionally under an intervention -- to tell
    *why* an intervention does or does not make k a sink:

    * ``dom_k`` / ``dom_0``: DomRatio of the residual h^l at k and at 0 (does k get the first token's one-hot state?);
    * ``key_cos``: cos(key_k, key_0) per layer, mean over KV heads and sequences (does k's key point where the sink's
      does? with QK-norm the key's norm is fixed, so only its direction can make a sink);
    * ``key_norm_ratio``: |key_k| / |key_0|.
    """
    with Capture(lm.model, kinds=("hidden_states", "keys")) as cap:
        with intervention if intervention is not None else contextlib.nullcontext():
            lm.model(ids.to(lm.device), use_cache=False)
    h = cap.stack("hidden_states").float()  # (L, N, T, d)
    keys = cap.stack("keys").float()  # (L, N, H_kv, T, hd)
    k0, kk = keys[..., 0, :], keys[..., k, :]
    return {"dom_k": metrics.dom_ratio(h[:, :, k]).mean(1), "dom_0": metrics.dom_ratio(h[:, :, 0]).mean(1),
            "key_cos": torch.nn.functional.cosine_similarity(kk, k0, dim=-1).mean(dim=(1, 2)),
            "key_norm_ratio": (kk.norm(dim=-1) / k0.norm(dim=-1).clamp_min(1e-12)).mean(dim=(1, 2))}


@torch.inference_mode()
def without_bos(lm: LoadedModel, num_seqs: int, seq_len: int, seed: int = 0, batch_size: int = 16) -> dict:
    """Is the first-token sink the *position* or the BOS *token*? The same Bible windows with and without the BOS
    the tokenizer prepends: mean alpha of position 0 per layer, and where the largest activation sits per layer
    (position and token) once BOS is gone. For a model that adds no BOS both runs are the same text.
    """
    from sinklib.core.analysis import profile_sinks
    from sinklib.core.data import text_windows

    out = {}
    for name, special in (("with_bos", True), ("without_bos", False)):
        ids = text_windows(lm.tokenizer, num_seqs, seq_len, seed, add_special_tokens=special)
        prof = profile_sinks(lm, ids, input_name=name, batch_size=batch_size, progress=False)
        out[name] = {"alpha_first_by_layer": prof.alpha_first_by_layer,
                     "largest": [{"position": e.position, "dim": e.dim, "value": e.value,
                                  "token": lm.tokenizer.decode([int(ids[e.seq, e.position])])}
                                 for e in prof.extremes]}
    return out


def sink_follows_bos(result: dict, layers: list[int], drop: float = 0.5) -> dict:
    """Rule on :func:`without_bos`'s result: the sink belongs to the BOS token (not to position 0) when, averaged over
    ``layers`` (the sink layers), position 0's alpha without BOS is below ``drop`` x its alpha with BOS.
    Also where the largest activations move once BOS is gone ((position, token) pairs at positions > 0)."""
    def mean(name: str) -> float:
        a = result[name]["alpha_first_by_layer"]
        return sum(a[i] for i in layers) / len(layers) if layers else float("nan")

    with_bos, without = mean("with_bos"), mean("without_bos")
    moved = sorted({(e["position"], e["token"]) for e in result["without_bos"]["largest"] if e["position"] > 0})
    return {"alpha_with_bos": with_bos, "alpha_without_bos": without, "largest_moved_to": moved,
            "holds": bool(without < drop * with_bos) if layers else None}


def takes_first_token_state(state: dict[str, torch.Tensor], layers: list[int], dom_within: float = 2.0,
                            min_cos: float = 0.9) -> dict:
    """Rule: token k has taken on the first token's state in ``layers`` (e.g. the sink layers) when its DomRatio is
    within ``dom_within``x of token 0's and cos(key_k, key_0) > ``min_cos``, both averaged over those layers.

    state: :func:`token_state`. Returns the averages and ``holds``. This is the mechanism the chain predicts for the
    self-only edit; where the edit makes no sink, this says whether the state never formed or formed but was ignored.
    """
    if not layers:
        return {"dom_k": float("nan"), "dom_0": float("nan"), "key_cos": float("nan"), "holds": None}
    dom_k, dom_0 = float(state["dom_k"][layers].mean()), float(state["dom_0"][layers].mean())
    cos = float(state["key_cos"][layers].mean())
    close = dom_0 / dom_within <= dom_k <= dom_0 * dom_within
    return {"dom_k": dom_k, "dom_0": dom_0, "key_cos": cos, "holds": bool(close and cos > min_cos)}


# ----------------------------------------------------------------------------------------------- the two edits, scored
@dataclass
class SelfOnlyEffect:
    """Intervention (i) on one set of windows: alpha_k of the later queries t > k per (layer, head), before and after
    token k is made to attend only to itself, and the share of heads above eps (the sink rate of position k)."""

    alpha_before_per_seq: torch.Tensor  # (L, N, H): the unedited model, kept per window for the resampled sweep
    alpha_after: torch.Tensor  # (L, H)
    rate_before: float
    rate_after: float

    @property
    def alpha_before(self) -> torch.Tensor:
        return self.alpha_before_per_seq.mean(dim=1)


def self_only_effect(lm: LoadedModel, ids: torch.Tensor, k: int, batch_size: int = 16,
                     eps: float = metrics.GU_EPS) -> SelfOnlyEffect:
    """alpha_k (queries t > k) before and under :class:`~sinklib.interpretation.interventions.SelfOnlyAttention`;
    rate = mean over (layer, head) of [mean alpha_k over the windows > eps]."""
    before = alpha_at(lm, ids, k, batch_size=batch_size, later_only=True, per_sequence=True)
    after = alpha_at(lm, ids, k, SelfOnlyAttention(lm.model, k), batch_size=batch_size, later_only=True)
    return SelfOnlyEffect(before, after, float((before.mean(1) > eps).float().mean()),
                          float((after > eps).float().mean()))


CENTRED, SCALED = "o' = mu + lambda (o - mu)", "control: o' = lambda o"  # the two curves of intervention (ii)


def amplification_per_window(lm: LoadedModel, ids: torch.Tensor, k: int, lambdas: list[float], layers: list[int],
                             batch_size: int = 16, alpha_before: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Intervention (ii), per window: for each lambda, the later queries' (t > k) mean attention to key k over the
    heads of the layers after ``layers``, with token k's head outputs in ``layers`` amplified around its batch mean
    (o' = mu + lambda (o - mu), :data:`CENTRED`) and, as the control, scaled (o' = lambda o, :data:`SCALED`).
    Returns name -> (len(lambdas), N). lambda = 1 is the unedited model (``alpha_before`` (L, N, H), when given,
    saves that forward)."""
    later = slice(max(layers) + 1, None)
    curves: dict[str, list[torch.Tensor]] = {CENTRED: [], SCALED: []}
    for lam in lambdas:
        for name, mode in ((CENTRED, "centered"), (SCALED, "scale")):
            if lam == 1:
                if alpha_before is None:
                    alpha_before = alpha_at(lm, ids, k, batch_size=batch_size, later_only=True, per_sequence=True)
                a = alpha_before
            else:
                a = alpha_at(lm, ids, k, HeadOutputAmplification(lm.model, k, lam, layers, mode),
                             batch_size=batch_size, later_only=True, per_sequence=True)
            curves[name].append(a[later].mean(dim=(0, 2)))  # (N,)
    return {name: torch.stack(v) for name, v in curves.items()}


def amplification_curves(per_window: dict[str, torch.Tensor], windows: torch.Tensor | None = None
                         ) -> dict[str, list[float]]:
    """The sweep's curves: per lambda, the mean over ``windows`` (indices, with repeats for a resample; default:
    all) of :func:`amplification_per_window`'s values."""
    return {name: (v if windows is None else v[:, windows]).mean(dim=1).tolist() for name, v in per_window.items()}


def amplification_over_resamples(lambdas: list[float], per_window: dict[str, torch.Tensor], n_draws: int = 10,
                                 seed: int = 0):
    """``origin.amplification_monotone`` judged on all windows and on ``n_draws - 1`` bootstrap resamples of them
    (windows drawn with replacement, generator seeded ``seed``; the forwards are not re-run -- mu_k stays the
    batch mean of the edit): holds only if every draw holds (:func:`sinklib.core.claims.over_draws`); spread: the
    centred curve's rise."""
    from sinklib.core.claims import over_draws
    from sinklib.interpretation import origin_claims

    n = next(iter(per_window.values())).shape[1]
    gen = torch.Generator().manual_seed(seed)
    picks = [None] + [torch.randint(0, n, (n,), generator=gen) for _ in range(n_draws - 1)]
    claims = [origin_claims.amplification(lambdas, c[CENTRED], c[SCALED])
              for c in (amplification_curves(per_window, w) for w in picks)]
    return over_draws(claims, f"all {n} windows and {n_draws - 1} bootstrap resamples of them",
                      key=lambda c: c.measured["rise"])
