"""What every architecture adapter answers: where the blocks are, and what each block is made of.

An :class:`Adapter` is built once per model (by :func:`sinklib.core.adapters.adapter_for`) and tells capture, the
O(N) statistics and the interventions

* the transformer blocks in order, each as a :class:`Layer` (attention, its output projection, the MLP and its down
  projection -- or, in a mixture-of-experts block, the router, the fused experts and a shared expert -- and the
  norms before attention and MLP);
* which attention module belongs to which block (``index_of``), so nothing relies on ``module.layer_idx``, which
  encoder attention modules (DINOv2, ViT, CLIP) do not have and a vision tower's modules would share with the LM's;
* whether attention is causal, which backend runs it (transformers' attention interface, or timm), how many prefix
  tokens (CLS, registers) precede the patches, and which sequence positions hold image tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from sinklib.core.errors import InputError


@dataclass
class Layer:
    """The modules of one transformer block that capture and interventions hook into (None: the block has none)."""

    index: int
    block: nn.Module
    attn: nn.Module
    o_proj: nn.Module | None
    mlp: nn.Module | None
    down_proj: nn.Module | None  # dense MLPs; a MoE block's down projections are fused into ``experts``
    attn_norm: nn.Module | None = None  # normalises the block's input before attention
    mlp_norm: nn.Module | None = None  # normalises the residual stream before the MLP
    router: nn.Module | None = None  # MoE: returns (logits (N, E), top-k weights (N, k), top-k indices (N, k))
    experts: nn.Module | None = None  # MoE: transformers 5's fused experts (gate_up_proj / down_proj parameters)
    shared_expert: nn.Module | None = None  # MoE: an always-on dense expert (Qwen2-MoE)


@dataclass
class Adapter:
    """How sinklib sees one model. ``family``: llm, moe, vit or mllm; ``kind``: the adapter's own name."""

    family: str
    kind: str
    layers: list[Layer]
    causal: bool
    backend: str = "transformers"  # "transformers" (attention interface) or "timm" (hooks on timm's Attention)
    n_prefix: int = 0  # ViTs: CLS + register tokens before the patch tokens
    image_token_id: int | None = None  # MLLMs: the placeholder id that marks image positions in input_ids
    vision: Adapter | None = None  # MLLMs: the vision tower, when sinklib can read it
    _by_module: dict[int, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for layer in self.layers:
            self._by_module[id(layer.attn)] = layer.index
            if layer.experts is not None:
                self._by_module[id(layer.experts)] = layer.index

    def index_of(self, module: nn.Module) -> int | None:
        """Block index of an attention (or experts) module of this tower; None for any other module."""
        return self._by_module.get(id(module))

    def image_positions(self, input_ids: torch.Tensor | None = None) -> torch.Tensor | None:
        """Boolean (B, T): which positions are image tokens.

        MLLM: ``input_ids == image_token_id``; ViT: every position after the prefix tokens (pass ``input_ids`` or
        any (B, T) tensor for the shape); text models: None (there are none).
        """
        if self.family == "mllm":
            if input_ids is None:
                raise InputError("image_positions needs the input_ids of a multimodal model")
            return input_ids == self.image_token_id
        if self.family == "vit":
            if input_ids is None:
                raise InputError("image_positions needs a (B, T) tensor for a ViT (T = prefix + patches)")
            mask = torch.ones(input_ids.shape[:2], dtype=torch.bool, device=input_ids.device)
            mask[:, : self.n_prefix] = False
            return mask
        return None

    def describe(self) -> str:
        extra = f", {self.n_prefix} prefix tokens" if self.family == "vit" else ""
        moe = sum(layer.experts is not None for layer in self.layers)
        extra += f", {moe} MoE blocks" if moe else ""
        return (f"{self.kind}: {len(self.layers)} blocks, {'causal' if self.causal else 'bidirectional'} attention "
                f"via {self.backend}{extra}")


def child(module: nn.Module | None, *names: str) -> nn.Module | None:
    """The first of ``names`` (dotted paths allowed) that exists under ``module``, else None."""
    if module is None:
        return None
    for name in names:
        try:
            return module.get_submodule(name)
        except AttributeError:
            continue
    return None


def require(module: nn.Module | None, what: str, model: nn.Module, kind: str) -> nn.Module:
    """``module``, or a one-line error naming what the adapter could not find."""
    if module is None:
        raise InputError(f"{type(model).__name__} ({kind} adapter): found no {what}; this model's layout is not "
                         "supported -- add an adapter in sinklib/core/adapters/.")
    return module
