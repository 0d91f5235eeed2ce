"""Kang et al.'s rules for visual sink tokens, as numbers in and verdicts out (arXiv 2503.03321; the authors' code
seilk/VisAttnSink ``src/logic/logic.py``): the thresholds, which image tokens are visual sinks, when the existence and
masking rules hold, and the cross-machine margins of the stand-in's comparisons. The claim records built from them are
in :mod:`sinklib.architectures.mllm.kang_claims`; the measurements they read in
:mod:`sinklib.architectures.mllm.visual_sinks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch


class MllmProfile(Protocol):
    """What the rules read of a profile (:class:`sinklib.architectures.mllm.visual_sinks.MllmProfile`, which measures
    it): the rules stay importable without the measurement module, which imports their thresholds."""

    def sinks(self, tau: float) -> torch.Tensor: ...  # (L, B, P) bool: image tokens with phi >= tau, per layer

    def sink_fraction(self, tau: float) -> list[float]: ...  # per layer, the share of image tokens with phi >= tau

    def received_ratio(self, tau: float) -> list[float | None]: ...  # per layer, attention to sinks / to the others

    phi: torch.Tensor  # (L, B, P): each image token's phi per layer

KANG_TAU = 20.0
KANG_RHO = 0.5  # max visual-sink portion of a head's image attention
KANG_SUMM = 0.2  # min image attention of a head (per query)
KANG_P = 0.6  # the fraction of a sink's attention VAR keeps
KANG_FIRST_LAYER = 2  # sink tokens are looked for from layer 2 on
KANG_D_REF = 4096  # LLaVA-1.5-7B's hidden size (Llama-2-7B), where tau = 20 was set
KANG_BACKGROUND = 0.9  # Kang et al., Table 6: > 90% of visual sink tokens lie on background


def width_matched_tau(d: int, tau: float = KANG_TAU, d_ref: int = KANG_D_REF) -> float:
    """The tau that asks a width-d model's sink dimension for the same share of the token's squared norm as tau asks
    at d_ref. phi = |x_k| / RMS(x), so phi^2 / d = x_k^2 / ||x||^2 and phi <= sqrt(d): tau = 20 at d = 4096 asks for
    400 / 4096 = 9.8% of the squared norm, at d = 576 for 69%. Matched: tau_d = tau sqrt(d / d_ref) (7.5 at 576)."""
    return tau * (d / d_ref) ** 0.5


def phi_ceiling(d: int) -> float:
    """The largest phi a width-d hidden state can have: phi = |x_k| / RMS(x) and x_k^2 <= ||x||^2 = d RMS(x)^2, so
    phi <= sqrt(d) (24 at SmolLM2's d = 576, 64 at LLaVA-1.5-7B's 4096)."""
    return float(d) ** 0.5


def norm_share(tau: float, d: int) -> float:
    """The share of a token's squared norm that phi >= tau asks for in one dimension: x_k^2 / ||x||^2 = tau^2 / d
    (tau = 20: 9.8% at d = 4096, 69% at d = 576)."""
    return tau * tau / d


def sink_tokens_hold(fractions: Sequence[float], ratios: Sequence[float]) -> bool:
    """Kang et al.'s visual sink tokens exist: some image token reaches phi >= tau in a layer >= 2 (a fraction > 0)
    and, averaged over the layers that have both kinds, sinks receive more text attention than non-sink image tokens
    (mean ratio > 1)."""
    return bool(any(f > 0 for f in fractions) and ratios and sum(ratios) / len(ratios) > 1)


def masking_holds(d_sink: float, d_random: Sequence[float]) -> bool:
    """Hiding the visual sinks is harmless next to hiding as many random image tokens: the caption NLL increase with
    the sinks hidden is below that of *every* random draw (d_sink < min_r d_random[r]); one draw: d_sink < d_random."""
    return bool(d_random) and d_sink < min(d_random)


# How far each cut number moves when the same recipe runs under other kernels: the largest spread, over the stand-in
# seeds, across the CPU-profile runs of data/reference/cross_setting_standins.json (benchmarks/cross_setting.py: every
# stand-in rebuilt on this project's AMD EPYC at its default kernels, with oneDNN capped to AVX512_CORE and with ATen
# capped to AVX2). masking (nats): min_r d_random - d_sink, seed 0's -0.228 / -0.453 / -0.176. var (nats): none - VAR,
# seed 0's -0.0007 / +0.0457 / +0.0002. phi: the largest image-token phi, cut at tau = 20 -- seed 0's 23.22 / 23.37 /
# 23.20, seed 1's 21.07 / 18.42 / 18.78 (its sinks exist under one setting only). background: the visual sinks'
# share on background, cut at 0.9 -- seed 0's 0.000 / 0.000 / 0.033. A projector trained in bfloat16 on 1,000-odd
# captions finds other sink tokens (89 / 109 / 122). A number within its margin of the cut is unsettled on a
# stand-in; a test holds these to the data. A pretrained model's forward moves by float rounding only.
# The smoke-size stand-in (4 projector steps, 200 digits) is another model: its largest image-token phi was 22.68 with
# this AMD EPYC's default kernels and 18.71 with oneDNN capped to AVX512_CORE (make test's second setting), a spread
# of 3.97; its other margins are the CPU-size stand-in's.
STANDIN, SMOKE_STANDIN = "stand-in", "stand-in, smoke size"
MARGINS = {STANDIN: {"masking": 0.278, "var": 0.047, "phi": 2.656, "background": 0.033},
           SMOKE_STANDIN: {"masking": 0.278, "var": 0.047, "phi": 3.97, "background": 0.033},
           "pretrained": {"masking": 1e-3, "var": 1e-3, "phi": 1e-3, "background": 1e-3}}


def standin_kind(model_name: str) -> str:
    """Which stand-in's margins a stitched model takes: :data:`SMOKE_STANDIN` for the smoke-size twin
    (``llava-standin-smoke``), else :data:`STANDIN`."""
    return SMOKE_STANDIN if model_name.endswith("-smoke") else STANDIN


def margin(kind: str, standin: bool | str) -> float:
    """The cross-machine margin of the ``kind`` ("masking" / "var" in nats, "phi", "background" a share) number's
    comparison with its cut: :data:`MARGINS`. ``standin``: False (a pretrained model), True (the stand-in) or a key of
    :data:`MARGINS` (:func:`standin_kind`)."""
    key = standin if isinstance(standin, str) else (STANDIN if standin else "pretrained")
    return MARGINS[key][kind]


def sinks_unsettled(peak: float, standin: bool | str) -> bool:
    """Whether the model has visual sink tokens at all depends on the kernels: its largest image-token phi lies
    within its cross-machine margin of tau (then every claim that needs sinks is unsettled, never "no sink")."""
    return abs(peak - KANG_TAU) <= margin("phi", standin)


def largest_sink_phi(profile: MllmProfile) -> float:
    """The largest phi of an image token in the layers Kang et al. search (>= :data:`KANG_FIRST_LAYER`): the number
    their test, max_d |RMSNorm(h)[sink dims]| > tau (seilk/VisAttnSink ``DimProspector.run_logic``), cuts.
    profile.phi: (L, B, P), NaN where undefined."""
    searched = profile.phi[KANG_FIRST_LAYER:]
    return float(torch.nan_to_num(searched, nan=0).max()) if searched.numel() else 0.0


def sink_union(profile: MllmProfile, tau: float = KANG_TAU) -> torch.Tensor:
    """(B, P) bool: image tokens that are visual sinks in any layer from :data:`KANG_FIRST_LAYER` on."""
    return profile.sinks(tau)[KANG_FIRST_LAYER:].any(0)


def tau_sensitivity(profile: MllmProfile, taus: Sequence[float]) -> dict[float, dict]:
    """For each tau: the largest fraction of image tokens with phi >= tau in a layer >= 2, the mean number of visual
    sink tokens per image (any layer), and :func:`sink_tokens_hold` at that tau -- how much the existence verdict
    hangs on the threshold."""
    out = {}
    for tau in taus:
        frac = [f for f in profile.sink_fraction(tau) if f == f]
        ratio = [r for r in profile.received_ratio(tau) if r is not None]
        out[float(tau)] = {"max fraction": max(frac, default=0.0),
                           "sinks per image": sink_union(profile, tau).sum(-1).float().mean().item(),
                           "holds": sink_tokens_hold(frac, ratio)}
    return out
