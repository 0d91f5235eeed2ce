"""What the interventions of the structural-origin chain (arXiv 2605.06611, links 5-6) do, and why they work or not.

* :func:`alpha_at` -- the sink score of a position, optionally under an intervention (:class:`ScoreStats` as a
  statistic of a shared pass); :func:`amplified_alpha` -- the same under head-output amplification of token k, with
  positions 0..k-1 run once into a KV cache;
* :func:`token_state` / :func:`takes_first_token_state` -- does token k take on the first token's state (DomRatio,
  key direction) when an intervention should make it a sink?
* :func:`without_bos` / :func:`sink_follows_bos` -- on a model that prepends a BOS: is its sink the position or the
  token?

Shapes: N sequences, T positions, L layers, H heads.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from sinklib.core import metrics
from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation.interventions import HeadOutputAmplification, SelfOnlyAttention
from sinklib.interpretation.origin import Statistic, batches, forward, measure


@torch.inference_mode()
def alpha_at(lm: LoadedModel, ids: torch.Tensor, key: int, intervention=None, batch_size: int = 16,
             later_only: bool = False, per_sequence: bool = False) -> torch.Tensor:
    """alpha_key per (layer, head), mean over sequences -> (L, H); optionally under an intervention.

    ``later_only``: score only queries t > key (see :func:`sinklib.core.metrics.alpha`). ``per_sequence``: keep the
    sequences apart -> (L, N, H)."""
    per_seq, _ = _scored_pass(lm, ids, intervention, batch_size, key=key, later_only=later_only)
    return per_seq if per_sequence else per_seq.mean(dim=1)


@torch.inference_mode()
def token_state(lm: LoadedModel, ids: torch.Tensor, k: int, intervention=None,
                batch_size: int | None = None) -> dict[str, torch.Tensor]:
    """What token k looks like next to the first token, per layer (L,), optionally under an intervention -- to tell
    *why* an intervention does or does not make k a sink:

    * ``dom_k`` / ``dom_0``: DomRatio of the residual h^l at k and at 0 (does k get the first token's one-hot state?);
    * ``key_cos``: cos(key_k, key_0) per layer, mean over KV heads and sequences (does k's key point where the sink's
      does? with QK-norm the key's norm is fixed, so only its direction can make a sink);
    * ``key_norm_ratio``: |key_k| / |key_0|.

    ``batch_size``: None (default) runs all of ``ids`` in one forward -- what an edit whose statistics depend on the
    batch (:class:`~sinklib.interpretation.interventions.HeadOutputAmplification`'s batch mean) is measured on.
    """
    return _scored_pass(lm, ids, intervention, batch_size or len(ids), state_of=k)[1]


def _scored_pass(lm: LoadedModel, ids: torch.Tensor, intervention=None, batch_size: int = 16, key: int | None = None,
                 later_only: bool = False, state_of: int | None = None
                 ) -> tuple[torch.Tensor | None, dict[str, torch.Tensor] | None]:
    """The forwards behind :func:`alpha_at` and :func:`token_state`: :class:`ScoreStats` alone."""
    return measure(lm, ids, [ScoreStats(key, later_only, state_of)], batch_size, intervention)[0]


class ScoreStats(Statistic):
    """:func:`alpha_at` (per sequence) and :func:`token_state` as one :class:`~sinklib.interpretation.origin.Statistic`:
    with ``key``, alpha_key per (layer, sequence, head) (L, N, H); with ``state_of`` = k, token k's state next to the
    first token's. Keeps only what is read: alpha, and the residual and keys at positions 0 and k."""

    def __init__(self, key: int | None = None, later_only: bool = False, state_of: int | None = None):
        self.key, self.later_only, self.state_of = key, later_only, state_of
        self.kinds, self.reduce = (), {}
        if key is not None:
            self.kinds += ("attentions",)
            self.reduce["attentions"] = lambda a, i: metrics.alpha(a, key, later_only)  # (B, H)
        if state_of is not None:
            where = [0, state_of]
            self.kinds += ("hidden_states", "keys")
            self.reduce["hidden_states"] = lambda h, i: h[:, where]  # (B, 2, d)
            self.reduce["keys"] = lambda x, i: x[:, :, where]  # (B, H_kv, 2, hd)
        self.alpha, self.h, self.keys = [], [], []

    def update(self, cap: Capture, batch: torch.Tensor, start: int) -> None:
        if self.key is not None:
            self.alpha.append(cap.stack("attentions"))  # (L, B, H)
        if self.state_of is not None:
            self.h.append(cap.stack("hidden_states"))  # (L, B, 2, d)
            self.keys.append(cap.stack("keys"))  # (L, B, H_kv, 2, hd)

    def result(self) -> tuple[torch.Tensor | None, dict[str, torch.Tensor] | None]:
        alpha = torch.cat(self.alpha, dim=1) if self.key is not None else None  # (L, N, H)
        if self.state_of is None:
            return alpha, None
        h = torch.cat(self.h, dim=1).float()  # (L, N, 2, d): positions 0 and k
        keys = torch.cat(self.keys, dim=1).float()  # (L, N, H_kv, 2, hd)
        k0, kk = keys[..., 0, :], keys[..., 1, :]
        return alpha, {"dom_k": metrics.dom_ratio(h[:, :, 1]).mean(1), "dom_0": metrics.dom_ratio(h[:, :, 0]).mean(1),
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
    def mean(name: str) -> float | None:  # None: no sink layer to average over
        a = result[name]["alpha_first_by_layer"]
        return sum(a[i] for i in layers) / len(layers) if layers else None

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
        return {"dom_k": None, "dom_0": None, "key_cos": None, "holds": None}  # no layer to average over
    dom_k, dom_0 = float(state["dom_k"][layers].mean()), float(state["dom_0"][layers].mean())
    cos = float(state["key_cos"][layers].mean())
    close = dom_0 / dom_within <= dom_k <= dom_0 * dom_within
    return {"dom_k": dom_k, "dom_0": dom_0, "key_cos": cos, "holds": bool(close and cos > min_cos)}


# ----------------------------------------------------------------------------------------------- the two edits, scored
@dataclass
class SelfOnlyEffect:
    """Intervention (i) on one set of windows: alpha_k of the later queries t > k per (layer, head), before and after
    token k is made to attend only to itself, and the share of heads above eps (the sink rate of position k); from the
    same forwards, token k's state next to the first token's before and after (:func:`token_state`)."""

    alpha_before_per_seq: torch.Tensor  # (L, N, H): the unedited model, kept per window for the resampled sweep
    alpha_after: torch.Tensor  # (L, H)
    rate_before: float
    rate_after: float
    state_before: dict[str, torch.Tensor] | None = None  # token_state of the unedited model, each (L,)
    state_after: dict[str, torch.Tensor] | None = None  # token_state under the edit

    @property
    def alpha_before(self) -> torch.Tensor:
        return self.alpha_before_per_seq.mean(dim=1)


def self_only_effect(lm: LoadedModel, ids: torch.Tensor, k: int, batch_size: int = 16,
                     eps: float = metrics.GU_EPS, before: tuple | None = None) -> SelfOnlyEffect:
    """alpha_k (queries t > k) before and under :class:`~sinklib.interpretation.interventions.SelfOnlyAttention`;
    rate = mean over (layer, head) of [mean alpha_k over the windows > eps]. One forward per batch and edit gives
    both alpha_k and :func:`token_state` (the edit acts on each window alone, so batching does not change it).
    ``before``: the unedited model's ``ScoreStats(k, later_only=True, state_of=k)`` result on ``ids`` when a shared
    pass already measured it (:func:`sinklib.interpretation.origin.measure`), else measured here."""
    if before is None:
        before = _scored_pass(lm, ids, None, batch_size, key=k, later_only=True, state_of=k)
    before, state_before = before
    after, state_after = _scored_pass(lm, ids, SelfOnlyAttention(lm.model, k), batch_size, key=k, later_only=True,
                                      state_of=k)
    after = after.mean(dim=1)  # (L, H)
    return SelfOnlyEffect(before, after, float((before.mean(1) > eps).float().mean()),
                          float((after > eps).float().mean()), state_before, state_after)


CENTRED, SCALED = "o' = mu + lambda (o - mu)", "control: o' = lambda o"  # the two curves of intervention (ii)


def amplification_per_window(lm: LoadedModel, ids: torch.Tensor, k: int, lambdas: list[float], layers: list[int],
                             batch_size: int = 16, alpha_before: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Intervention (ii), per window: for each lambda, the later queries' (t > k) mean attention to key k over the
    heads of the layers after ``layers``, with token k's head outputs in ``layers`` amplified around its batch mean
    (o' = mu + lambda (o - mu), :data:`CENTRED`) and, as the control, scaled (o' = lambda o, :data:`SCALED`).
    Returns name -> (len(lambdas), N). lambda = 1 is the unedited model (``alpha_before`` (L, N, H), when given,
    saves that forward).

    The edit changes nothing before position k (causal attention), so each batch's positions 0..k-1 run once and
    every edit runs positions k..T-1 on their KV cache (:func:`amplified_alpha`)."""
    later = slice(max(layers) + 1, None)
    edits = [(lam, mode) for lam in lambdas if lam != 1 for mode in ("centered", "scale")]
    scored = dict(zip(edits, amplified_alpha(lm, ids, k, edits, layers, batch_size)))
    if any(lam == 1 for lam in lambdas) and alpha_before is None:
        alpha_before = alpha_at(lm, ids, k, batch_size=batch_size, later_only=True, per_sequence=True)
    curves: dict[str, list[torch.Tensor]] = {CENTRED: [], SCALED: []}
    for lam in lambdas:
        for name, mode in ((CENTRED, "centered"), (SCALED, "scale")):
            a = alpha_before if lam == 1 else scored[lam, mode]  # (L, N, H)
            curves[name].append(a[later].mean(dim=(0, 2)))  # (N,)
    return {name: torch.stack(v) for name, v in curves.items()}


@torch.inference_mode()
def amplified_alpha(lm: LoadedModel, ids: torch.Tensor, k: int, edits: list[tuple[float, str]], layers: list[int],
                    batch_size: int = 16) -> list[torch.Tensor]:
    """Per edit (lambda, mode) of :class:`~sinklib.interpretation.interventions.HeadOutputAmplification` on token k
    in ``layers``: alpha_k of the later queries t > k per (layer, sequence, head), (L, N, H) -- what
    ``alpha_at(lm, ids, k, HeadOutputAmplification(lm.model, k, lam, layers, mode), batch_size, later_only=True,
    per_sequence=True)`` returns, with the same batches (mu_k is each batch's mean).

    Positions 0..k-1 do not see token k, so they are the unedited model's in every edit: each batch runs them once
    into a KV cache, and each edit runs positions k..T-1 on a copy of it. Attention rows then hold queries k..T-1:
    alpha_k = mean over rows 1.. of column k."""
    T = ids.shape[1]
    if not 0 <= k < T - 1:
        raise ValueError(f"key {k} outside 0..{T - 2} (alpha of the later queries needs one)")
    reduce = {"attentions": lambda a, i: a[..., 1:, k].float().mean(dim=-1)}  # (B, H): queries k+1..T-1, key k
    out: list[list[torch.Tensor]] = [[] for _ in edits]
    for batch in batches(ids, batch_size):
        prefix = None
        if k > 0:
            prefix = forward(lm, batch[:, :k], use_cache=True).past_key_values  # (B, H_kv, k, hd) per layer
        for j, (lam, mode) in enumerate(edits):
            cache = copy.deepcopy(prefix)  # each edit extends its own copy
            with Capture(lm, attentions=True, reduce=reduce) as cap:
                with HeadOutputAmplification(lm.model, k, lam, layers, mode, start=k):
                    forward(lm, batch[:, k:], past_key_values=cache, use_cache=cache is not None)
            out[j].append(cap.stack("attentions"))  # (L, B, H)
    return [torch.cat(o, dim=1) for o in out]


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
