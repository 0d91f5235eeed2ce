"""What the dry run (:mod:`sinklib.pipeline.plan`) knows of a model without downloading it: its :class:`Shape`, from
``data/hub_models.json`` (:func:`hub_shapes`) or, for a hub id not listed there, its ``config.json`` alone
(:func:`shape_from_config`); and a step's sequence length on that model (:func:`step_tokens`: image tokens, patches,
clipped contexts)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from sinklib.core.errors import InputError
from sinklib.core.paths import ROOT
from sinklib.core.protocol import Step

TEXT_TOKENS = 40  # a caption prompt's text tokens beside an MLLM's image tokens


@dataclass(frozen=True)
class Shape:
    """What a memory estimate needs of a model (``data/hub_models.json``)."""

    params_b: float
    layers: int
    heads: int
    kv_heads: int
    hidden: int
    d_ff: int
    vocab: int = 0
    max_positions: int | None = None
    download_gb: float = 0.0
    patch: int | None = None  # ViTs
    registers: int = 0
    image_tokens: int = 0  # MLLMs: tokens one image becomes
    offline: bool = False
    gated: bool = False  # a licence to accept on the hub page before the files can be read
    active_b: float | None = None  # MoE: parameters one token passes through (None: params_b)


@cache
def hub_shapes() -> dict[str, Shape]:
    data = json.loads((ROOT / "data" / "hub_models.json").read_text(encoding="utf-8"))
    return {name: Shape(**facts) for name, facts in data["models"].items()}


def shape_from_config(name: str) -> Shape:
    """A model not in ``data/hub_models.json``: its shape from ``config.json`` alone (no weights; needs the hub)."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(name)
    except Exception as err:
        raise InputError(f"cannot check {name!r}: it is not in data/hub_models.json and its config.json could not "
                         f"be read ({type(err).__name__}); add its shape there to plan offline.") from err
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    d, L = text.hidden_size, text.num_hidden_layers
    d_ff = getattr(text, "intermediate_size", 4 * d)
    vocab = getattr(text, "vocab_size", 0) or 0
    params = (L * (4 * d * d + 3 * d * d_ff) + 2 * vocab * d) / 1e9  # dense estimate (MoE: add to the table)
    return Shape(params_b=params, layers=L, heads=text.num_attention_heads,
                 kv_heads=getattr(text, "num_key_value_heads", text.num_attention_heads), hidden=d, d_ff=d_ff,
                 vocab=vocab, max_positions=getattr(text, "max_position_embeddings", None),
                 download_gb=params * 2, patch=getattr(text, "patch_size", None))


def shape_of(name: str, offline: bool) -> Shape:
    """``name``'s shape: from the table; a registry stand-in's smoke twin (``<name>-smoke``: the same architecture,
    built on fewer calibration tokens or training steps) as its full-size one's; else from its config."""
    shapes = hub_shapes()
    for key in (name, name.removesuffix("-smoke")):
        if key in shapes:
            return shapes[key]
    if offline:
        raise InputError(f"cannot check {name!r} offline: add its shape to data/hub_models.json.")
    return shape_from_config(name)


def step_tokens(step: Step, shape: Shape) -> tuple[int, str]:
    """A step's sequence length for this model, and a note when the model changes it."""
    if step.tokens == -1:  # MLLM: image tokens + caption text
        return shape.image_tokens + TEXT_TOKENS, f"{shape.image_tokens} image + {TEXT_TOKENS} text tokens"
    if step.tokens < 0:  # ViT: -image_size
        side = -step.tokens // (shape.patch or 14)
        return side * side + 1 + shape.registers, f"{side}x{side} patches + CLS + {shape.registers} registers"
    if shape.max_positions and step.tokens > shape.max_positions:
        return shape.max_positions, f"{step.tokens} clipped to the model's {shape.max_positions} positions"
    return step.tokens, ""

