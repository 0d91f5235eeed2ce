"""Attention calibration (ACT, Yu et al., arXiv 2406.15765): damp sinks beyond the first token in chosen heads and
give their mass back to the other tokens, as the authors' ``atten_process_eval`` does; and where it may apply.

ACT itself chooses heads by calibration *accuracy* on a labelled set (a head is kept when calibrating it improves
the answers); with no such set offline, :func:`non_first_sink_heads` is this project's proxy -- heads that have a
non-first sink at all -- and the notebook says so.
"""

from __future__ import annotations

import torch
from torch import nn

from sinklib.core import quantities as q
from sinklib.core.attention_switch import eager_for
from sinklib.core.attnstats import AttentionStats
from sinklib.core.claims import Claim
from sinklib.core.intervention import Intervention
from sinklib.core.loaded import LoadedModel

THRESHOLD = 0.1  # ACT's sink test: a key j >= 1 whose score sum_t A[t, j] / (T - j) exceeds it is a sink
BETA = 0.4  # ACT's damping: a sink entry becomes beta A[t, j]


def later_sink_keys(score: torch.Tensor, threshold: float, min_queries: int = 1) -> torch.Tensor:
    """Keys j >= 1 with ACT's score sum_t A[t, j] / (T - j) above ``threshold`` and seen by at least ``min_queries``
    queries under a causal mask (T - j >= min_queries). score: (..., T) -> (..., T) bool (key 0 never)."""
    T = score.shape[-1]
    seen = T - torch.arange(T, device=score.device)  # (T,) queries that see key j
    sink = (score > threshold) & (seen >= min_queries)
    sink[..., 0] = False
    return sink


@torch.inference_mode()
def act_key_scores(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 8) -> torch.Tensor:
    """ACT's score of every key in every head (GATECH-EIC/ACT, ``atten_process_eval``): the attention key j receives
    averaged over the queries that see it, sum_t A[t, j] / (T - j) under a causal mask.
    ids: (N, T) -> (N, L, H, T) float32."""
    out = []
    for start in range(0, len(ids), batch_size):
        batch = ids[start:start + batch_size].to(lm.device)
        with AttentionStats(lm) as st:
            lm.model(batch, use_cache=False, logits_to_keep=1)
        out.append(torch.stack([st.key_mass(i) for i in st.layers], dim=1).float().cpu())  # (B, L, H, T)
    return torch.cat(out)


def edge_min_queries(exceed: torch.Tensor) -> int:
    """How many queries must see a key before ACT's test may call it a sink, read off the calibration data.

    A key near the end of a causal window is seen by few queries, so its score sum_t A[t, j] / (T - j) averages a
    handful of weights (the last key's is A[T-1, T-1] alone) and passes the threshold without being a sink; the
    authors' code flags such keys too (it applies ACT to whole prompts). rate(j) = the share of (sequence, layer,
    head) in which key j passes; the interior keys T/4 <= j < 3T/4 show how often a key passes away from either end.
    A key of the last quarter whose rate exceeds *every* interior key's is the window's edge, not a sink; the cut is
    one more than the largest number of queries, T - j, that such a key has (1 -- the authors' rule -- if none).
    exceed: (..., T) bool, score > threshold -> int."""
    T = exceed.shape[-1]
    rate = exceed.reshape(-1, T).float().mean(0)  # (T,)
    interior = rate[T // 4: (3 * T) // 4]
    if not interior.numel():
        return 1
    tail = torch.arange((3 * T) // 4, T)
    edge = tail[rate[tail] > interior.max()]
    return int(T - edge.min()) + 1 if edge.numel() else 1


def non_first_sink_heads(scores: torch.Tensor, threshold: float = THRESHOLD, min_fraction: float = 0.5,
                         min_queries: int = 1) -> dict[int, list[int]]:
    """Heads in which some key j >= 1 passes ACT's sink test -- sum_t A[t, j] / (T - j) above ``threshold``
    (:func:`act_key_scores`) -- among the keys seen by at least ``min_queries`` queries (:func:`later_sink_keys`,
    :func:`edge_min_queries`), in at least ``min_fraction`` of the calibration sequences.
    scores: (N, L, H, T) -> {layer: [head, ...]}."""
    frac = later_sink_keys(scores, threshold, min_queries).any(dim=-1).float().mean(dim=0)  # (L, H)
    return {layer: heads for layer in range(frac.shape[0])
            if (heads := (frac[layer] >= min_fraction).nonzero().flatten().tolist())}


ACT_QUANTITIES = {"heads": q.count("heads"), "of": q.count("heads"),  # heads calibrated, of all heads
                  "min queries": q.count("queries"),  # edge_min_queries on the calibration text
                  "original": q.loss("ppl"), "ACT": q.loss("ppl"),  # held-out perplexity without / with ACT
                  "ACT / original": q.ratio()}  # [ratio, low, high]: the paired block-bootstrap interval


def act_claim(ppl: dict[str, float | None], n_heads: int, total_heads: int,
              interval: tuple[float, float, float] | None = None, min_queries: int = 1) -> Claim:
    """ACT (Yu et al., arXiv 2406.15765): calibrating the heads with hidden (non-first) sinks improves the model.

    Cannot be judged offline: ACT keeps a head only when calibrating it improves accuracy on a labelled set; here
    the heads are :func:`non_first_sink_heads` (a proxy), so the record carries the measured perplexities with
    ``holds = None`` and says what the proxy did: ``interval`` = (ppl(ACT) / ppl(original), low, high), the paired
    block-bootstrap interval over the held-out tokens (:func:`sinklib.core.evaluation.ppl_ratio_interval`) --
    "lowers" or "raises" only when it excludes 1. ``min_queries``: :func:`edge_min_queries` on the calibration
    text, recorded."""
    if interval is not None:
        ratio, low, high = interval
        word = "lowers" if high < 1 else "raises" if low > 1 else "does not measurably change"
        effect = (f"{word} held-out perplexity (ppl(ACT) / ppl(original) {ratio:.3f}, 95% interval [{low:.3f}, "
                  f"{high:.3f}])")
    else:
        helped = ppl.get("ACT") is not None and ppl["ACT"] < ppl["original"]
        effect = f"{'lowers' if helped else 'does not lower'} held-out perplexity"
    return Claim(id="yu2024.act_calibration_helps", source="Yu et al., ACT, arXiv 2406.15765",
                 statement="calibrating attention in heads with non-first sinks improves the model without training",
                 rule="not applied: ACT's accuracy-based head search needs a labelled set that is not offline",
                 published=None, measured={"heads": n_heads, "of": total_heads, "min queries": min_queries, **ppl,
                                           **({"ACT / original": list(interval)} if interval is not None else {})},
                 quantities=ACT_QUANTITIES,
                 holds=None,
                 note=f"proxy head choice ({n_heads} heads with a non-first sink) {effect}",
                 follows="Sec. 4 (a key j >= 1 is a sink when sum_t A[t, j] / (T - j) > 0.1; its attention becomes "
                         "beta A[t, j], beta 0.4, the rest redistributed; heads kept when calibrating them raises "
                         "accuracy on a calibration set); GATECH-EIC/ACT:models/llama_modelling_aug.py:"
                         "atten_process_eval",
                 adapted=f"heads chosen by a proxy (a non-first sink present), held-out perplexity instead of task "
                         f"accuracy, therefore never judged; a key counts as a sink only when at least "
                         f"{min_queries} queries see it -- the cut read off the calibration text "
                         f"(edge_min_queries: the last keys that pass more often than any interior key; the authors' "
                         f"code also flags them)",
                 control_note="control not run: the claim is not applied here (ACT's head search needs a labelled "
                              "set), so a random-weight verdict would be None as well",
                 at_init=False)  # the hidden sinks ACT damps are made by training


def act_sink_columns(weights: torch.Tensor, allowed: torch.Tensor, threshold: float,
                     min_queries: int = 1) -> torch.Tensor:
    """ACT's sink test (GATECH-EIC/ACT, ``atten_process_eval``): key j >= 1 is a sink when its column sum divided by
    the number of queries that see it, sum_t A[t, j] / (T - j) under a causal mask, exceeds ``threshold``; here also
    only when at least ``min_queries`` queries see it (1: the authors' rule; :func:`edge_min_queries` leaves out
    the window's last keys, whose score averages a handful of weights).

    weights: (B, H, T, N) probabilities; allowed: (B|1, 1, T, N) bool, may query t see key j -> (B, H, N) bool.
    The first key is never a sink here (the official code drops it with ``indices[1:]``).
    """
    seen = allowed.float().sum(dim=2)  # (B|1, 1, N)
    sink = (weights.float().sum(dim=2) / seen.clamp_min(1) > threshold) & (seen >= min_queries)  # (B, H, N)
    sink[..., 0] = False
    return sink


def act_bias(weights: torch.Tensor, sink: torch.Tensor, beta: float) -> torch.Tensor:
    """The additive logit bias that turns softmax into ACT's redistribution exactly.

    Official rule: sink entries become beta A[t, j]; the removed (1 - beta) S_t, S_t = sum_{j in sinks} A[t, j],
    goes to the other keys of row t in proportion to their weights, so they become A[t, j] (1 - beta S_t)/(1 - S_t).
    Softmax with a bias b_t on the sink columns scales sinks vs the rest by e^{b_t}; e^{b_t} = beta (1 - S_t) /
    (1 - beta S_t) reproduces both. weights: (B, H, T, N); sink: (B, H, N) -> (B, H, T, N) bias (0 off the sinks).
    """
    s = (weights.float() * sink[:, :, None, :]).sum(dim=-1, keepdim=True)  # (B, H, T, 1): S_t
    tiny = torch.finfo(torch.float32).tiny
    b = torch.log(beta * (1 - s).clamp_min(tiny)) - torch.log((1 - beta * s).clamp_min(tiny))
    return torch.where(sink[:, :, None, :], b, torch.zeros_like(b))


class AttentionCalibration(Intervention):
    """ACT (Yu et al., arXiv 2406.15765) in the heads ``heads`` = {layer: [head, ...]}, as the authors' code does it.

    In those heads (per sequence), key j >= 1 is a sink when sum_t A[t, j] / (number of queries that see j) exceeds
    ``threshold`` (:func:`act_sink_columns`); each sink entry becomes exactly beta A[t, j] and the removed mass
    (1 - beta) S_t goes to the other keys of row t -- the first token included -- in proportion to their attention
    (``atten_process_eval`` in GATECH-EIC/ACT). The edit is a per-row additive bias on the sink columns
    (:func:`act_bias`) handed to the model's own attention backend, so a surrounding Capture sees the calibrated
    attention. ACT chooses its heads by accuracy on a calibration set; which heads to pass is the caller's choice.
    ``min_queries``: a key must be seen by that many queries to be damped (1: the authors' rule).
    """

    def __init__(self, model: nn.Module, heads: dict[int, list[int]], beta: float = BETA, threshold: float = THRESHOLD,
                 min_queries: int = 1):
        super().__init__(model, list(heads))
        if not 0 < beta <= 1:
            raise ValueError("beta must be in (0, 1]")
        self.heads = {int(k): list(v) for k, v in heads.items()}
        self.beta, self.threshold, self.min_queries = float(beta), float(threshold), int(min_queries)
        self.damped = 0  # number of (sequence, head, key) sinks damped, summed over calls

    def _install(self) -> None:
        self._use_attention_function()

    def _attention(self, module, query, key, value, attention_mask, **kwargs):
        layer = self.adapter.index_of(module)
        if layer in self.heads and query.shape[2] > 1:
            attention_mask = self._mask(module, query, key, attention_mask)
            _, weights = eager_for(module)(module, query, key, value, attention_mask, **kwargs)  # (B, H, T, N)
            allowed = attention_mask > torch.finfo(attention_mask.dtype).min / 2  # (B, 1, T, N)
            chosen = torch.zeros(weights.shape[1], dtype=torch.bool, device=weights.device)
            chosen[self.heads[layer]] = True
            sink = act_sink_columns(weights, allowed, self.threshold, self.min_queries) & chosen[None, :, None]
            self.damped += int(sink.sum())
            attention_mask = attention_mask + act_bias(weights, sink, self.beta).to(attention_mask.dtype)
            self.calls += 1
        return self._delegate(module, query, key, value, attention_mask, **kwargs)

    def _edit_probabilities(self, layer: int, probs: torch.Tensor) -> torch.Tensor:
        """timm: ACT's rule applied to the probabilities themselves (sinks x beta, the rest rescaled)."""
        if layer not in self.heads or probs.shape[2] <= 1:
            return probs
        allowed = torch.ones(1, 1, *probs.shape[2:], dtype=torch.bool, device=probs.device)  # bidirectional
        chosen = torch.zeros(probs.shape[1], dtype=torch.bool, device=probs.device)
        chosen[self.heads[layer]] = True
        sink = act_sink_columns(probs, allowed, self.threshold, self.min_queries) & chosen[None, :, None]
        self.damped += int(sink.sum())
        self.calls += 1
        return act_redistribute(probs, sink, self.beta)


def act_redistribute(weights: torch.Tensor, sink: torch.Tensor, beta: float) -> torch.Tensor:
    """ACT's edit on probabilities (``atten_process_eval``): A'[t, j] = beta A[t, j] on sink columns, and
    A'[t, j] = A[t, j] (1 - beta S_t) / (1 - S_t) elsewhere, S_t = sum_{j in sinks} A[t, j]; rows still sum to 1.

    weights: (B, H, T, N); sink: (B, H, N) bool -> (B, H, T, N).
    """
    on = sink[:, :, None, :]
    s = (weights * on).sum(dim=-1, keepdim=True)  # (B, H, T, 1)
    rest = (1 - beta * s) / (1 - s).clamp_min(torch.finfo(weights.dtype).tiny)
    return torch.where(on, beta * weights, weights * rest)
