"""Capture what a forward pass computes, per layer, through transformers' own mechanisms.

* attention probabilities: a recording function registered in transformers' ``AttentionInterface`` (plus the eager
  mask function in ``AttentionMaskInterface``, so causal, padding and sliding-window masks are built as usual) that
  calls the model's own ``eager_attention_forward`` and keeps the weights it returns -- whatever backend the model
  was loaded with;
* residual hidden states h^l (output of decoder layer l): forward hooks on the layers;
* per-head attention outputs o^{l,h} (after value aggregation, before W_O): pre-hooks on the output projection;
* MLP intermediate activations (the input of W_down): pre-hooks on the down projection;
* on request, the normalised inputs of attention and MLP, and the post-RoPE queries, keys and values the attention
  function receives.

Everything is registered on ``__enter__`` and removed on ``__exit__``, even when the forward raises.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from sinklib.core.switch import AttentionSwitch, Patch, eager_for

KINDS = (
    "attentions",  # (B, H, T_q, T_k) probabilities
    "hidden_states",  # (B, T, d) residual stream after the block
    "head_outputs",  # (B, T, H, head_dim) after value aggregation, before W_O
    "mlp_activations",  # (B, T, d_ff) input of W_down
    "attn_inputs",  # (B, T, d) normalised input of the attention block
    "mlp_inputs",  # (B, T, d) normalised input of the MLP
    "queries",  # (B, H, T, head_dim) after RoPE
    "keys",  # (B, H_kv, T, head_dim) after RoPE
    "values",  # (B, H_kv, T, head_dim)
)
_VIA_ATTENTION_FN = {"attentions", "queries", "keys", "values"}
_ATTN_NAMES = ("self_attn", "attention", "attn", "self_attention")
_OPROJ_NAMES = ("o_proj", "out_proj", "output.dense", "dense", "c_proj", "proj")
_DOWN_NAMES = ("down_proj", "fc2", "w2", "c_proj", "dense_4h_to_h")


@dataclass
class LayerParts:
    """The modules of one transformer block that capture and interventions hook into."""

    index: int
    block: nn.Module
    attn: nn.Module
    o_proj: nn.Module | None
    mlp: nn.Module | None
    down_proj: nn.Module | None


def _child(module: nn.Module, names: tuple[str, ...]) -> nn.Module | None:
    for name in names:
        try:
            return module.get_submodule(name)
        except AttributeError:
            continue
    return None


def find_layers(model: nn.Module) -> list[LayerParts]:
    """The model's transformer blocks in order: the longest ``ModuleList`` whose items have an attention child."""
    best: nn.ModuleList | None = None
    for mod in model.modules():
        if isinstance(mod, nn.ModuleList) and len(mod) and _child(mod[0], _ATTN_NAMES) is not None:
            if best is None or len(mod) > len(best):
                best = mod
    if best is None:
        raise TypeError(f"{type(model).__name__}: found no list of transformer blocks with an attention module.")
    parts = []
    for i, block in enumerate(best):
        attn = _child(block, _ATTN_NAMES)
        mlp = _child(block, ("mlp", "feed_forward", "ffn"))
        parts.append(LayerParts(
            index=i, block=block, attn=attn,
            o_proj=_child(attn, _OPROJ_NAMES) or _child(block, ("attention.output.dense",)),
            mlp=mlp, down_proj=_child(mlp, _DOWN_NAMES) if mlp is not None else None,
        ))
    return parts


class Capture(Patch):
    """Context manager that records per-layer tensors during the forwards run inside it.

    >>> with Capture(lm.model, attentions=True, hidden_states=True) as cap:
    ...     lm.model(input_ids)
    >>> cap.stack("attentions").shape   # (L, B, H, T, T)

    Kinds: see :data:`KINDS`; pass them as keyword flags (``attentions=True``) or as ``kinds=[...]``.
    ``reduce`` maps a kind to ``fn(tensor, layer) -> tensor`` applied before storing (e.g. keep only the first key's
    column), so long runs need not hold every full tensor. Tensors are detached and moved to ``store_device``.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        attentions: bool = False,
        hidden_states: bool = False,
        head_outputs: bool = False,
        mlp_activations: bool = False,
        kinds: tuple[str, ...] | list[str] = (),
        layers: list[int] | None = None,
        reduce: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] | None = None,
        store_device: str | torch.device = "cpu",
    ):
        super().__init__()
        self.model = model
        self.parts = find_layers(model)
        self.layers = set(range(len(self.parts)) if layers is None else layers)
        flags = {"attentions": attentions, "hidden_states": hidden_states, "head_outputs": head_outputs,
                 "mlp_activations": mlp_activations}
        self.wanted = {k for k, on in flags.items() if on} | set(kinds)
        unknown = self.wanted - set(KINDS)
        if unknown:
            raise ValueError(f"Capture: unknown kinds {sorted(unknown)}; use {', '.join(KINDS)}")
        if not self.wanted:
            raise ValueError("Capture: ask for at least one of " + ", ".join(KINDS))
        self.reduce = reduce or {}
        self.store_device = torch.device(store_device)
        self.records: dict[str, dict[int, list[torch.Tensor]]] = defaultdict(lambda: defaultdict(list))

    # ------------------------------------------------------------------------------------------------ recording
    def _store(self, kind: str, layer: int, tensor: torch.Tensor) -> None:
        if layer not in self.layers:
            return
        tensor = tensor.detach()
        if kind in self.reduce:
            tensor = self.reduce[kind](tensor, layer)
        self.records[kind][layer].append(tensor.to(self.store_device))

    def _attention_fn(self, module, query, key, value, attention_mask, **kwargs):
        out, weights = eager_for(module)(module, query, key, value, attention_mask, **kwargs)
        for kind, tensor in (("attentions", weights), ("queries", query), ("keys", key), ("values", value)):
            if kind in self.wanted:
                self._store(kind, module.layer_idx, tensor)
        return out, weights

    def _hooks(self) -> list:
        handles = []
        for p in self.parts:
            if p.index not in self.layers:
                continue
            if "hidden_states" in self.wanted:
                def on_block(mod, args, output, i=p.index):
                    h = output[0] if isinstance(output, tuple) else output
                    self._store("hidden_states", i, h)  # (B, T, d)
                handles.append(p.block.register_forward_hook(on_block))
            if "attn_inputs" in self.wanted:
                def on_attn(mod, args, kwargs, i=p.index):
                    self._store("attn_inputs", i, args[0] if args else kwargs["hidden_states"])  # (B, T, d)
                handles.append(p.attn.register_forward_pre_hook(on_attn, with_kwargs=True))
            if "mlp_inputs" in self.wanted:
                if p.mlp is None:
                    raise TypeError(f"layer {p.index}: no MLP found")
                def on_mlp(mod, args, kwargs, i=p.index):
                    self._store("mlp_inputs", i, args[0] if args else next(iter(kwargs.values())))  # (B, T, d)
                handles.append(p.mlp.register_forward_pre_hook(on_mlp, with_kwargs=True))
            if "head_outputs" in self.wanted:
                if p.o_proj is None:
                    raise TypeError(f"layer {p.index}: no output projection found for head outputs")
                def on_oproj(mod, args, i=p.index, attn=p.attn):
                    x = args[0]  # (B, T, H * head_dim)
                    self._store("head_outputs", i, x.unflatten(-1, (-1, _head_dim(attn, x))))  # (B, T, H, hd)
                handles.append(p.o_proj.register_forward_pre_hook(on_oproj))
            if "mlp_activations" in self.wanted:
                if p.down_proj is None:
                    raise TypeError(f"layer {p.index}: no MLP down projection found")
                def on_down(mod, args, i=p.index):
                    self._store("mlp_activations", i, args[0])  # (B, T, d_ff)
                handles.append(p.down_proj.register_forward_pre_hook(on_down))
        return handles

    # ------------------------------------------------------------------------------------------------ context
    def _install(self) -> None:
        self._handles = self._hooks()
        if self.wanted & _VIA_ATTENTION_FN:
            current = self.model.config._attn_implementation or ""
            if current.startswith("sinklib_"):
                raise RuntimeError(
                    f"a sinklib capture or intervention ({current}) is already active on this model; enter Capture "
                    "first: `with Capture(...) as cap, SomeIntervention(...):`"
                )
            self._switch = AttentionSwitch(self.model, "sinklib_capture", self._attention_fn).__enter__()

    # ------------------------------------------------------------------------------------------------ results
    def get(self, kind: str, layer: int) -> torch.Tensor:
        """All recorded tensors of one kind and layer, concatenated along the batch dimension."""
        chunks = self.records[kind][layer]
        if not chunks:
            raise KeyError(f"nothing recorded for {kind!r} at layer {layer}")
        return torch.cat(chunks, dim=0)

    def stack(self, kind: str) -> torch.Tensor:
        """``(L_captured, B, ...)``: :meth:`get` for every captured layer, stacked in layer order."""
        return torch.stack([self.get(kind, i) for i in sorted(self.layers)])

    def clear(self) -> None:
        self.records.clear()


def _head_dim(attn: nn.Module, x: torch.Tensor) -> int:
    hd = getattr(attn, "head_dim", None) or getattr(attn, "attention_head_size", None)
    return int(hd) if hd else x.shape[-1] // attn.config.num_attention_heads


def hooks_left(model: nn.Module) -> int:
    """Number of forward hooks/pre-hooks registered anywhere in ``model`` (unchanged by a finished capture)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
