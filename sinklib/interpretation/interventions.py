"""Interventions: small context managers that change one thing in a forward pass and restore the model on exit.

* :class:`SelfOnlyAttention` -- attention-mask edit: the token at position k attends only to itself
  (arXiv 2605.06611, intervention i);
* :class:`MaskEdit` -- any edit of the (T, T) additive mask, e.g. a student's own self-only edit (the exercises);
* :class:`HeadOutputAmplification` -- o'_k = mu + lambda (o_k - mu) on the head outputs of token k before W_O
  (intervention ii), or the control o'_k = lambda o_k;
* :class:`ResidualOverride` -- set chosen residual-stream entries (massive activations) to zero or to a given value
  (Sun et al., arXiv 2402.17762);
All share the base :class:`sinklib.core.intervention.Intervention` (as do ACT's
:class:`~sinklib.utilization.calibration.AttentionCalibration` and the edits of 12_mllm and 13_vit).

Blocks come from the model's architecture adapter, so they work on decoders, MoE decoders, ViTs (transformers and
timm: the two attention edits then act on the probabilities timm passes through ``attn_drop``, which softmax with
the edited mask would give exactly) and an MLLM's language tower.
They compose with :class:`sinklib.core.capture.Capture` when entered inside it:
``with Capture(model, attentions=True) as cap, SelfOnlyAttention(model, 10): model(ids)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from sinklib.core import metrics
from sinklib.core.intervention import Intervention


class SelfOnlyAttention(Intervention):
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
        if self.adapter.index_of(module) in self.layers and k < query.shape[2]:
            # mask: (B, 1, T_q, T_k) additive float (eager_mask); its rows are aligned with the last T_q keys
            mask = self._mask(module, query, key, attention_mask).clone()
            row = k + (key.shape[2] - query.shape[2])  # key index of query k when a cache precedes the queries
            mask[:, :, k, :] = torch.finfo(mask.dtype).min
            mask[:, :, k, row] = 0.0
            attention_mask = mask
            self.calls += 1
        return self._delegate(module, query, key, value, attention_mask, **kwargs)

    def _edit_probabilities(self, layer: int, probs: torch.Tensor) -> torch.Tensor:
        k = self.position
        if k >= probs.shape[2]:
            return probs
        probs = probs.clone()  # (B, H, T, N): row k becomes one-hot at key k, as softmax under the edited mask
        probs[:, :, k, :] = 0.0
        probs[:, :, k, k] = 1.0
        self.calls += 1
        return probs


class MaskEdit(Intervention):
    """Run the model with ``edit(mask) -> mask`` applied to every sequence's additive attention mask in ``layers``
    (default: all) of a transformers model.

    ``edit`` gets a copy of one (T, T) mask -- 0 where query t may see key j, a large negative number where not --
    and returns the edited (T, T) mask; ``MaskEdit(model, lambda m: self_only(m, k))`` is :class:`SelfOnlyAttention`
    written by hand. Square masks only: run without a KV cache (``use_cache=False``), so that row t is query t.
    """

    def __init__(self, model: nn.Module, edit, layers: Sequence[int] | None = None):
        super().__init__(model, layers)
        if self.adapter.backend == "timm":
            raise TypeError("MaskEdit edits transformers' attention mask; timm ViTs have none (use SelfOnlyAttention)")
        self.edit = edit

    def _install(self) -> None:
        self._use_attention_function()

    def _attention(self, module, query, key, value, attention_mask, **kwargs):
        if self.adapter.index_of(module) in self.layers:
            mask = self._mask(module, query, key, attention_mask)  # (B|1, 1, T, N) additive
            if mask.shape[-2] != mask.shape[-1]:
                raise ValueError(f"MaskEdit needs a square mask, got {tuple(mask.shape[-2:])}: run the model with "
                                 "use_cache=False and no past_key_values")
            edited = [self.edit(mask[b, 0].clone()) for b in range(mask.shape[0])]  # each (T, T)
            attention_mask = torch.stack(edited)[:, None].to(mask.dtype)
            self.calls += 1
        return self._delegate(module, query, key, value, attention_mask, **kwargs)


class HeadOutputAmplification(Intervention):
    """Amplify the variance of token k's head outputs (before W_O) in ``layers``.

    ``mode="centered"`` (the intervention): o'_{n,k} = mu_k + lambda (o_{n,k} - mu_k), with mu_k the mean over the
    batch of token k's own head outputs, per head and channel (``mu="position"``, default): token k's mean across
    inputs stays where it was and only its variance across inputs is multiplied by lambda^2 -- the quantity the
    variance-discrepancy link is about. ``mu="pooled"`` uses the mean over the batch *and all positions* instead
    (the paper's "mean over positions/batch" read the other way), which also moves token k's mean toward the
    layer's mean. ``mode="scale"`` (the control): o'_k = lambda o_k.

    ``start``: the position of the forward's first token, > 0 when a KV cache holds the earlier ones (token k is
    then column k - start of the forward; ``mu="pooled"`` needs every position in the forward, so start = 0).
    """

    def __init__(self, model: nn.Module, position: int, lam: float, layers: Sequence[int],
                 mode: str = "centered", mu: str = "position", start: int = 0):
        super().__init__(model, layers)
        if mode not in ("centered", "scale"):
            raise ValueError("mode must be 'centered' or 'scale'")
        if mu not in ("position", "pooled"):
            raise ValueError("mu must be 'position' (batch mean of token k) or 'pooled' (batch and positions)")
        if not 0 <= start <= position or (start and mu == "pooled"):
            raise ValueError("start must lie in 0..position (and be 0 with mu='pooled')")
        self.position, self.lam, self.mode, self.mu, self.start = position, float(lam), mode, mu, start

    def _install(self) -> None:
        for p in self.parts:
            if p.index in self.layers:
                self._handles.append(p.o_proj.register_forward_pre_hook(self._edit))

    def _edit(self, module, args):
        x = args[0].clone()  # (B, T, H * head_dim); per-channel mean equals per-head mean here
        k = self.position - self.start  # token k's column in this forward
        if k >= x.shape[1]:
            return None
        if self.mode == "centered":
            mu = x[:, k].mean(dim=0) if self.mu == "position" else x.mean(dim=(0, 1))  # (H * head_dim,)
            x[:, k] = mu + self.lam * (x[:, k] - mu)
        else:
            x[:, k] = self.lam * x[:, k]
        self.calls += 1
        return (x, *args[1:])


class ResidualOverride(Intervention):
    """Overwrite residual-stream entries h^l[:, t, j] after the blocks in ``layers`` (Sun et al.'s intervention).

    ``dims``: feature dimensions. ``positions``: fixed token positions, or None (default) to locate the massive
    activations in every forward by Sun et al.'s criterion over *all* positions -- |h_j| > ``min_abs`` and
    |h_j| > ``min_ratio`` x the median |h| of the sequence's layer output (:func:`sinklib.core.metrics.massive_mask`,
    the authors' median) -- which finds
    the first token's and the first delimiter's alike (Sun et al. set both; locuslab/massive-activations
    ``lib/hook.py``). ``values``: a float (e.g. 0.0) or a tensor (len(layers), len(dims)) written at position 0;
    ``other_values``: the same for positions >= 1 (default: ``values``), e.g. the delimiters' own mean, as Sun et
    al. use one mean for the start token and another for the delimiter.
    """

    def __init__(self, model: nn.Module, layers: Sequence[int], dims: Sequence[int],
                 values: float | torch.Tensor = 0.0, positions: Sequence[int] | None = None,
                 min_abs: float = metrics.SUN_MIN_ABS, min_ratio: float = metrics.SUN_MIN_RATIO,
                 other_values: float | torch.Tensor | None = None):
        super().__init__(model, layers)
        self.order = sorted(self.layers)
        self.dims = list(dims)
        self.values = self._table(values)
        self.other_values = self.values if other_values is None else self._table(other_values)
        self.positions = None if positions is None else list(positions)
        self.min_abs, self.min_ratio = min_abs, min_ratio
        self.edited = 0  # number of entries overwritten, summed over calls

    def _table(self, values: float | torch.Tensor) -> torch.Tensor:
        vals = torch.as_tensor(values, dtype=torch.float32)
        table = vals.expand(len(self.order), len(self.dims)).clone() if vals.ndim < 2 else vals
        if table.shape != (len(self.order), len(self.dims)):
            raise ValueError(f"values must be a float or shaped ({len(self.order)}, {len(self.dims)})")
        return table

    def _install(self) -> None:
        for row, layer in enumerate(self.order):
            self._handles.append(self.parts[layer].block.register_forward_hook(
                lambda mod, args, out, row=row: self._edit(out, row)))

    def _where(self, h: torch.Tensor) -> torch.Tensor:
        """Boolean (B, T, len(dims)): the entries to overwrite."""
        if self.positions is None:
            return metrics.massive_mask(h, self.min_abs, self.min_ratio)[..., self.dims]
        where = torch.zeros(*h.shape[:2], len(self.dims), dtype=torch.bool, device=h.device)
        where[:, [p for p in self.positions if p < h.shape[1]]] = True
        return where

    def _edit(self, output, row: int):
        h = output[0] if isinstance(output, tuple) else output
        where = self._where(h)  # decided on the unedited state
        h = h.clone()  # (B, T, d)
        for j, dim in enumerate(self.dims):
            col = h[..., dim]  # (B, T)
            first, rest = where[:, :1, j], where[:, 1:, j]
            col[:, :1][first] = float(self.values[row, j])  # Python scalars: any device and dtype
            col[:, 1:][rest] = float(self.other_values[row, j])
            self.edited += int(first.sum() + rest.sum())
        self.calls += 1
        return (h, *output[1:]) if isinstance(output, tuple) else h
