"""13_vit's protocol: its model list and sizes per profile, the model family it takes, its budget and the steps the
dry run counts (:class:`~sinklib.core.protocol.NotebookProtocol`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sinklib.core.protocol import NotebookProtocol, Step, forwards, models_of
from sinklib.models import tiny_random_hub


@dataclass(frozen=True)
class VitSizes:
    """13_vit's size knobs in one profile (a :class:`~sinklib.pipeline.profiles.Run` reads them through)."""

    models: tuple[str, ...]  # ViTs (MODEL= replaces the list with one); the first gets every figure
    image_size: int  # square input, px
    photos: tuple[str, ...]  # bundled photos (sinklib.core.images.PHOTO_SOURCES)
    batch_size: int
    probe_digits: int  # scikit-learn digits for the linear probe
    probe_size: int  # px the 8 x 8 digits are upscaled to
    control_image_size: int  # px of the photos on the random-weight control (forwards only)


VIT_MODELS = ("facebook/dinov2-large", "facebook/dinov2-with-registers-large", "facebook/dinov2-giant",
              "facebook/dinov2-with-registers-giant", "openai/clip-vit-large-patch14",
              "timm/deit3_large_patch16_224.fb_in22k_ft_in1k")  # Darcet et al.'s families, with and without registers
ALL_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "china", "flower", "grace_hopper", "camera", "coins")

SMOKE = VitSizes(models=("dinov2-s",), image_size=112, photos=("astronaut", "coffee"), batch_size=4,
                 probe_digits=60, probe_size=56, control_image_size=56)

SIZES: dict[str, VitSizes] = {
    "smoke": SMOKE,
    "cpu": VitSizes(models=("dinov2-s",), image_size=224, photos=ALL_PHOTOS, batch_size=9, probe_digits=600,
                    probe_size=112, control_image_size=98),
    "gpu": VitSizes(models=VIT_MODELS, image_size=224, photos=ALL_PHOTOS, batch_size=9, probe_digits=1797,
                    probe_size=224, control_image_size=224),
    "tiny-gpu": replace(SMOKE, models=tiny_random_hub.VITS),  # the gpu profile's model classes as tiny hub repositories
}


def steps(run: Any, model: str = "") -> list[Step]:
    """Per model: the photos with attention maps, and the probe's features of the digits."""
    r, out = run, []
    for m in models_of(r, model):
        out += [Step("photos (attention maps)", m, r.batch_size, -r.image_size, maps=True,
                     calls=forwards(len(r.photos), r.batch_size) * 6),
                Step("probe features", m, r.batch_size, -r.probe_size, hidden_states=True,
                     calls=forwards(r.probe_digits, r.batch_size) * 3)]
    return out


PROTOCOL = NotebookProtocol(name="13_vit", families=("vit",), sizes=SIZES, cpu_budget_s=45, first_run_s=52,
                            steps=steps)
