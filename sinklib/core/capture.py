"""Capture what a forward pass computes, per layer, through the libraries' own mechanisms.

* attention probabilities: transformers models -- a recording function registered in ``AttentionInterface`` (plus
  the eager mask function in ``AttentionMaskInterface``, so causal, padding and sliding-window masks are built as
  usual) that calls the model's own ``eager_attention_forward`` and keeps the weights it returns, whatever backend the
  model was loaded with; timm ViTs -- the fused path turned off and a hook on ``attn_drop``, which receives them;
* residual hidden states h^l (output of block l): forward hooks on the blocks;
* per-head attention outputs o^{l,h} (after value aggregation, before W_O): pre-hooks on the output projection;
* MLP intermediate activations (the input of W_down): pre-hooks on the down projection;
* mixture of experts: the router's logits, top-k choice and weights (hook on the router), and each selected
  expert's output before its routing weight (a recording function in transformers' ``ExpertsInterface``);
* on request, the normalised inputs of attention and MLP, and the (post-RoPE) queries, keys and values.

Where the blocks are, and which attention module is which block, comes from the model's architecture adapter
(:func:`sinklib.core.adapters.adapter_for`), so decoders, MoE decoders, ViTs (transformers and timm) and the language
tower of a multimodal model are read alike. Everything is registered on ``__enter__`` and removed on ``__exit__``,
even when the forward raises.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import torch
from torch import nn

from sinklib.core.adapters import Adapter, Layer, model_and_adapter
from sinklib.core.attention_switch import AttentionSwitch, ExpertsSwitch, Patch, TimmEagerAttention, eager_for

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
    "router_logits",  # (B, T, E) MoE router logits
    "expert_choice",  # (B, T, k) indices of the selected experts
    "expert_weights",  # (B, T, k) their routing weights
    "expert_outputs",  # (B, T, k, d) each selected expert's down-projection output, before its weight
)
_VIA_ATTENTION_FN = {"attentions", "queries", "keys", "values"}
_ROUTER = {"router_logits", "expert_choice", "expert_weights"}


def selected_expert_outputs(experts: nn.Module, hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """y[t, j] = W_down[e] g(W_gate_up[e] x_t) (+ biases), e = index[t, j]: each selected expert's output before its
    routing weight, computed from the fused parameters as transformers 5's experts forward does (gated or not,
    biases, transposed storage, post-expert norm), one expert at a time.

    hidden: (N, d); index: (N, k) -> (N, k, d).
    """
    def linear(x, weight, bias):  # weight (out, in), or (in, out) when the module stores it transposed
        y = x @ weight if getattr(experts, "is_transposed", False) else x @ weight.T
        return y if bias is None else y + bias

    has_gate, has_bias = getattr(experts, "has_gate", True), getattr(experts, "has_bias", False)
    up_name = "gate_up_proj" if has_gate else "up_proj"
    out = hidden.new_zeros(*index.shape, hidden.shape[-1])  # (N, k, d)
    for e in index.unique().tolist():
        if e >= experts.num_experts:  # expert-parallel sentinel: not on this rank
            continue
        rows, slot = torch.where(index == e)
        x = hidden[rows]  # (n_e, d)
        h = linear(x, getattr(experts, up_name)[e], getattr(experts, f"{up_name}_bias")[e] if has_bias else None)
        h = experts._apply_gate(h) if has_gate else experts.act_fn(h)  # (n_e, d_ff)
        y = linear(h, experts.down_proj[e], experts.down_proj_bias[e] if has_bias else None)
        if getattr(experts, "has_post_expert_norm", False):
            y = experts.post_expert_norm(y)
        out[rows, slot] = y.to(out.dtype)
    return out


def float32_inputs(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None):
    """The eager attention's inputs in float32, so P = softmax(q k^T * scaling + mask) is formed in float32 whatever
    the model's dtype: in bfloat16 (8 bits of mantissa) a logit of 20-40 is rounded by up to 0.125, which moves its
    probability by several percent. A float32 model is unchanged (``.float()`` returns the same tensors).
    """
    floats = [t.float() for t in (query, key, value)]
    if mask is not None and mask.is_floating_point():
        mask = mask.float()  # bfloat16's most negative value stays a masked logit in float32
    return (*floats, mask)


class Capture(Patch):
    """Context manager that records per-layer tensors during the forwards run inside it.

    >>> with Capture(lm, attentions=True, hidden_states=True) as cap:
    ...     lm.model(input_ids)
    >>> cap.stack("attentions").shape   # (L, B, H, T, T)
    >>> cap.stack("router_logits").shape, cap.layers_of("router_logits")   # (L_moe, B, T, E), its layers

    Kinds: see :data:`KINDS`; pass them as keyword flags (``attentions=True``) or as ``kinds=[...]``. The MoE kinds
    exist only in blocks with routed experts (:meth:`layers_of`; a dense first layer, as DeepSeek-V2's, has none).
    ``reduce`` maps a kind to ``fn(tensor, layer) -> tensor`` applied before storing (e.g. keep only the first key's
    column), so long runs need not hold every full tensor. Tensors are detached and moved to ``store_device``.
    Attention probabilities are computed in float32 (:func:`float32_inputs`) and handed back to the model in its
    own dtype; queries, keys and values are stored as the model computed them.
    In a multimodal model the layers are the language tower's; ``adapter`` overrides the model's own.
    """

    def __init__(
        self,
        model,  # nn.Module, or a LoadedModel
        *,
        attentions: bool = False,
        hidden_states: bool = False,
        head_outputs: bool = False,
        mlp_activations: bool = False,
        kinds: tuple[str, ...] | list[str] = (),
        layers: list[int] | None = None,
        reduce: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] | None = None,
        store_device: str | torch.device = "cpu",
        adapter: Adapter | None = None,
    ):
        super().__init__()
        self.model, self.adapter = model_and_adapter(model, adapter)  # a LoadedModel brings its own adapter
        self.parts = self.adapter.layers
        self.layers = set(range(len(self.parts)) if layers is None else layers)
        flags = {"attentions": attentions, "hidden_states": hidden_states, "head_outputs": head_outputs,
                 "mlp_activations": mlp_activations}
        self.wanted = {k for k, on in flags.items() if on} | set(kinds)
        unknown = self.wanted - set(KINDS)
        if unknown:
            raise ValueError(f"Capture: unknown kinds {sorted(unknown)}; use {', '.join(KINDS)}")
        if not self.wanted:
            raise ValueError("Capture: ask for at least one of " + ", ".join(KINDS))
        moe = self.wanted & (_ROUTER | {"expert_outputs"})
        if moe and not any(p.experts is not None for p in self.parts):
            raise ValueError(f"Capture: {sorted(moe)} need a mixture-of-experts model; {self.adapter.kind} has none")
        self.reduce = reduce or {}
        self.store_device = torch.device(store_device)
        self.records: dict[str, dict[int, list[torch.Tensor]]] = defaultdict(lambda: defaultdict(list))
        self._moe_shape: dict[int, tuple[int, int]] = {}  # layer -> (B, T) of the MoE block's current input

    # ------------------------------------------------------------------------------------------------ recording
    def _store(self, kind: str, layer: int, tensor: torch.Tensor) -> None:
        if layer not in self.layers:
            return
        tensor = tensor.detach()
        if kind in self.reduce:
            tensor = self.reduce[kind](tensor, layer)
        self.records[kind][layer].append(tensor.to(self.store_device))

    def _attention_fn(self, module, query, key, value, attention_mask, **kwargs):
        layer = self.adapter.index_of(module)
        if layer is None:  # another tower (e.g. the vision encoder of an MLLM): run it as before
            return self._switch.delegate(module, query, key, value, attention_mask, **kwargs)
        for kind, tensor in (("queries", query), ("keys", key), ("values", value)):
            if kind in self.wanted:
                self._store(kind, layer, tensor)
        out, weights = eager_for(module)(module, *float32_inputs(query, key, value, attention_mask), **kwargs)
        if "attentions" in self.wanted:
            self._store("attentions", layer, weights)
        return out.to(query.dtype), weights

    def _experts_fn(self, module, hidden, top_k_index, top_k_weights):
        layer = self.adapter.index_of(module)
        if layer is not None and layer in self.layers:
            B, T = self._moe_shape[layer]
            y = selected_expert_outputs(module, hidden, top_k_index)  # (B*T, k, d)
            self._store("expert_outputs", layer, y.view(B, T, *y.shape[1:]))
        return self._experts.delegate(module, hidden, top_k_index, top_k_weights)

    def _hook(self, module: nn.Module | None, what: str, layer: Layer, fn, pre: bool = False, kwargs=False) -> None:
        if module is None:
            raise TypeError(f"layer {layer.index}: no {what} found ({self.adapter.kind})")
        register = module.register_forward_pre_hook if pre else module.register_forward_hook
        self._handles.append(register(fn, with_kwargs=True) if kwargs else register(fn))

    def _layer_hooks(self, p: Layer) -> None:
        i = p.index
        if "hidden_states" in self.wanted:
            self._hook(p.block, "block", p, lambda m, a, out: self._store(
                "hidden_states", i, out[0] if isinstance(out, tuple) else out))  # (B, T, d)
        if "attn_inputs" in self.wanted:
            self._hook(p.attn, "attention", p, lambda m, a, kw: self._store(
                "attn_inputs", i, a[0] if a else next(iter(kw.values()))), pre=True, kwargs=True)  # (B, T, d)
        if "mlp_inputs" in self.wanted:
            self._hook(p.mlp, "MLP", p, lambda m, a, kw: self._store(
                "mlp_inputs", i, a[0] if a else next(iter(kw.values()))), pre=True, kwargs=True)  # (B, T, d)
        if "head_outputs" in self.wanted:
            self._hook(p.o_proj, "output projection for head outputs", p, lambda m, a: self._store(
                "head_outputs", i, a[0].unflatten(-1, (-1, _head_dim(p.attn, a[0])))), pre=True)  # (B, T, H, hd)
        if "mlp_activations" in self.wanted:
            self._hook(p.down_proj, "MLP down projection (MoE: use expert_outputs)", p, lambda m, a: self._store(
                "mlp_activations", i, a[0]), pre=True)  # (B, T, d_ff)
        if p.experts is not None and self.wanted & (_ROUTER | {"expert_outputs"}):
            def on_moe(m, a, kw):
                x = a[0] if a else next(iter(kw.values()))
                self._moe_shape[i] = tuple(x.shape[:2])
            self._hook(p.mlp, "MoE block", p, on_moe, pre=True, kwargs=True)
        if p.experts is not None and self.wanted & _ROUTER:  # every block with routed experts has a router
            self._hook(p.router, "router", p, lambda m, a, out: self._record_router(i, m, out))
        if self.adapter.backend == "timm":
            self._timm_hooks(p)

    def _record_router(self, layer: int, router: nn.Module, out) -> None:
        logits, scores, index = out  # (N, E), (N, k) or (N, E), (N, k)
        shape = self._moe_shape[layer]
        if scores.shape[-1] != index.shape[-1]:  # full (N, E) score table: keep the selected experts' weights
            scores = scores.gather(-1, index)
        for kind, x in (("router_logits", logits), ("expert_choice", index), ("expert_weights", scores)):
            if kind in self.wanted:
                self._store(kind, layer, x.reshape(*shape, x.shape[-1]))

    def _timm_hooks(self, p: Layer) -> None:
        """timm's Attention: probabilities leave softmax through ``attn_drop``; q, k through ``q_norm``/``k_norm``."""
        i, attn = p.index, p.attn
        if "attentions" in self.wanted:
            self._hook(attn.attn_drop, "attn_drop", p, lambda m, a, out: self._store("attentions", i, out))
        for kind, part in (("queries", "q_norm"), ("keys", "k_norm")):
            if kind in self.wanted:
                self._hook(getattr(attn, part), part, p, lambda m, a, out, kind=kind: self._store(kind, i, out))
        if "values" in self.wanted:
            def on_qkv(m, a, out):  # (B, N, 3 H hd) -> v (B, H, N, hd)
                self._store("values", i, out.unflatten(-1, (3, attn.num_heads, -1))[:, :, 2].transpose(1, 2))
            self._hook(attn.qkv, "qkv", p, on_qkv)

    # ------------------------------------------------------------------------------------------------ context
    def _install(self) -> None:
        for p in self.parts:
            if p.index in self.layers:
                self._layer_hooks(p)
        if self.wanted & _VIA_ATTENTION_FN:
            if self.adapter.backend == "timm":
                if "attentions" in self.wanted:
                    self._switches.append(TimmEagerAttention([p.attn for p in self.parts]).__enter__())
            else:
                current = self.model.config._attn_implementation or ""
                if current.startswith("sinklib_"):
                    raise RuntimeError(
                        f"a sinklib capture or intervention ({current}) is already active on this model; enter "
                        "Capture first: `with Capture(...) as cap, SomeIntervention(...):`"
                    )
                self._switch = AttentionSwitch(self.model, "sinklib_capture", self._attention_fn).__enter__()
        if "expert_outputs" in self.wanted:
            self._experts = ExpertsSwitch(self.model, "sinklib_experts", self._experts_fn).__enter__()
            self._switches.append(self._experts)

    # ------------------------------------------------------------------------------------------------ results
    def get(self, kind: str, layer: int) -> torch.Tensor:
        """All recorded tensors of one kind and layer, concatenated along the batch dimension."""
        chunks = self.records[kind][layer]
        if not chunks:
            raise KeyError(f"nothing recorded for {kind!r} at layer {layer}")
        return torch.cat(chunks, dim=0)

    def layers_of(self, kind: str) -> list[int]:
        """The captured layers that have ``kind``, in order: the model's layer index of each row of :meth:`stack`.

        Every captured layer, except for the mixture-of-experts kinds (router logits, choice, weights, expert
        outputs), which only blocks with routed experts have: DeepSeek-V2's first ``first_k_dense_replace`` blocks
        are dense MLPs, so there row r of ``stack("router_logits")`` is layer r + 1.
        """
        if kind not in KINDS:
            raise ValueError(f"Capture: unknown kind {kind!r}; use {', '.join(KINDS)}")
        moe = kind in _ROUTER or kind == "expert_outputs"
        return [p.index for p in self.parts if p.index in self.layers and (p.experts is not None or not moe)]

    def stack(self, kind: str) -> torch.Tensor:
        """``(L_kind, B, ...)``: :meth:`get` for each layer of :meth:`layers_of` (``kind``), stacked in layer order --
        every captured layer, or for a MoE kind the captured layers with routed experts (row r is layer
        ``layers_of(kind)[r]``). A KeyError when none of them has ``kind``, or one of them recorded nothing."""
        layers = self.layers_of(kind)
        if not layers:
            raise KeyError(f"nothing to stack for {kind!r}: none of the captured layers {sorted(self.layers)} has it "
                           "(a MoE kind needs a block with routed experts)")
        return torch.stack([self.get(kind, i) for i in layers])

    def clear(self) -> None:
        self.records.clear()


def _head_dim(attn: nn.Module, x: torch.Tensor) -> int:
    hd = getattr(attn, "head_dim", None) or getattr(attn, "attention_head_size", None)
    return int(hd) if hd else x.shape[-1] // attn.config.num_attention_heads



def hooks_left(model: nn.Module) -> int:
    """Number of forward hooks/pre-hooks registered anywhere in ``model`` (unchanged by a finished capture)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
