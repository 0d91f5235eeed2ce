"""The "What we saw" paragraphs of ``13_vit``, rendered from the run's results and claims (one function per
section). Every number and direction word comes from the inputs, so the text stays true on another model, profile
or seed; the notebook displays them with :func:`sinklib.core.takeaways.show`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from sinklib.core.claims import Claim
from sinklib.core.takeaways import claim_line, compare, num, paragraph, pct, span


def _heading(title: str, size: str) -> str:
    """The takeaway's heading: the model's label, then what it was measured on ("9 photos")."""
    return f"{title}, {size}" if size else title


def where_attention_goes(prefix_share: Sequence[float], top_ratio: Sequence[float], entropy: Sequence[float],
                         n_tokens: int, first_top: Sequence[int], title: str, size: str = "") -> str:
    """Section 2: the share of all attention CLS receives per layer (and over the uniform 1/T), the most-attended
    patch over uniform, whether layer 0's most-attended patch is one position across photos, and the entropy
    against log T."""
    busiest_cls = max(range(len(prefix_share)), key=lambda i: prefix_share[i])
    busiest = max(range(len(top_ratio)), key=lambda i: top_ratio[i])
    cls = (f"CLS receives {span(prefix_share)} of all attention per layer, {span([x * n_tokens for x in prefix_share], 2)}"
           f" x its uniform share 1/T, most in layer {busiest_cls}.")
    distinct = len(set(first_top))
    where = ("the same patch in every photo, a fixed position" if distinct == 1 else
             f"{distinct} different patches over {len(first_top)} photos, so not a fixed position")
    top = (f"The most-attended patch gets {span(top_ratio, 2)} x the uniform share, most in layer {busiest}; layer 0's "
           f"most-attended patch is {where}.")
    log_t = math.log(n_tokens)
    below = all(h < 0.95 * log_t for h in entropy)
    ent = (f"The attention entropy is {span(entropy)} nats against log T = {num(log_t)}: "
           + ("below the uniform maximum in every layer, so attention is concentrated." if below else
              "near the uniform maximum in some layers."))
    return paragraph(_heading(title, size), cls, top, ent)


def cls_maps(peak_share: Sequence[float], layers: Sequence[int], n_patches: int, title: str, size: str = "") -> str:
    """Section 1 (fig01): how concentrated the CLS query's map is at the layers shown -- the most-attended patch's
    share of the CLS query's patch attention (mean over photos) against the uniform 1/P."""
    shown = [peak_share[i] for i in layers]
    most = max(layers, key=lambda i: peak_share[i])
    return paragraph(_heading(title, size), f"At the layers shown, the CLS query's most-attended patch takes {span(shown)} of its "
                            f"attention to the patches ({span([x * n_patches for x in shown], 2)} x the uniform 1/P), "
                            f"most in layer {most}; each map is scaled to its own maximum, so a uniform-looking map "
                            f"and a peaked one can share a colour.")


def token_norms(max_ratio: Sequence[float], factor: float, title: str, first_layer: int | None = None,
                calibration: Mapping | None = None, size: str = "") -> str:
    """Section 3: the largest / median patch norm against the outlier cut (where outliers first appear, and the cut
    beside Jiang et al.'s absolute one); ``size``: what it was measured on ("9 photos"), in the heading."""
    return paragraph(_heading(title, size), _norm_sentence(max_ratio, factor, first_layer, calibration))


def _norm_sentence(max_ratio: Sequence[float], factor: float, first_layer: int | None,
                   calibration: Mapping | None) -> str:
    """The largest / median patch norm per layer against ``factor`` (and Jiang et al.'s absolute cut)."""
    worst = max(range(len(max_ratio)), key=lambda i: max_ratio[i])
    passing = sum(r > factor for r in max_ratio)
    norms = (f"The largest patch norm is at most {num(max_ratio[worst])} x the image's median (layer {worst}): "
             + (f"no patch token passes the {num(factor)}x cut in any layer." if passing == 0 else
                f"patch tokens pass the {num(factor)}x cut in {passing} of {len(max_ratio)} layers, first in layer "
                f"{first_layer}."))
    if calibration:
        theirs = "configs/" in str(calibration.get("config", ""))
        whose = ("Jiang et al.'s absolute cut" if theirs else
                 "The absolute cut adapted for this model (Jiang et al. did not configure it; set at the relative cut's "
                 "median multiple, so the two agree by construction)")
        norms += (f" {whose} ({num(calibration['absolute cut'])} at layer {calibration['layer']}) is "
                  f"{num(calibration['absolute cut / median patch norm'])} x this model's median patch norm there; "
                  f"{num(100 * calibration['fraction over the absolute cut'])}% of patches pass it and "
                  f"{num(100 * calibration[f'fraction over {num(factor)} x the median'])}% pass the relative cut.")
    return norms


def redundancy_sentence(similarity: Mapping[str, float]) -> str:
    """Are the selected (high-norm) patches more or less like their 4 neighbours in the patch embeddings than all
    patches? A gap below ``similarity["resolution"]`` (two standard errors of the per-image gap over
    ``similarity["images"]`` images, :func:`~sinklib.architectures.vit.vit_sinks.gap_resolution`) reads "no
    different", with the resolution stated; without a resolution the two means are compared as they are."""
    sel, every = similarity["selected"], similarity["all"]
    res = similarity.get("resolution", float("nan"))
    means = f"{num(sel)} against {num(every)} mean cosine similarity"
    if res is None or math.isnan(res):
        return (f"The {similarity['label']} are {compare(sel, every, 'more', 'less', 'as')} like their 4 neighbours "
                f"in the patch embeddings {'as' if sel == every else 'than'} patches overall ({means}).")
    gap = sel - every
    within = (f"{means}, a gap of {num(abs(gap))} {'below' if abs(gap) < res else 'beyond'} the resolution of "
              f"{num(res)} (two standard errors of the per-image gap over {similarity['images']:,} images)")
    if abs(gap) < res:
        return (f"The {similarity['label']} are no different from patches overall in how like their 4 neighbours "
                f"they are in the patch embeddings: {within}.")
    return (f"The {similarity['label']} are {compare(sel, every, 'more', 'less', 'as')} like their 4 neighbours in "
            f"the patch embeddings than patches overall: {within}.")


def high_norm(max_ratio: Sequence[float], factor: float, probes: Sequence[Mapping[str, float]],
              similarity: Mapping[str, float], claims: Sequence[Claim], title: str, outlier_share: float = 0.0,
              first_layer: int | None = None, calibration: Mapping | None = None, with_norms: bool = True,
              size: str = "") -> str:
    """Section 4: the probe accuracies (over the splits) and how many probe images have an outlier as their
    highest-norm patch, the selected patches' neighbour similarity in the patch embeddings against all patches
    (:func:`redundancy_sentence`), and the claims' verdicts; ``with_norms``: opened by the norms against the outlier
    cut (:func:`token_norms`' sentence; False where section 3 said it already); ``size``: in the heading."""
    norms = _norm_sentence(max_ratio, factor, first_layer, calibration) if with_norms else ""
    acc = {k: [p[k] for p in probes] for k in probes[0]}
    mean = {k: sum(v) / len(v) for k, v in acc.items()}
    splits = f" over {len(probes)} train / test splits" if len(probes) > 1 else ""
    probe = (f"A linear probe reads the digit from CLS at {span(acc['CLS'])}, from the highest-norm patch at "
             f"{span(acc['highest-norm patch'])} and from the median-norm patch at {span(acc['median-norm patch'])}"
             f"{splits}: on average the highest-norm patch reads it "
             f"{compare(mean['highest-norm patch'], mean['median-norm patch'], 'better than', 'worse than', 'as well as')}"
             f" the median-norm one and {compare(mean['highest-norm patch'], mean['CLS'], 'better than', 'worse than', 'as well as')}"
             f" CLS; the digits' highest-norm patch is an outlier in {num(100 * outlier_share)}% of them.")
    redundant = redundancy_sentence(similarity)
    verdicts = "; ".join(claim_line(c) for c in claims)
    why = " ".join(f"`{c.id}` on random weights: {c.control_note}." for c in claims if c.control_contradicts)
    return paragraph(_heading(title, size), norms, probe, redundant, f"{verdicts}.", why)


def registers(found: Sequence[tuple[int, int, float]], ratio_before: float, ratio_after: float, register_ratio: float,
              change: Sequence[float], factor: float, stand_in: bool, claim: Claim | None, title: str,
              split_before: Mapping[str, Sequence[float]] | None = None,
              split_after: Mapping[str, Sequence[float]] | None = None, layer: int | None = None,
              size: str = "") -> str:
    """Section 5: where the register neurons sit, the largest / median patch norm before and after the test-time
    register, the register's own norm against the cut (both at ``layer``, the authors' detection layer, where
    given), the change of the CLS maps, and the claim's verdict."""
    layers = sorted({layer for layer, _, _ in found})
    where = "at each photo's highest-norm patch (no outliers to find them at)" if stand_in else "at the outliers"
    first = (f"The {len(found)} register neurons, found {where}, sit in layer{'s' if len(layers) > 1 else ''} "
             f"{', '.join(str(x) for x in layers)}.")
    moved = compare(ratio_after, ratio_before, 'rises', 'falls', 'stays', rel_tol=0.005)
    at = f" at layer {layer} (the detection layer)" if layer is not None else ""
    norms = (f"With the register, the largest patch norm over the median{at} "
             + (f"{moved} from {num(ratio_before)}x to {num(ratio_after)}x" if moved != "stays" else
                f"stays at {num(ratio_after)}x")
             + f", and the register token ends at {num(register_ratio)}x the median patch norm, "
             f"{compare(register_ratio, factor, 'above', 'below', 'at')} the {num(factor)}x outlier cut.")
    maps = f"The CLS map's L1 change per layer is {span(change)}."
    if split_before and split_after:
        what = "the highest-norm patch" if stand_in else "the outlier patches"
        maps += (f" In the last layer the CLS query gives {what} {num(split_before['chosen'][-1])} of its attention "
                 f"without the register and {num(split_after['chosen'][-1])} with it, and the register "
                 f"{num(split_after['extra'][-1])}.")
    return paragraph(_heading(title, size), first, norms, maps, f"{claim_line(claim)}." if claim else "")


def massive(claim: Claim, title: str, size: str = "") -> str:
    """Section 6: Sun et al.'s layer statistics -- the peak of the largest |h| over the layer median, where it sits
    (dimension, and whether on a prefix token), the layers that meet 100 / 1000x -- and the claim's verdict."""
    m = claim.measured
    meets = m["layers meeting the criterion"]
    first = (f"The largest activation reaches {num(m['largest / layer median, peak'])} x the layer median in layer "
             f"{m['peak layer']} (|h| = {num(m['largest |h| there'])}), in dimension {m['dimension of the largest']} in "
             f"{pct(m['images with the largest in that dimension'])} of the photos and on a prefix token in "
             f"{pct(m['images with the largest on a prefix token'])}.")
    second = (f"Sun et al.'s criterion (> 100 and > 1000 x the median) is met in layers {span(meets)}." if meets else
              "No layer meets Sun et al.'s criterion (> 100 and > 1000 x the median).")
    return paragraph(_heading(title, size), first, second, f"{claim_line(claim)}.")
