"""Vision transformers: transformers' DINOv2 (with and without registers), ViT and CLIP/SigLIP vision towers, and
timm's ``VisionTransformer``.

All are bidirectional: every token sees every token, so a missing mask means *full* attention (each attention module
says so itself with ``is_causal = False``). The prefix tokens -- CLS plus registers (Darcet et al., "Vision
Transformers Need Registers") -- come first, the patch tokens after them.

transformers: ``encoder.layer[i]`` (DINOv2), ``layers[i]`` (ViT) or ``encoder.layers[i]`` (CLIP, SigLIP), attention ``attention`` /
``self_attn`` with ``o_proj`` / ``out_proj``, MLP ``fc2`` (or SwiGLU ``down_proj``). timm: ``blocks[i]`` with
``attn`` (``qkv``, ``q_norm``, ``k_norm``, ``attn_drop``, ``proj``) and ``mlp.fc2``; timm runs attention in its
own code, so sinklib reads probabilities by turning the fused path off and hooking ``attn_drop`` (the module that
receives the softmax output), see :class:`sinklib.core.attention_switch.TimmEagerAttention`.
"""

from __future__ import annotations

from torch import nn

from sinklib.core.adapters.base import Adapter, Layer, child, require

HF_VIT_TYPES = ("dinov2", "dinov2_with_registers", "vit", "clip_vision_model", "siglip_vision_model")


def _encoder_blocks(model: nn.Module) -> nn.ModuleList | None:
    for path in ("encoder.layer", "encoder.layers", "layers", "vision_model.encoder.layers", "model.encoder.layer"):
        blocks = child(model, path)
        if isinstance(blocks, nn.ModuleList) and len(blocks):
            return blocks
    return None


def hf_vit_adapter(model: nn.Module) -> Adapter:
    """DINOv2 (+registers), ViT, CLIP / SigLIP vision: bidirectional, 1 CLS (+ registers; SigLIP: none)."""
    config = model.config
    kind = f"{config.model_type} encoder"
    blocks = require(_encoder_blocks(model), "list of encoder layers", model, kind)
    layers = []
    for i, block in enumerate(blocks):
        attn = require(child(block, "attention", "self_attn"), f"attention module in block {i}", model, kind)
        mlp = child(block, "mlp")
        layers.append(Layer(
            index=i, block=block, attn=attn, o_proj=child(attn, "o_proj", "out_proj", "output.dense"), mlp=mlp,
            down_proj=child(mlp, "fc2", "down_proj"), attn_norm=child(block, "norm1", "layernorm_before", "layer_norm1"),
            mlp_norm=child(block, "norm2", "layernorm_after", "layer_norm2"),
        ))
    cls = 0 if config.model_type in ("siglip_vision_model", "idefics3_vision") else 1  # no CLS token
    return Adapter(family="vit", kind=kind, layers=layers, causal=False,
                   n_prefix=cls + int(getattr(config, "num_register_tokens", 0) or 0))


def is_timm_vit(model: nn.Module) -> bool:
    blocks = getattr(model, "blocks", None)
    return (type(model).__module__.startswith("timm.") and isinstance(blocks, nn.Sequential | nn.ModuleList)
            and len(blocks) > 0 and hasattr(blocks[0], "attn"))


def timm_vit_adapter(model: nn.Module) -> Adapter:
    """timm ``VisionTransformer`` (DINOv2, DeiT-III, CLIP, ... ``reg_tokens`` registers): bidirectional."""
    kind = f"timm {type(model).__name__}"
    layers = []
    for i, block in enumerate(model.blocks):
        attn = block.attn
        for part in ("qkv", "attn_drop", "proj"):
            require(child(attn, part), f"`attn.{part}` in block {i} (timm's standard Attention)", model, kind)
        layers.append(Layer(index=i, block=block, attn=attn, o_proj=attn.proj, mlp=child(block, "mlp"),
                            down_proj=child(block, "mlp.fc2", "mlp.w3"), attn_norm=child(block, "norm1"),
                            mlp_norm=child(block, "norm2")))
    return Adapter(family="vit", kind=kind, layers=layers, causal=False, backend="timm",
                   n_prefix=int(getattr(model, "num_prefix_tokens", 1)))
