"""Decoder-only language models, dense and mixture-of-experts (transformers 5 layouts).

Dense (Llama, Gemma-3, Qwen2, gpt-oss's attention, ...): ``<base>.layers[i]`` with ``self_attn`` (``o_proj``), ``mlp``
(``down_proj``), ``input_layernorm`` and the pre-MLP norm (``post_attention_layernorm``; Gemma's
``pre_feedforward_layernorm``). Mixture of experts (Mixtral, OLMoE, Qwen2-MoE, gpt-oss): the same block whose ``mlp``
holds a router (``gate`` / ``router``), the fused experts (``experts``: ``gate_up_proj`` / ``down_proj`` parameters
shaped (E, ...), no per-expert modules in transformers 5) and, in Qwen2-MoE, a ``shared_expert``.
"""

from __future__ import annotations

from torch import nn

from sinklib.core.adapters.base import Adapter, Layer, child, require

ATTN_NAMES = ("self_attn", "attention", "attn", "self_attention")
OPROJ_NAMES = ("o_proj", "out_proj", "dense", "c_proj", "proj")
DOWN_NAMES = ("down_proj", "fc2", "w2", "c_proj", "dense_4h_to_h")


def decoder_blocks(model: nn.Module) -> nn.ModuleList | None:
    """The ``layers`` list of the model's text decoder (``model.model.layers`` for a *ForCausalLM)."""
    for path in ("model.layers", "layers", "model.language_model.layers", "language_model.layers",
                 "model.decoder.layers", "transformer.h", "gpt_neox.layers"):
        blocks = child(model, path)
        if isinstance(blocks, nn.ModuleList) and len(blocks):
            return blocks
    return None


def decoder_layer(i: int, block: nn.Module, model: nn.Module, kind: str) -> Layer:
    attn = require(child(block, *ATTN_NAMES), f"attention module in block {i}", model, kind)
    mlp = child(block, "mlp", "feed_forward", "ffn", "block_sparse_moe")
    experts = child(mlp, "experts")
    return Layer(
        index=i, block=block, attn=attn, o_proj=child(attn, *OPROJ_NAMES), mlp=mlp,
        down_proj=None if experts is not None else child(mlp, *DOWN_NAMES),
        attn_norm=child(block, "input_layernorm", "ln_1", "attention_norm"),
        mlp_norm=child(block, "pre_feedforward_layernorm", "post_attention_layernorm", "ln_2", "ffn_norm"),
        router=child(mlp, "gate", "router") if experts is not None else None,
        experts=experts, shared_expert=child(mlp, "shared_expert", "shared_experts"),
    )


def decoder_adapter(model: nn.Module, family: str = "llm", blocks: nn.ModuleList | None = None) -> Adapter:
    """A causal decoder (``family`` "llm" or "moe"); ``blocks`` overrides where its layers are (MLLMs)."""
    kind = f"{getattr(model.config, 'model_type', type(model).__name__)} decoder"
    blocks = require(blocks if blocks is not None else decoder_blocks(model), "list of decoder layers", model, kind)
    layers = [decoder_layer(i, block, model, kind) for i, block in enumerate(blocks)]
    if family == "moe" and not any(layer.experts is not None for layer in layers):
        require(None, "MoE block with fused `experts` (config names experts, blocks do not)", model, kind)
    return Adapter(family=family, kind=kind, layers=layers, causal=True)
