"""One small adapter per architecture family, chosen from the model's config: where the blocks, attention,
MLP / experts, norms and image tokens are, and whether attention is causal.

>>> adapter = adapter_for(model)          # Llama, Gemma-3, Mixtral, OLMoE, Qwen2-MoE, DINOv2, CLIP, timm ViT, LLaVA...
>>> adapter.layers[3].attn, adapter.causal, adapter.image_positions(input_ids)

``decoder`` (dense and MoE LMs), ``vision`` (transformers and timm ViTs), ``multimodal`` (LLaVA, Qwen2-VL, Idefics3).
"""

from __future__ import annotations

from torch import nn

from sinklib.core.adapters.base import Adapter, Layer
from sinklib.core.adapters.decoder import decoder_adapter, decoder_blocks
from sinklib.core.adapters.multimodal import LAYOUTS, mllm_adapter
from sinklib.core.adapters.vision import HF_VIT_TYPES, hf_vit_adapter, is_timm_vit, timm_vit_adapter
from sinklib.core.errors import InputError

__all__ = ["Adapter", "Layer", "adapter_for", "find_layers"]

_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def adapter_for(model: nn.Module) -> Adapter:
    """The adapter of ``model``, chosen from its config (timm: from its class); a one-line error when unsupported."""
    if is_timm_vit(model):
        return timm_vit_adapter(model)
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if config is None or model_type is None:
        raise InputError(f"{type(model).__name__} has no transformers config and is not a timm ViT; sinklib reads "
                         "transformers models and timm VisionTransformers.")
    if model_type in LAYOUTS:
        return mllm_adapter(model)
    if model_type in HF_VIT_TYPES:
        return hf_vit_adapter(model)
    if getattr(config, "vision_config", None) is not None:
        raise InputError(f"{type(model).__name__} ({model_type}) is a multimodal model without a sinklib layout; "
                         f"supported: {', '.join(LAYOUTS)} (add one in sinklib/core/adapters/multimodal.py).")
    if getattr(config, "is_encoder_decoder", False):
        raise InputError(f"{type(model).__name__} is an encoder-decoder model; sinklib reads decoder-only LMs, ViTs "
                         "and MLLMs.")
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    family = "moe" if any(getattr(text, k, None) for k in _EXPERT_KEYS) else "llm"
    if decoder_blocks(model) is None:
        raise InputError(f"{type(model).__name__} ({model_type}): found no decoder `layers`; supported: decoder LMs, "
                         f"{', '.join(HF_VIT_TYPES)}, timm ViTs, {', '.join(LAYOUTS)}.")
    return decoder_adapter(model, family)


def model_and_adapter(model, adapter: Adapter | None = None) -> tuple[nn.Module, Adapter]:
    """``(module, adapter)`` for a :class:`~sinklib.core.loaded.LoadedModel` (its own adapter, found once:
    ``lm.adapter``) or a bare module (found now); ``adapter`` overrides either."""
    if not isinstance(model, nn.Module):  # a LoadedModel: its .model, and its .adapter found once
        return model.model, adapter or getattr(model, "adapter", None) or adapter_for(model.model)
    return model, adapter or adapter_for(model)


def find_layers(model: nn.Module) -> list[Layer]:
    """The model's transformer blocks in order (the LM's in a multimodal model)."""
    return adapter_for(model).layers
