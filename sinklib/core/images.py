"""Offline images: the natural photos that ship with scikit-image, scikit-learn and matplotlib, scikit-learn's
handwritten digits, and the ImageNet preprocessing ViTs expect.

Sources and licences are listed in ``data/images.md``. Nothing is downloaded: :func:`photos` only reads files that
are inside the installed packages (scikit-image's ``skimage.data`` functions used here are the bundled ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # the per-channel normalisation ViTs trained on ImageNet expect
IMAGENET_STD = (0.229, 0.224, 0.225)

# name -> (package, loader); colour first, then grey photos (converted to RGB)
PHOTO_SOURCES = {
    "astronaut": "skimage", "chelsea": "skimage", "coffee": "skimage", "rocket": "skimage",
    "china": "sklearn", "flower": "sklearn", "grace_hopper": "matplotlib",
    "camera": "skimage", "coins": "skimage",
}


@dataclass(frozen=True)
class Photo:
    name: str
    source: str  # the package it ships in
    image: np.ndarray  # (H, W, 3) uint8


def _load(name: str, source: str) -> np.ndarray:
    if source == "skimage":
        import skimage.data

        return getattr(skimage.data, name)()
    if source == "sklearn":
        from sklearn.datasets import load_sample_image

        return load_sample_image(f"{name}.jpg")
    import matplotlib.cbook
    import matplotlib.image

    with matplotlib.cbook.get_sample_data(f"{name}.jpg") as f:
        return matplotlib.image.imread(f, format="jpg")


def photos(names: list[str] | None = None) -> list[Photo]:
    """The bundled natural photos as RGB uint8 arrays (grey ones repeated over three channels)."""
    names = list(PHOTO_SOURCES) if names is None else names
    unknown = [n for n in names if n not in PHOTO_SOURCES]
    if unknown:
        raise ValueError(f"unknown photo(s) {unknown}; available: {', '.join(PHOTO_SOURCES)}")
    out = []
    for name in names:
        image = np.asarray(_load(name, PHOTO_SOURCES[name]))
        if image.ndim == 2:
            image = np.repeat(image[..., None], 3, axis=-1)
        out.append(Photo(name, PHOTO_SOURCES[name], np.ascontiguousarray(image[..., :3]).astype(np.uint8)))
    return out


Norm = tuple[tuple[float, float, float], tuple[float, float, float]]  # (mean, std) per RGB channel
IMAGENET: Norm = (tuple(IMAGENET_MEAN), tuple(IMAGENET_STD))


def to_pixels(images: list[np.ndarray] | np.ndarray, size: int = 224, norm: Norm | None = None) -> torch.Tensor:
    """Normalised (B, 3, size, size) float32: centre square crop, bilinear resize (antialiased), then
    (x / 255 - mean) / std with the model's own mean and std (``norm``, e.g. ``lm.pixel_norm``: CLIP's differ
    from ImageNet's), ImageNet's by default."""
    mean, std = norm or IMAGENET
    if isinstance(images, np.ndarray) and images.ndim == 3:
        images = [images]
    batch = []
    for image in images:
        h, w = image.shape[:2]
        s = min(h, w)
        top, left = (h - s) // 2, (w - s) // 2
        x = torch.from_numpy(np.ascontiguousarray(image[top:top + s, left:left + s])).permute(2, 0, 1).float() / 255
        x = torch.nn.functional.interpolate(x[None], size=(size, size), mode="bilinear", antialias=True,
                                            align_corners=False)[0]
        batch.append(x)
    pixels = torch.stack(batch)  # (B, 3, size, size) in [0, 1]
    return (pixels - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


def display(pixels: torch.Tensor, norm: Norm | None = None) -> np.ndarray:
    """Undo :func:`to_pixels`' normalisation (the same ``norm``): (3, S, S) -> (S, S, 3) floats in [0, 1]."""
    mean, std = norm or IMAGENET
    x = pixels.float().cpu() * torch.tensor(std).view(3, 1, 1) + torch.tensor(mean).view(3, 1, 1)
    return x.clamp(0, 1).permute(1, 2, 0).numpy()


def digits(n: int | None = None, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """scikit-learn's 8 x 8 handwritten digits (1,797 images, 16 grey levels) as RGB uint8, dark ink on white, and
    their labels, in a permutation seeded by ``seed`` (numpy's ``default_rng(seed).permutation``): all 1,797 when
    ``n`` is None, else the permutation's first ``n``. Two seeds see the digits in two orders, so a training split
    taken from the front differs between seeds. Upscale with :func:`to_pixels`."""
    from sklearn.datasets import load_digits

    data = load_digits()
    index = np.random.default_rng(seed).permutation(len(data.target))
    if n is not None:
        index = index[:n]
    images = [np.repeat((255 - data.images[i] * 16).clip(0, 255).astype(np.uint8)[..., None], 3, -1) for i in index]
    return images, data.target[index]
