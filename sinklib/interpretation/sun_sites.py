"""Where Sun et al.'s criterion holds, layer by layer, and how rare its sites are (arXiv 2402.17762).

Sun et al. call "massive" the activations with |h| > 100 and > 1000x the median |h| of the layer's output (their
code, locuslab/massive-activations ``main_llm.py``: the top |h| of each sequence's (T, d) output against
``torch.median(feat_abs)``), and they find *a few* of them: at the starting token and the first delimiter. This
module measures, per layer, on which positions the criterion holds -- position 0, and the share of the later
positions -- so that "a few" can be tested (:func:`sinklib.interpretation.massive_claims.massive_by_sun`) and the
chain can name the layer where the criterion first holds beside the first token's value onset
(:func:`sinklib.interpretation.chain.first_token_value_onset`).

Shapes: N sequences, T positions, L layers, d model width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sinklib.core import metrics
from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation.origin import Statistic, measure


@dataclass
class SunSites:
    """Per layer l (lists of length L), Sun et al.'s criterion on the output h^l of block l over N sequences:

    * ``first``: share of the sequences whose position 0 holds an entry meeting it;
    * ``later_share``: share of the positions t >= 1 (of all sequences) holding one;
    * ``later_per_seq``: mean number of such positions t >= 1 per sequence;
    * ``first_ratio``: max_j |h_{0,j}| / the sequence's layer median |h| (:func:`sinklib.core.metrics.layer_median`),
      mean over the sequences -- how far position 0 is from the 1000x cut.
    """

    first: list[float]
    later_share: list[float]
    later_per_seq: list[float]
    first_ratio: list[float]
    n_seqs: int
    seq_len: int

    @property
    def met_layers(self) -> list[int]:
        """Layers where the criterion holds at some position of some sequence."""
        return [i for i, (f, s) in enumerate(zip(self.first, self.later_share)) if f > 0 or s > 0]

    @property
    def onset(self) -> int | None:
        """The first layer whose output meets the criterion anywhere (None: no layer)."""
        met = self.met_layers
        return met[0] if met else None

    @property
    def first_token_onset(self) -> int | None:
        """The first layer whose output meets the criterion at position 0 (None: no layer)."""
        return next((i for i, f in enumerate(self.first) if f > 0), None)

    def most_sites(self) -> tuple[int | None, float, float]:
        """(layer, later positions per sequence, their share) of the met layer with the most later sites; (None, 0,
        0) when no layer meets the criterion."""
        met = self.met_layers
        if not met:
            return None, 0.0, 0.0
        worst = max(met, key=lambda i: self.later_per_seq[i])
        return worst, self.later_per_seq[worst], self.later_share[worst]

    def as_dict(self) -> dict:
        return {**self.__dict__, "onset": self.onset, "first_token_onset": self.first_token_onset}


def sites_of(h: torch.Tensor, min_abs: float = metrics.SUN_MIN_ABS,
             min_ratio: float = metrics.SUN_MIN_RATIO) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer's output h (B, T, d) -> (first (B,) bool: position 0 holds a massive entry; later (B, T-1) bool: the
    positions t >= 1 that hold one; ratio (B,): max_j |h_{0,j}| / layer median |h|), by
    :func:`sinklib.core.metrics.massive_mask` (Sun et al.'s criterion with the sequence's layer median)."""
    hit = metrics.massive_mask(h, min_abs, min_ratio).any(dim=-1)  # (B, T)
    ratio = h[:, 0].float().abs().amax(dim=-1) / metrics.layer_median(h)[:, 0, 0].clamp_min(1e-12)
    return hit[:, 0], hit[:, 1:], ratio


class SunSiteStats(Statistic):
    """:func:`sun_sites` as a :class:`~sinklib.interpretation.origin.Statistic` (every layer's output)."""

    kinds = ("hidden_states",)

    def __init__(self, min_abs: float = metrics.SUN_MIN_ABS, min_ratio: float = metrics.SUN_MIN_RATIO):
        self.min_abs, self.min_ratio = min_abs, min_ratio
        self.sums: dict[int, torch.Tensor] = {}  # layer -> (first hits, later hits, ratio sum) over sequences
        self.n, self.T = 0, 0

    def update(self, cap: Capture, batch: torch.Tensor, start: int) -> None:
        for layer in sorted(cap.layers):
            first, later, ratio = sites_of(cap.get("hidden_states", layer), self.min_abs, self.min_ratio)
            step = torch.tensor([float(first.sum()), float(later.sum()), float(ratio.double().sum())],
                                dtype=torch.float64)
            self.sums[layer] = self.sums[layer] + step if layer in self.sums else step
        self.n += len(batch)
        self.T = batch.shape[1]

    def result(self) -> SunSites:
        rows = [self.sums[layer] for layer in sorted(self.sums)]
        later_positions = max(self.T - 1, 1)
        return SunSites(first=[float(r[0]) / self.n for r in rows],
                        later_share=[float(r[1]) / (self.n * later_positions) for r in rows],
                        later_per_seq=[float(r[1]) / self.n for r in rows],
                        first_ratio=[float(r[2]) / self.n for r in rows], n_seqs=self.n, seq_len=self.T)


def sun_sites(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 16) -> SunSites:
    """Per layer, where Sun et al.'s criterion holds on ``ids`` (N, T): :class:`SunSites`."""
    return measure(lm, ids, [SunSiteStats()], batch_size)[0]
