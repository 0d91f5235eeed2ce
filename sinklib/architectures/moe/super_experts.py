"""Super experts (Su et al., "Unveiling Super Experts in Mixture-of-Experts Large Language Models", arXiv 2507.23279):
the few experts whose down-projection output carries the extreme values that become the massive activations.

* :func:`expert_output_max` -- a = max |down_proj output| per (layer, expert) over calibration tokens, from
  :class:`~sinklib.core.capture.Capture`'s ``expert_outputs`` and ``expert_choice``;
* :func:`super_experts` -- the authors' rule, as their code applies it (ZunhaiSu/Super-Experts-Profilling,
  ``eval_utils.py``: ``_super_experts_analysis`` keeps layers l < round(L x include_layers), default 0.75;
  ``_identify_super_experts``: a > the 99.5th percentile of every kept a, and a > max(a) // 10 -- Python's floor
  division, so with max(a) < 10 the second condition is a > 0).
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


def super_experts(output_max: torch.Tensor, include_layers: float = 0.75, quantile: float = 99.5,
                  times: int = 10) -> list[tuple[int, int, float]]:
    """(layer, expert, a) of every super expert, largest a first. output_max: (L, E) from :func:`expert_output_max`."""
    kept = round(output_max.shape[0] * include_layers)
    a = output_max[:kept].double()
    threshold = torch.quantile(a.flatten(), quantile / 100)  # numpy.percentile's linear interpolation
    floor = math.floor(float(a.max()) / times)  # the authors' ``np.max(values) // times``
    hits = [(int(layer), int(e), float(a[layer, e])) for layer, e in ((a > threshold) & (a > floor)).nonzero()]
    return sorted(hits, key=lambda h: -h[2])
