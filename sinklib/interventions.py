"""Interventions: small context managers that change one thing in a forward pass and restore the model on exit.

* :class:`SelfOnlyAttention` -- attention-mask edit: the token at position k attends only to itself
  (arXiv 2605.06611, intervention i);
* :class:`HeadOutputAmplification` -- o'_k = mu + lambda (o_k - mu) on the head outputs of token k before W_O
  (intervention ii), or the control o'_k = lambda o_k;
* :class:`ResidualOverride` -- set chosen residual-stream entries (massive activations) to zero or to a given value
  (Sun et al., arXiv 2402.17762);
* :class:`AttentionCalibration` -- ACT (arXiv 2406.15765): damp non-first sinks in chosen heads and give the mass
  back to the other tokens.

They compose with :class:`sinklib.capture.Capture` when entered inside it:
``with Capture(model, attentions=True) as cap, SelfOnlyAttention(model, 10): model(ids)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from sinklib.capture import find_layers
from sinklib.registry import AttentionSwitch, Patch, eager_for


class _Intervention(Patch):
    """Shared bookkeeping: the layers to edit; hooks and the attention switch are undone by :class:`Patch`."""

    def __init__(self, model: nn.Module, layers: Sequence[int] | None = None):
        super().__init__()
        self.model = model
        self.parts = find_layers(model)
        n = len(self.parts)
        self.layers = set(range(n) if layers is None else layers)
        bad = [i for i in self.layers if not 0 <= i < n]
        if bad:
            raise ValueError(f"layers {bad} outside 0..{n - 1}")
        self.calls = 0  # how many times the edit was applied (a test can check it ran)

    def _attention(self, module, query, key, value, attention_mask, **kwargs):  # subclasses may override
        raise NotImplementedError

    def _delegate(self, module, *args, **kwargs):
        """Call the attention function that was active before this intervention (sdpa, eager, a Capture, ...)."""
        return self._switch.delegate(module, *args, **kwargs)

    def _use_attention_function(self) -> None:
        """Route attention through :meth:`_attention`, which receives a 4D additive mask it may edit."""
        self._switch = AttentionSwitch(self.model, "sinklib_intervention", self._attention).__enter__()


class SelfOnlyAttention(_Intervention):
    """Let the token at ``position`` attend only to itself in ``layers`` (default: all).

    Row k of the additive mask becomes -inf everywhere except column k, so A_{k,j} = 1[j = k]: token k then
    aggregates values like a first token does (o_k = v_k), which the structural-origin paper shows is enough to make
    it a sink. Other rows are untouched (later queries may still attend to k).
    """

    def __init__(self, model: nn.Module, position: int, layers: Sequence[int] | None = None):
        super().__init__(model, layers)
        if position < 0:
            raise ValueError("position must be >= 0")
        self.position = position

    def _install(self) -> None:
        self._use_attention_function()

    def _attention(self, module, query, key, value, attention_mask, **kwargs):
        k = self.position
        if module.layer_idx in self.layers and k < query.shape[2]:
            # mask: (B, 1, T_q, T_k) additive float (eager_mask); its rows are aligned with the last T_q keys
            mask = attention_mask.clone()
            row = k + (key.shape[2] - query.shape[2])  # key index of query k when a cache precedes the queries
            mask[:, :, k, :] = torch.finfo(mask.dtype).min
            mask[:, :, k, row] = 0.0
            attention_mask = mask
            self.calls += 1
        return self._delegate(module, query, key, value, attention_mask, **kwargs)


class HeadOutputAmplification(_Intervention):
    """Amplify the variance of token k's head outputs (before W_O) in ``layers``.

    ``mode="centered"`` (the intervention): o'_k = mu + lambda (o_k - mu), where mu is the mean head output over the
    batch and all positions of the same forward, per head and channel (the paper leaves mu open; this choice keeps
    the mean of the layer's outputs and scales token k's deviation from it).
    ``mode="scale"`` (the control): o'_k = lambda o_k.
    """

    def __init__(self, model: nn.Module, position: int, lam: float, layers: Sequence[int],
                 mode: str = "centered"):
        super().__init__(model, layers)
        if mode not in ("centered", "scale"):
            raise ValueError("mode must be 'centered' or 'scale'")
        self.position, self.lam, self.mode = position, float(lam), mode

    def _install(self) -> None:
        for p in self.parts:
            if p.index in self.layers:
                self._handles.append(p.o_proj.register_forward_pre_hook(self._edit))

    def _edit(self, module, args):
        x = args[0].clone()  # (B, T, H * head_dim); per-channel mean equals per-head mean here
        k = self.position
        if k >= x.shape[1]:
            return None
        if self.mode == "centered":
            mu = x.mean(dim=(0, 1))  # (H * head_dim,)
            x[:, k] = mu + self.lam * (x[:, k] - mu)
        else:
            x[:, k] = self.lam * x[:, k]
        self.calls += 1
        return (x, *args[1:])


class ResidualOverride(_Intervention):
    """Overwrite residual-stream entries h^l[:, t, j] after the blocks in ``layers``.

    ``dims``: feature dimensions; ``positions``: token positions (None: every position where |h_j| exceeds
    ``min_abs``, i.e. wherever the massive activation actually is); ``values``: a float (e.g. 0.0) or a tensor
    (len(layers), len(dims)) of replacement values, e.g. each layer's mean massive value over many inputs.
    """

    def __init__(self, model: nn.Module, layers: Sequence[int], dims: Sequence[int],
                 values: float | torch.Tensor = 0.0, positions: Sequence[int] | None = None,
                 min_abs: float = 100.0):
        super().__init__(model, layers)
        self.order = sorted(self.layers)
        self.dims = list(dims)
        vals = torch.as_tensor(values, dtype=torch.float32)
        self.values = vals.expand(len(self.order), len(self.dims)).clone() if vals.ndim < 2 else vals
        if self.values.shape != (len(self.order), len(self.dims)):
            raise ValueError(f"values must be a float or shaped ({len(self.order)}, {len(self.dims)})")
        self.positions = None if positions is None else list(positions)
        self.min_abs = min_abs

    def _install(self) -> None:
        for row, layer in enumerate(self.order):
            self._handles.append(self.parts[layer].block.register_forward_hook(
                lambda mod, args, out, row=row: self._edit(out, row)))

    def _edit(self, output, row: int):
        h = output[0] if isinstance(output, tuple) else output
        h = h.clone()  # (B, T, d)
        for j, dim in enumerate(self.dims):
            col = h[..., dim]  # (B, T)
            where = col.abs() > self.min_abs
            if self.positions is not None:
                where = torch.zeros_like(where)
                where[:, [p for p in self.positions if p < h.shape[1]]] = True
            col[where] = float(self.values[row, j])  # a Python scalar: works on any device and dtype
        self.calls += 1
        return (h, *output[1:]) if isinstance(output, tuple) else h


class AttentionCalibration(_Intervention):
    """ACT (Yu et al., arXiv 2406.15765) in the heads ``heads`` = {layer: [head, ...]}.

    In those heads, a key j >= 1 whose column mean (1/T) sum_t A[t, j] exceeds ``threshold`` is a non-first sink; its
    attention is scaled by ``beta`` and every row is renormalised, which hands the removed mass back to the other
    keys in proportion to their attention: A'[t, j] = A[t, j] c_j / sum_j' A[t, j'] c_j', c_j = beta for sinks, else
    1. The first token is left alone. Since softmax(l + log c) is exactly that, the edit is a per-head additive mask
    (log beta on the sink columns) handed to the model's own attention backend -- so a surrounding Capture sees the
    calibrated attention.
    """

    def __init__(self, model: nn.Module, heads: dict[int, list[int]], beta: float = 0.4, threshold: float = 0.1):
        super().__init__(model, list(heads))
        if not 0 < beta <= 1:
            raise ValueError("beta must be in (0, 1]")
        self.heads = {int(k): list(v) for k, v in heads.items()}
        self.beta, self.threshold = float(beta), float(threshold)
        self.damped = 0  # number of (sequence, head, key) sinks damped, summed over calls

    def _install(self) -> None:
        self._use_attention_function()

    def _attention(self, module, query, key, value, attention_mask, **kwargs):
        layer = module.layer_idx
        if layer in self.heads and query.shape[2] > 1:
            _, weights = eager_for(module)(module, query, key, value, attention_mask, **kwargs)
            col_mean = weights.float().mean(dim=2)  # (B, H, N)
            chosen = torch.zeros(col_mean.shape[1], dtype=torch.bool, device=col_mean.device)
            chosen[self.heads[layer]] = True
            sink = (col_mean > self.threshold) & chosen[None, :, None]
            sink[..., 0] = False
            self.damped += int(sink.sum())
            bias = torch.where(sink, torch.log(torch.tensor(self.beta)), 0.0)[:, :, None, :]  # (B, H, 1, N)
            attention_mask = attention_mask + bias.to(attention_mask.dtype)  # (B, H, T, N) additive
            self.calls += 1
        return self._delegate(module, query, key, value, attention_mask, **kwargs)
