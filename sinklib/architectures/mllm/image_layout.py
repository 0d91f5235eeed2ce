"""Where a multimodal model's image tokens lie on the picture, and how many it makes of a small one.

The three MLLM families of the GPU profile turn a picture into image tokens differently:

* **LLaVA-1.5** (and the CPU stand-in): CLIP's (DINOv2's) patch grid, one square tile -- 336 px / 14 = 24 x 24 = 576
  tokens, row by row;
* **Qwen2-VL**: the picture resized to a multiple of 28 px (patch 14, 2 x 2 patches merged into one token) within
  ``min_pixels`` .. ``max_pixels``; ``image_grid_thw`` = (1, h, w) in patches gives (h / 2) x (w / 2) tokens, row by
  row, any aspect ratio;
* **Idefics3 / SmolVLM**: the longest edge enlarged to 4 x 384 px, cut into 384 px crops (``pixel_values`` (B, tiles,
  3, 384, 384)), each crop 9 x 9 tokens after the pixel shuffle, crops row by row, then the whole picture again as one
  global tile: a square picture gives 4 x 4 crops + 1 = 17 tiles, 17 x 81 = 1,377 tokens -- not a square number, and
  not one grid.

:class:`ImageLayout` records that structure (the grid shape per tile, never sqrt(P)); :func:`image_layout` reads it
off a model's inputs; :func:`image_size_kwargs` is the rule that gives a small picture enough tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

Shape = tuple[int, int]  # (rows, cols)

MIN_IMAGE_TOKENS = 24 * 24  # LLaVA-1.5's image tokens (336 px / 14 px patches): the floor for pixel-count processors


@dataclass(frozen=True)
class ImageLayout:
    """Where one image's P tokens lie on the picture, in token order.

    ``crops``: (rows, cols) of the tiles that cover the picture, row by row (Idefics3's crops; one for LLaVA and
    Qwen2-VL); ``tile``: (rows, cols) of the tokens in each tile, row by row; ``overview``: the (rows, cols) of a
    last tile that shows the whole picture again, downscaled (Idefics3's global image), or None.
    P = crops_r crops_c tile_r tile_c + overview_r overview_c.
    """

    tile: Shape
    crops: Shape = (1, 1)
    overview: Shape | None = None

    @classmethod
    def square(cls, n: int) -> ImageLayout:
        """One g x g tile, n = g^2 (LLaVA's patch grid); a ValueError when n is not a square."""
        g = math.isqrt(n)
        if g * g != n:
            raise ValueError(f"{n} image tokens are not a square grid; give the layout (ImageLayout) instead")
        return cls((g, g))

    @property
    def grid(self) -> Shape:
        """(R, C) = (crops_r tile_r, crops_c tile_c): the crops' tokens as one grid over the whole picture."""
        return self.crops[0] * self.tile[0], self.crops[1] * self.tile[1]

    @property
    def n_tokens(self) -> int:
        """P, every image token: the crops' and the overview's."""
        return self.grid[0] * self.grid[1] + (self.overview[0] * self.overview[1] if self.overview else 0)

    def describe(self) -> str:
        tiles = (f"{self.crops[0]} x {self.crops[1]} crops of {self.tile[0]} x {self.tile[1]} tokens"
                 if self.crops != (1, 1) else f"{self.tile[0]} x {self.tile[1]} tokens")
        over = f" + a {self.overview[0]} x {self.overview[1]} global view" if self.overview else ""
        return f"{self.n_tokens} image tokens: {tiles}{over}"

    def grid_index(self) -> torch.Tensor:
        """(R, C) long: the token index (0 .. P - 1) of each cell of :attr:`grid` -- token t of crop (i, j) at tile
        position (r, c) is cell (i tile_r + r, j tile_c + c), t = ((i crops_c + j) tile_r + r) tile_c + c."""
        (cr, cc), (tr, tc) = self.crops, self.tile
        return torch.arange(cr * cc * tr * tc).view(cr, cc, tr, tc).permute(0, 2, 1, 3).reshape(cr * tr, cc * tc)

    def split(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The tokens' values on the picture: (..., P) -> the crops' (..., R, C) and the overview's (..., r, c) or
        None."""
        if values.shape[-1] != self.n_tokens:
            raise ValueError(f"{values.shape[-1]} values for a layout of {self.describe()}")
        n = self.grid[0] * self.grid[1]
        grid = values[..., self.grid_index().to(values.device)]  # (..., R, C)
        over = values[..., n:].unflatten(-1, self.overview) if self.overview else None
        return grid, over

    def join(self, grid: torch.Tensor, overview: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`split` undone: (..., R, C) and (..., r, c) -> (..., P) in token order."""
        flat = grid.flatten(-2)  # (..., R C) in cell order
        out = torch.empty_like(flat)
        out[..., self.grid_index().flatten().to(flat.device)] = flat
        if self.overview:
            if overview is None:
                raise ValueError(f"a layout with a global view ({self.describe()}) needs its values too")
            out = torch.cat([out, overview.flatten(-2).to(out)], -1)
        return out

    def picture(self, values: torch.Tensor) -> np.ndarray:
        """(P,) -> a 2-D float array to draw: the crops' grid, and the global view (if any) to its right after one
        empty column, top-aligned; empty cells NaN."""
        grid, over = self.split(values.detach().float().cpu())
        if over is None:
            return grid.numpy()
        rows = max(grid.shape[0], over.shape[0])
        out = np.full((rows, grid.shape[1] + 1 + over.shape[1]), np.nan, dtype=np.float32)
        out[:grid.shape[0], :grid.shape[1]] = grid.numpy()
        out[:over.shape[0], grid.shape[1] + 1:] = over.numpy()
        return out


# ------------------------------------------------------------------------------------------------ from the inputs
def qwen2_vl_layout(grid_thw: torch.Tensor | tuple[int, int, int], merge: int) -> ImageLayout:
    """Qwen2-VL (Qwen2.5-VL): ``image_grid_thw`` (t, h, w) in patches, ``spatial_merge_size`` m -> one tile of
    (h / m, w / m) tokens (an image: t = 1)."""
    t, h, w = (int(v) for v in grid_thw)
    if t != 1 or h % merge or w % merge:
        raise ValueError(f"image_grid_thw {(t, h, w)} is not one image of whole {merge} x {merge} token blocks")
    return ImageLayout((h // merge, w // merge))


def idefics3_layout(pixels_shape: tuple[int, ...], patch: int, scale: int, crops: Shape) -> ImageLayout:
    """Idefics3 / SmolVLM: ``pixel_values`` (B, N, 3, H, W) -> N tiles of (H / patch / scale, W / patch / scale)
    tokens (the pixel shuffle folds scale x scale patches into one token, row by row). N = 1: the picture as one
    tile; else the ``crops`` (rows, cols) the image processor cut (rows cols = N - 1), then the global view."""
    if len(pixels_shape) != 5:
        raise ValueError(f"Idefics3 pixel_values are (B, tiles, 3, H, W), not {tuple(pixels_shape)}")
    n, (h, w) = pixels_shape[1], pixels_shape[-2:]
    tile = (h // patch // scale, w // patch // scale)
    if n == 1:
        return ImageLayout(tile)
    if crops[0] * crops[1] != n - 1:
        raise ValueError(f"{n} tiles are not {crops[0]} x {crops[1]} crops and a global view")
    return ImageLayout(tile, crops=tuple(crops), overview=tile)


def image_layout(lm, inputs: dict, size: Shape) -> ImageLayout:
    """The :class:`ImageLayout` of the first row's image in ``inputs`` (every row's image has the same size:
    :func:`~sinklib.architectures.mllm.visual_sinks.shared_positions`), for a picture of ``size`` (height, width) px
    as it was handed to the processor (:func:`~sinklib.architectures.mllm.captions.caption_inputs`).

    LLaVA and the stand-in: :meth:`ImageLayout.square`; Qwen2-VL: :func:`qwen2_vl_layout` of ``image_grid_thw``;
    Idefics3 / SmolVLM: :func:`idefics3_layout`, the crops' (rows, cols) by the image processor's own rule for
    ``size`` (``get_number_of_image_patches``). Checked against the number of image tokens in the input ids.
    """
    config = lm.model.config
    kind = config.model_type
    n = int(lm.adapter.image_positions(inputs["input_ids"][:1]).sum())
    if kind in ("qwen2_vl", "qwen2_5_vl"):
        layout = qwen2_vl_layout(inputs["image_grid_thw"][0].tolist(), config.vision_config.spatial_merge_size)
    elif kind in ("idefics3", "smolvlm"):
        from transformers import AutoProcessor

        _, rows, cols = AutoProcessor.from_pretrained(lm.name).image_processor.get_number_of_image_patches(*size, {})
        layout = idefics3_layout(tuple(inputs["pixel_values"].shape), config.vision_config.patch_size,
                                 config.scale_factor, (rows, cols))
    else:
        layout = ImageLayout.square(n)
    if layout.n_tokens != n:
        raise ValueError(f"{kind}: the layout has {layout.describe()}, the input ids {n} image tokens")
    return layout


# ------------------------------------------------------------------------------------------------ how many tokens
def _edge(size, key: str) -> int | None:
    return size.get(key) if hasattr(size, "get") else getattr(size, key, None)


def image_size_kwargs(image_processor, min_tokens: int = MIN_IMAGE_TOKENS) -> dict:
    """Processor keyword arguments that give a small picture (the 8 x 8 digits) at least ``min_tokens`` image tokens.

    Only a processor that sizes pictures by their pixel count needs them: Qwen2-VL's (Qwen2.5-VL's) resizes a picture,
    aspect kept, to between ``size["shortest_edge"]`` = min_pixels and ``size["longest_edge"]`` = max_pixels pixels
    in multiples of f = patch x merge px (14 x 2 = 28), one image token per f x f px; its default min_pixels = 56^2
    makes an 8 x 8 digit 56 x 56 px: 2 x 2 = 4 tokens. The rule: min_pixels = ``min_tokens`` f^2, as many tokens as
    LLaVA-1.5's 24 x 24 = 576 (an 8 x 8 digit becomes 672 x 672 px, 24 x 24 tokens; a picture that already gives more
    keeps its size), and max_pixels at least that. CLIP's processor (LLaVA: every picture 336 px) and Idefics3's
    (longest edge 4 x 384 px, in tiles) enlarge a small picture themselves: no arguments, ``{}``.
    """
    merge, patch = getattr(image_processor, "merge_size", None), getattr(image_processor, "patch_size", None)
    size = getattr(image_processor, "size", None)
    if not merge or not patch or size is None or not _edge(size, "shortest_edge") or not _edge(size, "longest_edge"):
        return {}
    floor = min_tokens * (patch * merge) ** 2
    return {"size": {"shortest_edge": max(floor, _edge(size, "shortest_edge")),
                     "longest_edge": max(floor, _edge(size, "longest_edge"))}}
