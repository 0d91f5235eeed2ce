"""Registers as fixed biases (Sun et al., "Massive Activations in Large Language Models", arXiv 2402.17762, Sec. 5;
the authors' ``lib/eval_utils.py: fix_reg_mean`` in locuslab/massive-activations).

Sun et al. replace the register tokens of DINOv2-reg at the *input of every block* with one fixed vector per layer
and register -- their mean over many images -- and find ImageNet accuracy unchanged (ViT-S 81.9 -> 81.7, B 84.8 ->
85.0, L 86.3 -> 86.2, G 87.0 -> 87.0): what the registers carry is a fixed bias, not image information.

:func:`register_input_means` measures the means, :class:`FixedRegisterMean` is the edit (one small intervention, a
forward pre-hook per block), :func:`probe_transfer` scores it as the authors do -- a classifier trained on the
unedited model's features, evaluated on held-out images with and without the edit -- and
:func:`fixed_bias_claim` judges it.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import nn

from sinklib.architectures.vit.darcet_claims import PROBE_WHY, fraction_of_items, item_step
from sinklib.architectures.vit.vit_massive_claims import SUN
from sinklib.architectures.vit.vit_sinks import vit_forward
from sinklib.core import quantities as q
from sinklib.core.adapters import adapter_for
from sinklib.core.capture import Capture
from sinklib.core.claims import Claim
from sinklib.core.intervention import Intervention
from sinklib.core.loaded import LoadedModel

SUN_FIXED_MEAN = {"S": (81.9, 81.7), "B": (84.8, 85.0), "L": (86.3, 86.2), "G": (87.0, 87.0)}  # README table
FIXED_BIAS_MARGIN = 0.02  # accuracy may move by at most 2 points (Sun et al.: at most 0.2)


def n_registers(model: nn.Module) -> int:
    """Register tokens of a ViT: its prefix tokens (``Adapter.n_prefix``) minus CLS."""
    return max(adapter_for(model).n_prefix - 1, 0)


@torch.inference_mode()
def register_input_means(lm: LoadedModel, pixels: torch.Tensor, batch_size: int = 8) -> torch.Tensor:
    """The mean over images of each block's *input* at the register positions 1..R (Sun et al.'s per-layer,
    per-register mean). (B, 3, S, S) -> (L, R, d)."""
    r = n_registers(lm.model)
    if r == 0:
        raise ValueError(f"{lm.name}: no register tokens (a DINOv2-with-registers model has 4)")
    parts = lm.adapter.layers
    total, count = None, 0
    for start in range(0, len(pixels), batch_size):
        seen: dict[int, torch.Tensor] = {}
        handles = [p.block.register_forward_pre_hook(
            lambda m, args, kwargs, i=i, seen=seen: seen.__setitem__(
                i, (args[0] if args else kwargs["hidden_states"])[:, 1:1 + r].float().sum(0).cpu()), with_kwargs=True)
            for i, p in enumerate(parts)]
        try:
            vit_forward(lm, pixels[start:start + batch_size])
        finally:
            for h in handles:
                h.remove()
        batch = torch.stack([seen[i] for i in range(len(parts))])  # (L, R, d)
        total = batch if total is None else total + batch
        count += len(pixels[start:start + batch_size])
    return total / count


class FixedRegisterMean(Intervention):
    """Sun et al.'s ``fix_reg_mean``: at the input of every block l, the register tokens 1..R are overwritten with
    ``means[l]`` (the same vector for every image). means: (L, R, d) from :func:`register_input_means`."""

    def __init__(self, model: nn.Module, means: torch.Tensor):
        super().__init__(model)
        if means.shape[:2] != (len(self.parts), n_registers(model)):
            raise ValueError(f"means must be (layers={len(self.parts)}, registers={n_registers(model)}, d), "
                             f"not {tuple(means.shape)}")
        self.means = means

    def _install(self) -> None:
        for i, part in enumerate(self.parts):
            self._handles.append(part.block.register_forward_pre_hook(
                lambda m, args, kwargs, i=i: self._fix(i, args, kwargs), with_kwargs=True))

    def _fix(self, layer: int, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]  # (B, T, d)
        h = h.clone()
        h[:, 1:1 + self.means.shape[1]] = self.means[layer].to(h.device, h.dtype)
        self.calls += 1
        if args:
            return (h, *args[1:]), kwargs
        return args, kwargs | {"hidden_states": h}


def final_norm(model: nn.Module) -> nn.Module:
    """The LayerNorm a DINOv2 (with or without registers) applies to the last block's output before its heads
    (transformers: ``model.layernorm``)."""
    norm = getattr(model, "layernorm", None)
    if not isinstance(norm, nn.Module):
        raise ValueError(f"{type(model).__name__} has no final `layernorm`: head_features reads DINOv2's "
                         f"(Dinov2Model / Dinov2WithRegistersModel)")
    return norm


@torch.inference_mode()
def head_features(lm: LoadedModel, pixels: torch.Tensor, batch_size: int = 8, extra=None) -> torch.Tensor:
    """What DINOv2's linear heads read: [CLS, mean of the patch tokens] of the last block's output *after the final
    LayerNorm* (DINOv2's ``x_norm_clstoken`` / ``x_norm_patchtokens``; registers excluded), as the authors'
    ``setup_dinov2_model_for_eval``, optionally under an edit. (B, 3, S, S) -> (B, 2d)."""
    n_prefix = lm.adapter.n_prefix
    last = len(lm.adapter.layers) - 1
    norm = final_norm(lm.model)
    out = []
    for start in range(0, len(pixels), batch_size):
        with Capture(lm, hidden_states=True, layers=[last]) as cap:
            with extra if extra is not None else contextlib.nullcontext():
                vit_forward(lm, pixels[start:start + batch_size])
        last_out = cap.get("hidden_states", last).to(norm.weight.device)  # the capture keeps it on the CPU
        h = norm(last_out).float()  # (B, T, d), as the heads see it
        out.append(torch.cat([h[:, 0], h[:, n_prefix:].mean(1)], dim=-1).cpu())
    return torch.cat(out)


def probe_transfer(train: torch.Tensor, train_labels: np.ndarray, tests: dict[str, torch.Tensor],
                   test_labels: np.ndarray) -> dict[str, float]:
    """A logistic-regression probe trained once on ``train`` (the unedited model's features), scored on each test
    set (the same held-out images as is and edited): the authors' protocol with the official linear heads."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=0.1))
    probe.fit(train.numpy(), train_labels)
    return {name: float(probe.score(x.numpy(), test_labels)) for name, x in tests.items()}


def fixed_bias_claim(accuracy: dict[str, float] | None, model: str = "") -> Claim:
    """``sun2024.registers_are_fixed_biases`` (Sec. 5, the README's Fix-Reg-Mean table): fixing the registers to
    their mean keeps the accuracy. accuracy: {"as is": .., "fixed register mean": ..} from :func:`probe_transfer`;
    None when no model with registers ran (not judged). Rule: |as is - fixed| <= :data:`FIXED_BIAS_MARGIN`."""
    if accuracy is None:
        measured, holds, note = {}, None, "no model with registers in this profile (the GPU profile has DINOv2-reg L/g)"
    else:
        drop = accuracy["as is"] - accuracy["fixed register mean"]
        measured = accuracy | {"drop": drop, "model": model}
        holds, note = abs(drop) <= FIXED_BIAS_MARGIN, ""
    step = item_step((accuracy or {}).values())  # one held-out digit
    quantities = {**{name: fraction_of_items(step, PROBE_WHY, "accuracy") for name in accuracy or {}},
                  "drop": fraction_of_items(step, PROBE_WHY, "accuracy difference", kind=q.Kind.VALUE)}
    return Claim(
        id="sun2024.registers_are_fixed_biases", source=f"{SUN}, Sec. 5",
        statement="the registers of a ViT trained with them act as fixed biases: replacing them with their mean at "
                  "every layer keeps the accuracy",
        rule=f"the held-out accuracy of a probe trained on the unedited features moves by at most "
             f"{FIXED_BIAS_MARGIN:.0%} when every block's register inputs are set to their mean",
        published={"DINOv2-reg ImageNet top-1, original -> fix-reg-mean": SUN_FIXED_MEAN},
        measured=measured, holds=holds, note=note, needs_gpu=accuracy is None,
        follows="Sec. 5; locuslab/massive-activations:lib/eval_utils.py:fix_reg_mean (register tokens 1-4 of every "
                "block's input set to a per-layer mean) and test_imagenet (official linear heads on [CLS, mean patch])",
        adapted="a logistic-regression probe of scikit-learn's digits trained on the unedited features instead of "
                "the official ImageNet heads; the means over the probe's training images instead of 10k augmented "
                "ImageNet training images; the 2-point margin is this project's",
        at_init=False, quantities=quantities)
