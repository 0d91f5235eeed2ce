"""Super experts (Su et al., "Unveiling Super Experts in Mixture-of-Experts Large Language Models", arXiv 2507.23279):
the few experts whose down-projection output carries the extreme values that become the massive activations.

* :func:`expert_output_max` -- a = max |down_proj output| per (layer, expert) over calibration tokens, from
  :class:`~sinklib.core.capture.Capture`'s ``expert_outputs`` and ``expert_choice``;
* :func:`first_routed_max` -- a as the authors' down_proj hook records it when an expert is called on 2-D inputs
  (``output[0].abs().max()``: the earliest routed token's row), reported beside ours;
* :func:`super_experts` -- the authors' selection rule, as their code applies it (ZunhaiSu/Super-Experts-Profilling,
  ``eval_utils.py``: ``_super_experts_analysis`` keeps layers l < round(L x include_layers), default 0.75;
  ``_identify_super_experts``: a > the 99.5th percentile of every kept a, and a > max(a) // 10 -- Python's floor
  division, so with max(a) < 10 the second condition is a > 0);
* :func:`effect_size` -- how far they stand out: the smallest super expert's a over the median a of the other
  routed experts (this project's addition: the authors' rank rule always passes the largest expert when there are
  fewer than 200 layer-experts, so alone it cannot fail).
"""

from __future__ import annotations

import math

import torch


def expert_output_max(choice: torch.Tensor, outputs: torch.Tensor, n_experts: int) -> torch.Tensor:
    """One layer: max |y| over tokens and channels for each expert (0 for an expert never chosen).

    choice: (B, T, k) expert indices; outputs: (B, T, k, d) each chosen expert's output -> (E,).
    """
    peak = outputs.abs().amax(dim=-1).flatten()  # (B T k,)
    out = torch.zeros(n_experts, dtype=peak.dtype)
    return out.scatter_reduce(0, choice.flatten().long().cpu(), peak.cpu(), reduce="amax")


def first_routed_max(choice: torch.Tensor, peaks: torch.Tensor, n_experts: int) -> torch.Tensor:
    """One layer, a as the authors' hook records it when experts are called on 2-D inputs: the hook keeps
    ``output[0].abs().max()`` per expert call, and transformers' MoE loops call a routed expert once per sequence on
    the (n_routed, d) rows of the tokens routed to it in position order -- so ``output[0]`` is the *earliest routed
    token's* output row; the analysis then takes the max over calls (sequences). Ours (:func:`expert_output_max`) is
    the max over every routed token. The two agree for an expert whose largest output comes at the first token it
    sees in each sequence (a super expert firing on position 0); otherwise theirs is smaller. For a 3-D call
    (a dense MLP or shared expert on (1, T, d)) ``output[0]`` is the whole sequence, as ours.

    choice: (B, T, k) expert indices; peaks: (B, T, k) max |y| over channels per routed slot -> (E,), 0 when unused.
    """
    out = torch.zeros(n_experts, dtype=peaks.dtype)
    for b in range(choice.shape[0]):
        for e in range(n_experts):
            where = (choice[b] == e).nonzero()  # (n, 2): (t, slot), ascending t
            if len(where):
                t, slot = where[0].tolist()
                out[e] = max(out[e], peaks[b, t, slot])
    return out


SHARED = -1  # the authors' expert index for a layer's shared expert (eval_utils.py: "shared_experts" -> "-1")


def super_experts(output_max: torch.Tensor, include_layers: float = 0.75, quantile: float = 99.5,
                  times: int = 10, shared: torch.Tensor | None = None) -> list[tuple[int, int, float]]:
    """(layer, expert, a) of every super expert, largest a first.

    output_max: (L, E) from :func:`expert_output_max`, one row per layer of the *model* (the authors'
    ``layer_index`` from the module name, which counts dense layers), NaN where a layer has no routed experts;
    ``shared``: (L,) the largest |output| of each layer's shared expert (NaN: none), a candidate with expert index
    -1 as in the authors' code. Kept: layers l < round(L x include_layers) of the model's L."""
    kept = round(output_max.shape[0] * include_layers)
    a = output_max[:kept].double()
    s = None if shared is None else shared[:kept].double()
    values = torch.cat([a[torch.isfinite(a)], s[torch.isfinite(s)] if s is not None else a.new_empty(0)])
    if values.numel() == 0:
        return []
    threshold = torch.quantile(values, quantile / 100)  # numpy.percentile's linear interpolation
    floor = math.floor(float(values.max()) / times)  # the authors' ``np.max(values) // times``
    hits = [(int(layer), int(e), float(a[layer, e])) for layer, e in ((a > threshold) & (a > floor)).nonzero()]
    if s is not None:
        hits += [(int(layer), SHARED, float(s[layer])) for layer in ((s > threshold) & (s > floor)).nonzero()[:, 0]]
    return sorted(hits, key=lambda h: -h[2])


EFFECT = 10.0  # a super expert's a over the median a of the other routed experts: "extreme", not just the largest


def effect_size(output_max: torch.Tensor, supers: list[tuple[int, int, float]], include_layers: float = 0.75) -> float:
    """How far the super experts stand out: min a over ``supers`` / the median a of every other routed expert
    (a > 0) of the kept layers (l < round(L x include_layers), as :func:`super_experts`). 0.0 when there is no super
    expert or no other routed expert. Su et al. describe super experts by "rare but extreme activation outliers in the
    output of the down_proj" (Sec. 3): an effect size, which a percentile rank alone does not measure -- with 176
    layer-experts the 99.5th percentile lies between the two largest, so the rank rule passes one expert whatever
    the weights."""
    if not supers:
        return 0.0
    kept = round(output_max.shape[0] * include_layers)
    a = output_max[:kept].double()
    other = torch.isfinite(a)  # NaN rows: layers without routed experts
    for layer, e, _ in supers:
        if e != SHARED:
            other[layer, e] = False
    rest = a[other & (a > 0)]
    if rest.numel() == 0:
        return 0.0
    return min(h[2] for h in supers) / float(rest.median())
