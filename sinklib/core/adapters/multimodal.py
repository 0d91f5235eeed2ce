"""Multimodal decoders: the language tower is named explicitly, never guessed.

LLaVA (``LlavaForConditionalGeneration``): ``model.language_model.layers`` (the LM), ``model.vision_tower`` (a CLIP /
SigLIP / DINOv2 vision model, read by :func:`~sinklib.core.adapters.vision.hf_vit_adapter`). Qwen2-VL
(``Qwen2VLForConditionalGeneration``): ``model.language_model.layers`` and ``model.visual.blocks`` (a vision tower
with windowed, packed-sequence attention that sinklib does not read; its adapter says so with ``vision=None``).
The longest ``ModuleList`` is *not* a safe guess: a 24-layer vision tower beside a 16-layer LM would win.

In both, image patches enter the LM as placeholder tokens: ``input_ids == config.image_token_id`` marks them, and
:meth:`~sinklib.core.adapters.base.Adapter.image_positions` gives every metric that mask.
"""

from __future__ import annotations

from torch import nn

from sinklib.core.adapters.base import Adapter, child, require
from sinklib.core.adapters.decoder import decoder_adapter
from sinklib.core.adapters.vision import hf_vit_adapter

# model_type -> (path of the language model's layers, path of a vision tower sinklib can read, or None)
LAYOUTS = {
    "llava": ("model.language_model.layers", "model.vision_tower"),
    "llava_next": ("model.language_model.layers", "model.vision_tower"),
    "qwen2_vl": ("model.language_model.layers", None),
    "qwen2_5_vl": ("model.language_model.layers", None),
    "idefics3": ("model.text_model.layers", "model.vision_model"),
    "smolvlm": ("model.text_model.layers", "model.vision_model"),
}


def mllm_adapter(model: nn.Module) -> Adapter:
    config = model.config
    text_path, vision_path = LAYOUTS[config.model_type]
    kind = f"{config.model_type} language tower"
    blocks = require(child(model, text_path), f"language layers at `{text_path}`", model, kind)
    adapter = decoder_adapter(model, blocks=blocks)
    image_token_id = getattr(config, "image_token_id", None)
    if image_token_id is None:
        image_token_id = getattr(config, "image_token_index", None)
    require(None if image_token_id is None else model, "image_token_id in the config", model, kind)
    vision = None
    tower = child(model, vision_path) if vision_path else None
    if tower is not None and getattr(tower.config, "model_type", "") in (
            "clip_vision_model", "siglip_vision_model", "dinov2", "idefics3_vision"):
        vision = hf_vit_adapter(tower)
    return Adapter(family="mllm", kind=kind, layers=adapter.layers, causal=True, image_token_id=int(image_token_id),
                   vision=vision)
