"""What the numbers of Kang et al.'s claims are (:mod:`sinklib.core.quantities`), for
:mod:`sinklib.architectures.mllm.kang_claims`: each claim's measured values, margin and spread by kind and unit, and
which of them a stand-in reports apart (not comparable across machines, :data:`STANDIN_APART`).
"""

from __future__ import annotations

from sinklib.core import quantities as q

# Why a stand-in's visual-sink numbers are reported apart by ``make verify`` (the verdicts are still compared): the
# stand-in's projector is trained here in bfloat16, and which image tokens become visual sinks follows the CPU's
# kernels. Measured: at smoke size on one Intel host, oneDNN on AMX vs capped to AVX512_CORE_BF16; at CPU size, the
# reference (an AMD EPYC) vs an Intel host with AMX.
STANDIN_APART = ("a stand-in's projector is trained here in bfloat16 and its visual sinks follow the CPU's kernels: "
                 "oneDNN on Intel AMX vs the same machine capped to AVX512_CORE_BF16 (smoke size) gave 148 vs 12 "
                 "visual sink tokens, a share on background of 0.38 vs 0.83, a masking delta NLL of +0.140 vs -0.061, "
                 "a VAR margin of +0.074 vs -0.104 and 1,628 vs 2,527 rows edited; at CPU size the reference (AMD "
                 "EPYC) vs an Intel AMX host gave a caption NLL of 0.466 vs 0.621 and 55 vs 89 visual sink tokens, "
                 "and on the AMD EPYC its default kernels vs oneDNN capped to AVX512_CORE vs ATen capped to AVX2 "
                 "0.621 / 0.647 / 0.517 and 89 / 109 / 122 (data/reference/cross_setting_standins.json); at smoke "
                 "size there, its default kernels vs AVX512_CORE: largest image-token phi 22.68 vs 18.71")


def _apart(quantity: q.Quantity, standin: bool | str) -> q.Quantity:
    """``quantity`` as it is, or on a stand-in not comparable across machines (:data:`STANDIN_APART`)."""
    if not standin:
        return quantity
    return q.Quantity(kind=quantity.kind, unit=quantity.unit, comparable=False, why=STANDIN_APART)


def _phi_and_margin(standin: bool | str) -> dict[str, q.Quantity]:
    """The numbers every Kang claim carries that follow the stand-in's training: the largest image-token phi (at smoke
    size 22.68 vs 18.71 under AVX512_CORE's kernels on the AMD EPYC -- above and below tau = 20), and the margin's cut
    and spread, which a claim has only where the stand-in found visual sinks to judge."""
    margin = _apart(q.Quantity(kind=q.Kind.MARGIN, unit="nats"), standin)
    return {"largest image-token phi": _apart(q.value("phi"), standin), "@margin.cut": margin,
            "@margin.spread": margin}


def _margin_in(unit: str, standin: bool | str) -> dict[str, q.Quantity]:
    """A margin whose cut is not in nats: the existence rule's (phi against tau) and the background rule's (a share
    against 90%) -- its value, cut and spread, apart on a stand-in."""
    margin = _apart(q.Quantity(kind=q.Kind.MARGIN, unit=unit), standin)
    return {"@margin.value": margin, "@margin.cut": margin, "@margin.spread": margin}


def sink_quantities(standin: bool | str) -> dict[str, q.Quantity]:
    """What ``kang2025.visual_sink_tokens_exist``'s numbers are; its spread: the max fraction over the draws
    (:func:`~sinklib.architectures.mllm.kang_claims.claims_over_draws`). A tau key such as "7.5" is two path
    segments, hence the two patterns under "by tau"."""
    fraction = _apart(q.share("fraction of image tokens"), standin)
    per_image = _apart(q.count("visual sink tokens per image"), standin)
    return {"sink dims": q.identity("dimension"), "max fraction of image tokens": fraction,
            "attention received, sink / non-sink": _apart(q.ratio(), standin), "width-matched tau": q.value("phi"),
            "by tau.*.max fraction": fraction, "by tau.*.*.max fraction": fraction,
            "by tau.*.sinks per image": per_image, "by tau.*.*.sinks per image": per_image, "@spread": fraction,
            **_phi_and_margin(standin), **_margin_in("phi", standin)}


def masking_quantities(standin: bool | str) -> dict[str, q.Quantity]:
    """What ``kang2025.masking_sinks_is_harmless``'s numbers are: NLL changes (nats), the NLLs themselves, and its
    margin's value (min random increase - the sinks'); spread: the sinks' NLL increase over the draws."""
    delta = _apart(q.value("nats"), standin)
    return {"delta NLL sinks": delta, "delta NLL random": delta, "delta NLL random, min..max": delta,
            "caption NLL": _apart(q.loss("nats"), standin), "@spread": delta,
            "@margin.value": _apart(q.Quantity(kind=q.Kind.MARGIN, unit="nats"), standin), **_phi_and_margin(standin)}


def var_quantities(standin: bool | str) -> dict[str, q.Quantity]:
    """What ``kang2025.var_helps``'s numbers are: the scored NLL without and with VAR, the caption NLLs, the rows VAR
    edited (of those it could: fixed by the shapes), its margin's value (none - VAR); spread: VAR - none."""
    nll = _apart(q.loss("nats"), standin)
    return {"none": nll, "VAR": nll, "caption NLL": nll,
            "rows edited": _apart(q.count("(head, text query) rows"), standin),
            "rows it could edit": q.count("(head, text query) rows"), "@spread": _apart(q.value("nats"), standin),
            "@margin.value": _apart(q.Quantity(kind=q.Kind.MARGIN, unit="nats"), standin), **_phi_and_margin(standin)}


def background_quantities(standin: bool | str) -> dict[str, q.Quantity]:
    """What ``kang2025.sinks_on_background``'s numbers are; the background's share of all image tokens is read off
    the pictures alone. Spread: the share on background over the stand-ins."""
    on_background = _apart(q.share("fraction of visual sink tokens"), standin)
    return {"visual sink tokens": _apart(q.count("image tokens"), standin), "share on background": on_background,
            "background share of all image tokens": q.share("fraction of image tokens"), "@spread": on_background,
            **_phi_and_margin(standin), **_margin_in("share", standin)}


# The numbers :func:`~sinklib.architectures.mllm.kang_claims.phi_peaks` adds to every Kang record's ``measured``.
PEAK_QUANTITIES = {"largest image-token phi": q.value("phi"), "phi ceiling sqrt(d)": q.value("phi")}
