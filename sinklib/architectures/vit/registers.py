"""Test-time registers (Jiang et al., "Vision Transformers Don't Need Trained Registers", arXiv 2506.08010; the
authors' code nickjiang2378/test-time-registers).

1. **Register neurons** (``shared/algorithms.py: find_register_neurons``): over a set of images, find the outlier
   positions at a detection layer (token norm above a cut), and score every MLP neuron (the post-activation input
   of the MLP's output projection) of every layer by its mean |activation| at those positions; the top-scoring
   (layer, neuron) pairs are the register neurons.
2. **Test-time register** (``dinov2/modifiedDINO.py``): append extra tokens after the image tokens, initialised to the
   mean of the image's patch tokens (the authors' README); in every
   forward, in those neurons, write the maximum activation over all tokens into the extra tokens and zero the
   activation everywhere else. The outliers then form on the extra tokens, which act as registers, and the
   attention maps lose their artefacts.

:class:`TestTimeRegisters` does step 2 with forward hooks (transformers DINOv2 / ViT / CLIP vision and timm ViTs);
the output then has ``n_registers`` more tokens at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from sinklib.architectures.vit.vit_sinks import OUTLIER_FACTOR, outlier_mask, vit_forward
from sinklib.core.capture import Capture
from sinklib.core.claims import Claim
from sinklib.core.intervention import Intervention
from sinklib.core.loaded import LoadedModel


def _token_entry(model: nn.Module) -> nn.Module:
    """The module whose output is the token sequence that enters the first block."""
    for path in ("embeddings", "vision_model.embeddings", "norm_pre"):
        module = model
        for part in path.split("."):
            module = getattr(module, part, None)
        if isinstance(module, nn.Module):
            return module
    raise ValueError(f"{type(model).__name__}: no embeddings / norm_pre module to append register tokens to")


def outlier_positions(profile, layer: int) -> tuple[torch.Tensor, bool]:
    """Where to look for register neurons: (B, T) bool of the patch tokens that are outliers at ``layer``
    (:func:`~sinklib.architectures.vit.vit_sinks.outlier_mask`) and False -- or, in a model with none, each image's
    highest-norm patch and True (a stand-in, which the caller must say)."""
    pn = profile.patch_norms()[layer]  # (B, P)
    outliers = outlier_mask(pn)
    positions = torch.zeros(pn.shape[0], profile.n_tokens, dtype=torch.bool)
    if not outliers.any():
        positions[torch.arange(pn.shape[0]), profile.n_prefix + pn.argmax(-1)] = True
        return positions, True
    positions[:, profile.n_prefix:profile.n_prefix + pn.shape[-1]] = outliers
    return positions, False


def register_scores(acts: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One layer's neuron scores (Jiang et al.'s Algorithm 1, ``find_register_neurons``): for each image b that has
    outlier positions, s_b[n] = mean over those positions t of |a_{b, t, n}|; the score is the mean of s_b over those
    images. acts: (B, T, F) MLP activations; positions: (B, T) bool -> (F,); zeros when no image has a position."""
    has = positions.any(dim=-1)  # (B,)
    if not has.any():
        return acts.new_zeros(acts.shape[-1])
    where = positions[has].to(acts.dtype)  # (B', T)
    per_image = (acts[has].abs() * where[..., None]).sum(dim=1) / where.sum(dim=1, keepdim=True)  # (B', F)
    return per_image.mean(dim=0)


@torch.inference_mode()
def register_neurons(lm: LoadedModel, pixels: torch.Tensor, positions: torch.Tensor, top: int = 10,
                     batch_size: int = 8) -> list[tuple[int, int, float]]:
    """Jiang et al.'s register neurons: :func:`register_scores` of every layer over all images (a = MLP activation,
    the input of the output projection); return the ``top`` (layer, neuron, score) by score over all layers.

    pixels: (B, 3, S, S); positions: (B, T) bool, the outlier token positions of each image (from the detection
    layer's norms; :func:`sinklib.architectures.vit.vit_sinks.outlier_mask`).
    """
    total, images = None, 0
    for start in range(0, len(pixels), batch_size):
        where = positions[start:start + batch_size]
        n = int(where.any(dim=-1).sum())  # images of this batch that count
        if n == 0:
            continue
        with Capture(lm.model, mlp_activations=True) as cap:
            vit_forward(lm, pixels[start:start + batch_size])
        acts = cap.stack("mlp_activations").float()  # (L, B, T, d_ff)
        score = torch.stack([register_scores(a, where) for a in acts]) * n  # (L, d_ff), weighted by images
        total = score if total is None else total + score
        images += n
    if images == 0:
        raise ValueError("no image has an outlier position; lower the cut or pass more images")
    return top_neurons(total / images, top)


def top_neurons(scores: torch.Tensor, top: int) -> list[tuple[int, int, float]]:
    """The ``top`` (layer, neuron, score) of a (L, F) score table, largest first, over all layers."""
    values, flat = scores.flatten().topk(top)
    width = scores.shape[1]
    return [(int(i) // width, int(i) % width, float(v)) for v, i in zip(values, flat)]


def move_to_registers(acts: torch.Tensor, neurons: Sequence[int], n_registers: int) -> torch.Tensor:
    """The test-time register edit of one MLP (the authors' ``DinoVisionTransformerWithIntervention``): in the given
    neurons, every register token (the last ``n_registers``) gets the neuron's maximum over all tokens, every other
    token 0; other neurons unchanged. acts: (B, T + n_registers, F) -> a new tensor of the same shape."""
    a = acts.clone()
    peak = a[:, :, neurons].amax(dim=1, keepdim=True)  # (B, 1, k)
    a[:, :, neurons] = 0
    a[:, -n_registers:, neurons] = peak.expand(-1, n_registers, -1)
    return a


class TestTimeRegisters(Intervention):
    """Append ``n_registers`` tokens (each the mean of the image's patch tokens) after the image tokens and move the
    register neurons' activation onto them.

    ``neurons``: {layer: [neuron, ...]}. In those layers' MLPs, activation a_{t, n} becomes max_t' a_{t', n} at the
    extra tokens and 0 at every other token (the authors' ``DinoVisionTransformerWithIntervention``). Outputs get
    ``n_registers`` extra tokens at the end. ``move``: the edit, :func:`move_to_registers` unless another function
    with its signature is given (the exercises pass the student's).
    """

    __test__ = False  # not a pytest class

    def __init__(self, model: nn.Module, neurons: dict[int, Sequence[int]], n_registers: int = 1,
                 move: Callable[[torch.Tensor, Sequence[int], int], torch.Tensor] | None = None):
        super().__init__(model, list(neurons))
        if n_registers < 1:
            raise ValueError("n_registers must be >= 1")
        self.neurons = {int(k): list(v) for k, v in neurons.items()}
        self.n_registers = n_registers
        self.move = move_to_registers if move is None else move

    def _install(self) -> None:
        self._handles.append(_token_entry(self.model).register_forward_hook(self._append))
        for layer, neurons in self.neurons.items():
            proj = self.parts[layer].down_proj
            if proj is None:
                raise ValueError(f"layer {layer} has no MLP output projection to hook")
            self._handles.append(proj.register_forward_pre_hook(
                lambda m, args, neurons=neurons: self._move(args, neurons)))

    def _append(self, module, args, output):
        h = output[0] if isinstance(output, tuple) else output  # (B, T, d)
        extra = h[:, self.adapter.n_prefix:].mean(dim=1, keepdim=True).expand(-1, self.n_registers, -1)
        h = torch.cat([h, extra], dim=1)
        return (h, *output[1:]) if isinstance(output, tuple) else h

    def _move(self, args, neurons: list[int]):
        self.calls += 1
        return (self.move(args[0], neurons, self.n_registers), *args[1:])  # (B, T + n, d_ff)


def neurons_by_layer(found: list[tuple[int, int, float]]) -> dict[int, list[int]]:
    """[(layer, neuron, score), ...] -> {layer: [neuron, ...]} for :class:`TestTimeRegisters`."""
    out: dict[int, list[int]] = {}
    for layer, neuron, _ in found:
        out.setdefault(layer, []).append(neuron)
    return out


def test_time_register_claim(before, after, stand_in: bool) -> Claim:
    """Jiang et al. (arXiv 2506.08010, Fig. 1 and Sec. 4): with a test-time register the high-norm outliers leave the
    image patches and sit on the extra token. Rule: where the model has outliers, it holds when no patch of the last
    layer passes the outlier cut afterwards and the register's norm does; without outliers (``stand_in``) it cannot
    be judged and the record carries the measured norms. before / after: :class:`VitProfile` (after has the extra
    token at the end)."""
    factor = OUTLIER_FACTOR
    ratio_before = max(before.max_norm_ratio()[-2:])
    ratio_after = max(after.max_norm_ratio()[-2:])
    median = after.patch_norms()[-1].median(dim=-1).values  # (B,)
    register = (after.norms[-1, :, -1] / median).mean().item()
    holds = None if stand_in else (ratio_after < factor and register > factor)
    return Claim(
        id="jiang2025.test_time_register_takes_outliers",
        source="Jiang et al., Vision Transformers Don't Need Trained Registers, arXiv 2506.08010, Fig. 1",
        statement="moving the register neurons' activation onto an extra token moves the high-norm outliers there",
        rule=f"outliers exist; afterwards no patch in the last two layers exceeds {factor:g} x the median patch norm "
             f"and the register token does",
        published="outliers move to the test-time register; attention maps lose their artefacts",
        measured={"max/median patch norm before": ratio_before, "after": ratio_after,
                  "register norm / median patch norm": register},
        holds=holds,
        note="no outliers in this model: the register neurons were found at each image's highest-norm patch"
        if stand_in else "", needs_gpu=stand_in,
        follows="Sec. 3-4, Algorithm 1 and Fig. 1; nickjiang2378/test-time-registers:shared/algorithms.py:"
                "find_register_neurons and dinov2/modifiedDINO.py (the intervention)",
        adapted=f"outlier positions by the relative cut (norm > {factor:g} x the image's median patch norm) instead "
                f"of the authors' absolute register_norm_threshold (default 30) at the detection layer; judged on the last "
                f"two layers' norms, not on attention maps; without outliers each image's highest-norm patch stands "
                f"in and the claim is not judged",
        at_init=False)
