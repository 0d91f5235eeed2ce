"""Sun et al.'s massive activations in ViTs (arXiv 2402.17762, Sec. 5) as a record: the models they report, the
100 / 1000x criterion on :func:`~sinklib.architectures.vit.vit_sinks.massive_ratio`, and the claim.
"""

from __future__ import annotations

import torch

from sinklib.architectures.vit.darcet_claims import ONE_STEP, fraction_of_items
from sinklib.architectures.vit.vit_sinks import VitProfile, massive_ratio
from sinklib.core import quantities as q
from sinklib.core.claims import Claim

# Sun et al. report massive activations in these ViTs (Sec. 5, Fig. 10-11; timm ids in their lib/load_model.py):
# CLIP ViT-L/14 and DINOv2-reg ViT-G, the latter in a register token.
SUN_VIT_MODELS = {"openai/clip-vit-large-patch14": "CLIP ViT-L (timm vit_large_patch14_clip_224.openai)",
                  "facebook/dinov2-with-registers-giant": "DINOv2-reg ViT-G (timm vit_giant_patch14_reg4_dinov2)"}


SUN_MAGNITUDE, SUN_RATIO = 100.0, 1000.0


SUN = "Sun et al., Massive Activations in Large Language Models, arXiv 2402.17762"


IMAGES_WHY = (f"a fraction of the n images moves in steps of 1/n when one image's largest entry moves to another "
              f"dimension or token on another machine; the tolerance is one step ({ONE_STEP})")


def massive_quantities(n_images: int) -> dict[str, q.Quantity]:
    """What ``sun2024.vit_massive_activations``' numbers are (``n_images``: the images they are fractions of)."""
    images = fraction_of_items(1 / n_images if n_images else None, IMAGES_WHY, "fraction of images")
    return {"largest / layer median, peak": q.ratio(), "peak layer": q.identity("layer"),
            "largest |h| there": q.value("|h|"), "dimension of the largest": q.identity("dimension"),
            "images with the largest in that dimension": images, "images with the largest on a prefix token": images,
            "layers meeting the criterion": q.identity("layer")}


def vit_massive_activations_claim(profile: VitProfile, name: str) -> Claim:
    """``sun2024.vit_massive_activations`` (Sec. 5): some ViTs have massive activations -- |h| > 100 and about
    1,000 x the median -- at fixed feature dimensions. Rule: some layer's largest |h| (mean over images) exceeds 100
    and 1000 x the layer median (:func:`massive_ratio`), and in that layer the largest entry sits in one dimension
    in at least 80% of the images. Judged only on the models Sun et al. report (:data:`SUN_VIT_MODELS`); on others
    the numbers are recorded and the claim is not judged."""
    ratio = massive_ratio(profile)
    top = profile.top_abs[..., 0].mean(-1)  # (L,)
    peak = max(range(len(ratio)), key=lambda i: ratio[i])
    dims = profile.top_site[peak, :, 1]
    common = torch.mode(dims).values
    same_dim = (dims == common).float().mean().item()
    prefix = profile.top_site[peak, :, 0] < profile.n_prefix
    massive = [i for i in range(len(ratio)) if top[i] > SUN_MAGNITUDE and ratio[i] > SUN_RATIO]
    reported = name in SUN_VIT_MODELS
    return Claim(
        id="sun2024.vit_massive_activations", source=f"{SUN}, Sec. 5",
        statement="massive activations (> 100 and ~1000 x the median) appear in ViTs such as CLIP ViT-L and "
                  "DINOv2-reg ViT-G, at fixed feature dimensions",
        rule=f"some layer's largest |h| (mean over images) > {SUN_MAGNITUDE:g} and > {SUN_RATIO:g} x the median |h| of "
             f"the whole block output (mean over images), with the largest entry in one dimension in >= 80% of the "
             f"images",
        published="CLIP ViT-L and DINOv2-reg ViT-G: yes (in DINOv2-reg, in a register token)",
        measured={"largest / layer median, peak": ratio[peak], "peak layer": peak, "largest |h| there": top[peak].item(),
                  "dimension of the largest": int(common), "images with the largest in that dimension": same_dim,
                  "images with the largest on a prefix token": prefix.float().mean().item(),
                  "layers meeting the criterion": massive},
        holds=(bool(massive) and same_dim >= 0.8) if reported else None,
        note="" if reported else "Sun et al. report no result for this model; measured, not judged",
        needs_gpu=not reported,
        follows="Sec. 5 and the layer statistics of locuslab/massive-activations:main_vit.py (exp2: top |h| and the "
                "median of the whole block output, averaged over images); the 100 / 1000x criterion of Sec. 2",
        adapted="this run's photos instead of 10 ImageNet validation images; transformers checkpoints with the same "
                "weights as the authors' timm ones",
        at_init=False, quantities=massive_quantities(dims.numel()))
