"""Offline images: the natural photos that ship with scikit-image, scikit-learn and matplotlib, scikit-learn's
handwritten digits, and the ImageNet preprocessing ViTs expect.

Sources and licences are listed in ``data/images.md``. Nothing is downloaded: :func:`photos` only reads files that
are inside the installed packages (scikit-image's ``skimage.data`` functions used here are the bundled ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sinklib.core.errors import InputError

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


def check_pixels(pixels, where: str = "the model") -> torch.Tensor:
    """Pixels a ViT or MLLM path can read: a floating (B, 3, H, W) tensor with every value finite; else one line
    (:class:`~sinklib.core.errors.InputError`) naming the problem -- NaN or infinite pixels would otherwise flow
    through every layer and come out as NaN maps without a word."""
    if not isinstance(pixels, torch.Tensor) or not pixels.is_floating_point():
        raise InputError(f"{where} takes pixels as a float tensor (B, 3, H, W) -- from sinklib.core.images.to_pixels "
                         f"-- or an RGB image array; got {type(pixels).__name__} "
                         f"{getattr(pixels, 'dtype', '')}".rstrip())
    if pixels.ndim != 4 or pixels.shape[1] != 3:
        raise InputError(f"{where} takes pixels shaped (B, 3, H, W); got {tuple(pixels.shape)}")
    _require_finite(pixels, where)
    return pixels


def _require_finite(values: torch.Tensor, where: str) -> None:
    """One line when ``values`` hold NaN or infinite entries: how many, and where the first one is."""
    bad = ~torch.isfinite(values)
    if bad.any():
        first = [int(i) for i in bad.nonzero()[0]]
        kind = "NaN" if torch.isnan(values).any() else "infinite"
        raise InputError(f"{where}: {int(bad.sum())} {kind} pixel value(s), the first at index {first}; fix or drop "
                         f"the image (a NaN pixel makes every attention map NaN)")


def check_image(image, index: int = 0) -> np.ndarray:
    """One image :func:`to_pixels` can read: an (H, W, 3) array -- uint8 0..255 or floats on the same scale -- with
    every value finite; else one line saying what is wrong (a grey (H, W) image: repeat it over three channels)."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[-1] not in (3, 4):
        raise InputError(f"image {index} has shape {image.shape}; to_pixels takes (H, W, 3) RGB (a grey (H, W) "
                         f"image: np.repeat(image[..., None], 3, axis=-1))")
    if not (np.issubdtype(image.dtype, np.integer) or np.issubdtype(image.dtype, np.floating)):
        raise InputError(f"image {index} has dtype {image.dtype}; to_pixels takes uint8 0..255 (or floats on that scale)")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise InputError(f"image {index} is empty: shape {image.shape}")
    if np.issubdtype(image.dtype, np.floating):
        _require_finite(torch.from_numpy(np.ascontiguousarray(image)), f"image {index}")
    return image[..., :3]


def to_pixels(images: list[np.ndarray] | np.ndarray, size: int = 224, norm: Norm | None = None) -> torch.Tensor:
    """Normalised (B, 3, size, size) float32: centre square crop, bilinear resize (antialiased), then
    (x / 255 - mean) / std with the model's own mean and std (``norm``, e.g. ``lm.pixel_norm``: CLIP's differ
    from ImageNet's), ImageNet's by default. Each image is checked first (:func:`check_image`: (H, W, 3), finite)."""
    mean, std = norm or IMAGENET
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise InputError(f"to_pixels: size must be a whole number of pixels >= 1 (e.g. 224), got {size!r}")
    if isinstance(images, np.ndarray) and images.ndim == 3:
        images = [images]
    if len(images) == 0:
        raise InputError("to_pixels needs at least one image")
    batch = []
    for i, image in enumerate(images):
        image = check_image(image, i)
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
