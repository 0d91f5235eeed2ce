"""The base of every intervention: a :class:`~sinklib.core.attention_switch.Patch` that knows which layers it edits and how to
reach their attention, on transformers (an attention function in the registry, handed a 4D additive mask it may
edit) and on timm (the probabilities that pass through ``attn_drop``).

The interventions themselves live with the research that uses them: :mod:`sinklib.interpretation.interventions`
(02: self-only attention, head-output amplification, residual overrides), ACT's calibration in
:mod:`sinklib.utilization.calibration` (01), the visual-attention edits of 12_mllm and the test-time registers of
13_vit (:mod:`sinklib.architectures`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sinklib.core.adapters import model_and_adapter
from sinklib.core.attention_switch import AttentionSwitch, Patch, TimmEagerAttention


class Intervention(Patch):
    """Shared bookkeeping: the layers to edit; hooks and the attention switch are undone by :class:`Patch`."""

    def __init__(self, model, layers: Sequence[int] | None = None):  # model: nn.Module, or a LoadedModel
        super().__init__()
        self.model, self.adapter = model_and_adapter(model)
        self.parts = self.adapter.layers
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
        """Route attention through :meth:`_attention`, which receives a 4D additive mask it may edit (transformers),
        or hand the probabilities of the chosen layers to :meth:`_edit_probabilities` (timm)."""
        if self.adapter.backend == "timm":
            self._switches.append(TimmEagerAttention([self.parts[i].attn for i in self.layers]).__enter__())
            for i in sorted(self.layers):
                self._handles.append(self.parts[i].attn.attn_drop.register_forward_hook(  # before a Capture's hook
                    lambda m, a, probs, i=i: self._edit_probabilities(i, probs), prepend=True))
            return
        self._switch = AttentionSwitch(self.model, "sinklib_intervention", self._attention).__enter__()

    def _edit_probabilities(self, layer: int, probs: torch.Tensor) -> torch.Tensor:  # timm; (B, H, T, N)
        raise NotImplementedError

    def _mask(self, module, query, key, attention_mask) -> torch.Tensor:
        """The additive mask (B|1, 1, T, N) the layer would use; built when the backend passes None (a
        bidirectional encoder: all zeros)."""
        if attention_mask is not None:
            return attention_mask
        if getattr(module, "is_causal", True):
            raise RuntimeError("a causal layer got no mask; interventions ask for the eager mask, so this is a bug")
        return torch.zeros(1, 1, query.shape[2], key.shape[2], dtype=query.dtype, device=query.device)
