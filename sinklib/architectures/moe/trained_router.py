"""A router trained, not fitted: a small Mixtral-class model trained from scratch with ``03_mitigation``'s harness.

The upcycled stand-in's router is a regression fitted after its experts were cut from a dense MLP, so it cannot say
whether a router *learns* to send the first token on a fixed route. This trains the tiny decoder of
:mod:`sinklib.mitigation.variant_lm` with a mixture-of-experts FFN (``n_experts``, ``top_k``, Switch-style balance loss;
label: "trained here") on the same data and budget as 03's runs, and measures on held-out sequences what emerges:

* the sink: alpha_0 per layer and Gu et al.'s sink rate (as 03 reads its runs);
* the route of position 0: the share of sequences whose first token takes the most common expert set, against a
  middle token's, per layer (:func:`~sinklib.architectures.moe.moe_sinks.routing`'s statistic);
* the first token's largest |h|, against the other tokens'.

Nothing here is a published claim: it is reported as measured, sink or none, over several seeds.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import torch

from sinklib.core import metrics
from sinklib.mitigation import training
from sinklib.mitigation.training import TrainConfig

LABEL = "tiny Mixtral-class MoE (trained here)"
HELDOUT_SEQS = 32  # held-out sequences each trained seed is measured on (:func:`measure`)
SINK_RATE = 0.3  # a seed "formed a sink" when its sink rate is above this
FIXED_FIRST = 0.9  # a fixed route: position 0 on its most common expert set in more than this share in every layer,
LOOSE_MIDDLE = 0.5  # while a middle token is on its most common set in less than this share in every layer


def moe_config(base: TrainConfig, n_experts: int = 4, top_k: int = 2, seed: int = 0) -> TrainConfig:
    """``base`` (03's run configuration) with a mixture-of-experts FFN: ``n_experts`` experts of half the dense
    width each (fine-grained, as OLMoE / DeepSeek; top-2 of 4 halves is the dense FFN's compute per token)."""
    return replace(base, seed=seed, model=replace(base.model, n_experts=n_experts, top_k=top_k,
                                                  d_ff=max(1, base.model.d_ff // 2)))


def same_set_share(choice: torch.Tensor) -> float:
    """choice (N, k): the share of the N sequences whose expert set (order ignored) is the most common one."""
    sets = Counter(tuple(sorted(row)) for row in choice.tolist())
    return sets.most_common(1)[0][1] / len(choice)


@dataclass
class TrainedRouter:
    """One trained seed, measured on held-out sequences. Per-layer lists have one entry per layer."""

    seed: int
    val_loss: float
    alpha_by_layer: list[float]  # alpha_0, mean over sequences and heads
    sink_rate: float  # Gu et al.'s (eps 0.3)
    same_set_first: list[float]  # share of sequences whose position 0 takes the most common expert set
    same_set_middle: list[float]  # the same for the middle position
    max_abs_first: float  # the first token's largest |h| over layers (mean over sequences)
    max_abs_rest: float  # the other tokens' (mean over sequences of the max over t >= 1)

    @property
    def formed_sink(self) -> bool:
        """A sink formed: sink rate > :data:`SINK_RATE`."""
        return self.sink_rate > SINK_RATE

    @property
    def fixed_route(self) -> bool:
        """Position 0 takes a fixed route: min over layers of its most-common-set share > :data:`FIXED_FIRST`, and the
        middle token's max over layers < :data:`LOOSE_MIDDLE`."""
        return min(self.same_set_first) > FIXED_FIRST and max(self.same_set_middle) < LOOSE_MIDDLE


def measure(cfg: TrainConfig, n_seqs: int = HELDOUT_SEQS, progress: bool = False) -> TrainedRouter:
    """Train (or read from the cache) ``cfg`` and measure it on ``n_seqs`` held-out sequences."""
    result = training.train(cfg, progress=progress)
    model = training.load_trained(cfg)
    batch = training.make_batch(cfg, "heldout", n_seqs, torch.Generator().manual_seed(4321))  # (N, T)
    with torch.no_grad():
        logits, A, H = model(batch, record=True)  # (N, T, V), (L, N, H, T, T), (L, N, T, d)
    alphas = metrics.alpha(A, 0).permute(1, 0, 2)  # (N, L, H)
    middle = batch.shape[1] // 2
    choices = [block.moe.choice for block in model.blocks]  # L x (N, T, k)
    first = H[:, :, 0].abs().amax(-1).mean(-1)  # (L,): per layer, mean over sequences
    rest = H[:, :, 1:].abs().amax(dim=(-1, -2)).mean(-1)  # (L,)
    return TrainedRouter(
        seed=cfg.seed, val_loss=result["checkpoints"][-1]["val_loss"],
        alpha_by_layer=alphas.mean(dim=(0, 2)).tolist(), sink_rate=metrics.sink_rate(alphas),
        same_set_first=[same_set_share(c[:, 0]) for c in choices],
        same_set_middle=[same_set_share(c[:, middle]) for c in choices],
        max_abs_first=float(first.max()), max_abs_rest=float(rest.max()))


def measure_seeds(base: TrainConfig, seeds: list[int], n_experts: int = 4, top_k: int = 2,
                  progress: bool = False) -> list[TrainedRouter]:
    """:func:`measure` for each seed (each trained once and cached like 03's runs)."""
    return [measure(moe_config(base, n_experts, top_k, s), progress=progress) for s in seeds]
