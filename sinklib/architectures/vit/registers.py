"""Test-time registers (Jiang et al., "Vision Transformers Don't Need Trained Registers", arXiv 2506.08010; the
authors' code nickjiang2378/test-time-registers, read at 860df43).

1. **Register neurons** (``shared/algorithms.py: find_register_neurons`` driven by ``register_neurons.ipynb``): over a
   set of images, the outlier positions are the tokens (CLS included) whose block output at
   ``detect_outliers_layer`` has an L2 norm above the absolute ``register_norm_threshold``; every MLP neuron (the
   post-GELU activation, the input of the output projection) of every layer is scored by its mean |activation| at
   those positions, times a per-image sparsity mask (at least half the tokens below 0.5); scores are averaged over
   the images that have outliers, ranked over all layers, cut to layers <= ``highest_layer`` and the first ``top_k``
   kept (:class:`JiangConfig`, one per model as their ``configs/*.yaml``).
2. **Test-time register** (``shared/hook_fn.py: activate_on_registers``): append an all-zeros token after the image
   tokens (after the position embeddings; their ``vision_transformer.py``); in every forward, at each listed
   layer, write one signed maximum over all tokens and all of that layer's listed neurons (``sign_max``) into those
   neurons of the extra token and zero them on every other token but CLS (``output[0, 1:-num_registers,
   neuron_indices] = 0``). The outliers then form on the extra token, which acts as a register.

:class:`TestTimeRegisters` does step 2 with forward hooks (transformers DINOv2 / ViT / CLIP vision and timm ViTs),
per image (the authors' hook edits batch element 0 and was run at batch 1); the output then has ``n_registers``
more tokens at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from sinklib.architectures.vit.vit_sinks import OUTLIER_FACTOR, vit_forward
from sinklib.core import quantities as q
from sinklib.core.capture import Capture
from sinklib.core.claims import Claim
from sinklib.core.intervention import Intervention
from sinklib.core.loaded import LoadedModel


@dataclass(frozen=True)
class JiangConfig:
    """How register neurons are chosen for one model (the keys of the authors' ``configs/*.yaml``).

    ``detect_outliers_layer``: the block whose output norms mark the outliers (negative from the end);
    ``register_norm_threshold``: the absolute L2-norm cut there; ``highest_layer``: the last layer a neuron may come
    from (inclusive); ``top_k``: neurons kept; ``source``: the config file, or the adaptation for a model they did
    not configure."""

    detect_outliers_layer: int
    register_norm_threshold: float
    highest_layer: int
    top_k: int
    source: str
    apply_sparsity_filter: bool = True  # register_neurons.ipynb passes True
    sparsity_frac_threshold: float = 0.5
    sparsity_activation_threshold: float = 0.5


CONFIG_REPO = "nickjiang2378/test-time-registers"
JIANG_CONFIGS: dict[str, JiangConfig] = {  # hub id -> the authors' config, verbatim (the same weights they load)
    "facebook/dinov2-large": JiangConfig(-2, 150.0, 17, 50, f"{CONFIG_REPO}:configs/dinov2_large.yaml"),
    "openai/clip-vit-base-patch16": JiangConfig(-1, 30.0, 5, 10, f"{CONFIG_REPO}:configs/openai_clip_base.yaml"),
    "laion/CLIP-ViT-B-16-laion2B-s34B-b88K": JiangConfig(-1, 30.0, 5, 10,
                                                         f"{CONFIG_REPO}:configs/openclip_base.yaml"),
}
TWELVE_LAYER_TOP_K = 10  # both of the authors' 12-layer configs (CLIP / OpenCLIP ViT-B/16)


def adapted_config(profile, family: str = "dinov2") -> JiangConfig:
    """A :class:`JiangConfig` for a model the authors did not configure (e.g. DINOv2-S), following their rules:
    ``detect_outliers_layer`` -2 for DINOv2 (-1 for CLIP: their notebook's rule); the norm cut in the gap of that
    layer's token norms -- here :data:`~sinklib.architectures.vit.vit_sinks.OUTLIER_FACTOR` x the median patch norm,
    median over images, written down as an absolute number; ``highest_layer`` the first layer whose largest patch
    norm passes that factor ("start by setting it to the layer at which outliers appear", their notebook), else the
    proportional layer of their DINOv2-L config (17 of 23); ``top_k`` 10 for 12 layers (their ViT-B/16 configs), 50
    above. profile: a :class:`~sinklib.architectures.vit.vit_sinks.VitProfile` of the unedited model."""
    L = profile.norms.shape[0]
    detect = -1 if family == "clip" else -2
    pn = profile.patch_norms()[detect]  # (B, P)
    threshold = float(OUTLIER_FACTOR * pn.median(dim=-1).values.median())
    ratios = profile.max_norm_ratio()
    appear = next((layer for layer, r in enumerate(ratios) if r > OUTLIER_FACTOR), None)
    highest = appear if appear is not None else round(17 / 23 * (L - 1))
    top_k = TWELVE_LAYER_TOP_K if L <= 12 else 50
    how = (f"adapted (no config of theirs for this model): detect_outliers_layer {detect} ({family} rule), "
           f"register_norm_threshold {threshold:.1f} (= {OUTLIER_FACTOR:g} x the median patch norm there), "
           f"highest_layer {highest} (" + ("where outliers first appear" if appear is not None else
                                            "no outliers: their DINOv2-L layer 17 of 23, scaled") +
           f"), top_k {top_k}")
    return JiangConfig(detect, threshold, highest, top_k, how)


def calibration(profile, config: JiangConfig) -> dict:
    """This project's relative outlier cut set beside Jiang et al.'s absolute one, at their detection layer: the
    absolute cut as a multiple of the median patch norm (median over images), and the fraction of patch tokens past
    each cut. Where the two fractions agree on a model they configured, the relative cut finds their outliers.
    profile: a :class:`~sinklib.architectures.vit.vit_sinks.VitProfile` of the unedited model."""
    pn = profile.patch_norms()[config.detect_outliers_layer]  # (B, P)
    median = pn.median(dim=-1, keepdim=True).values  # (B, 1)
    cut = config.register_norm_threshold
    # its numbers' quantities: darcet_claims.outliers_only_claim, which records them under "calibration"
    return {"config": config.source, "layer": int(config.detect_outliers_layer), "absolute cut": cut,
            "absolute cut / median patch norm": float((cut / median).median()),
            "fraction over the absolute cut": float((pn > cut).float().mean()),
            f"fraction over {OUTLIER_FACTOR:g} x the median": float((pn > OUTLIER_FACTOR * median).float().mean())}


def config_for(name: str, profile) -> JiangConfig:
    """The authors' config for registry ``name`` where they shipped one, else :func:`adapted_config`."""
    if name in JIANG_CONFIGS:
        return JIANG_CONFIGS[name]
    return adapted_config(profile, "clip" if "clip" in name else "dinov2")


def _token_entry(model: nn.Module) -> nn.Module:
    """The module whose output is the token sequence that enters the first block."""
    for path in ("embeddings", "vision_model.embeddings", "norm_pre"):
        module = model
        for part in path.split("."):
            module = getattr(module, part, None)
        if isinstance(module, nn.Module):
            return module
    raise ValueError(f"{type(model).__name__}: no embeddings / norm_pre module to append register tokens to")


def jiang_outlier_positions(profile, config: JiangConfig) -> torch.Tensor:
    """The authors' outlier positions: (B, T) bool, every token (CLS included) whose norm after block
    ``detect_outliers_layer`` is above ``register_norm_threshold`` (absolute; images with none are skipped later).
    Tokens appended at the end (a test-time register) are not counted."""
    T = profile.n_prefix + profile.grid[0] * profile.grid[1]
    return profile.norms[config.detect_outliers_layer][:, :T] > config.register_norm_threshold


def positions_for(profile, config: JiangConfig) -> tuple[torch.Tensor, bool]:
    """(positions (B, T) bool, stand_in): :func:`jiang_outlier_positions`, or -- where no image has a token above the
    cut -- each image's highest-norm patch at the detection layer and True (a stand-in, which the caller must say)."""
    positions = jiang_outlier_positions(profile, config)
    if positions.any():
        return positions, False
    pn = profile.patch_norms()[config.detect_outliers_layer]  # (B, P)
    positions = torch.zeros_like(positions)
    positions[torch.arange(pn.shape[0]), profile.n_prefix + pn.argmax(-1)] = True
    return positions, True


def sparse_neurons(acts: torch.Tensor, frac: float = 0.5, below: float = 0.5) -> torch.Tensor:
    """The authors' sparsity filter, per image: neuron n passes when at least ``frac`` of all T tokens have a
    (signed) activation below ``below``. acts: (B, T, F) -> (B, F) bool."""
    return (acts < below).sum(dim=1) >= frac * acts.shape[1]


def register_scores(acts: torch.Tensor, positions: torch.Tensor, sparsity: JiangConfig | None = None) -> torch.Tensor:
    """One layer's neuron scores (Jiang et al.'s Algorithm 1, ``find_register_neurons``): for each image b that has
    outlier positions, s_b[n] = mean over those positions t of |a_{b, t, n}| (times :func:`sparse_neurons` of the
    image when ``sparsity`` is a config with ``apply_sparsity_filter``); the score is the mean of s_b over those
    images. acts: (B, T, F) MLP activations; positions: (B, T) bool -> (F,); zeros when no image has a position."""
    has = positions.any(dim=-1)  # (B,)
    if not has.any():
        return acts.new_zeros(acts.shape[-1])
    where = positions[has].to(acts.dtype)  # (B', T)
    per_image = (acts[has].abs() * where[..., None]).sum(dim=1) / where.sum(dim=1, keepdim=True)  # (B', F)
    if sparsity is not None and sparsity.apply_sparsity_filter:
        per_image = per_image * sparse_neurons(acts[has], sparsity.sparsity_frac_threshold,
                                               sparsity.sparsity_activation_threshold).to(acts.dtype)
    return per_image.mean(dim=0)


@torch.inference_mode()
def register_neurons(lm: LoadedModel, pixels: torch.Tensor, positions: torch.Tensor, top: int = 10,
                     batch_size: int = 8, config: JiangConfig | None = None) -> list[tuple[int, int, float]]:
    """Jiang et al.'s register neurons: :func:`register_scores` of every layer over all images (a = MLP activation,
    the input of the output projection), ranked over all layers. With ``config``: its sparsity filter, layers <=
    ``highest_layer`` and its ``top_k`` (``top`` is then ignored); without: the ``top`` best over all layers.

    pixels: (B, 3, S, S); positions: (B, T) bool, the outlier token positions of each image
    (:func:`jiang_outlier_positions`).
    """
    total, images = None, 0
    for start in range(0, len(pixels), batch_size):
        where = positions[start:start + batch_size]
        n = int(where.any(dim=-1).sum())  # images of this batch that count
        if n == 0:
            continue
        with Capture(lm, mlp_activations=True) as cap:
            vit_forward(lm, pixels[start:start + batch_size])
        acts = cap.stack("mlp_activations").float()  # (L, B, T, d_ff)
        score = torch.stack([register_scores(a[:, :where.shape[1]], where, config) for a in acts]) * n  # (L, d_ff)
        total = score if total is None else total + score
        images += n
    if images == 0:
        raise ValueError("no image has an outlier position; lower the cut or pass more images")
    scores = total / images
    if config is None:
        return top_neurons(scores, top)
    return top_neurons(scores[:config.highest_layer + 1], config.top_k)


def top_neurons(scores: torch.Tensor, top: int) -> list[tuple[int, int, float]]:
    """The ``top`` (layer, neuron, score) of a (L, F) score table, largest first, over all layers."""
    values, flat = scores.flatten().topk(top)
    width = scores.shape[1]
    return [(int(i) // width, int(i) % width, float(v)) for v, i in zip(values, flat)]


def sign_max(x: torch.Tensor) -> torch.Tensor:
    """The authors' ``sign_max`` per image: the entry of largest magnitude, with its sign, over all of a (B, ...)
    tensor's other dimensions -> (B,) (``torch.max`` when |max| > |min|, else ``torch.min``)."""
    flat = x.flatten(1)
    hi, lo = flat.amax(dim=1), flat.amin(dim=1)
    return torch.where(hi.abs() > lo.abs(), hi, lo)


def move_to_registers(acts: torch.Tensor, neurons: Sequence[int], n_registers: int) -> torch.Tensor:
    """The test-time register edit of one MLP (the authors' ``activate_on_registers`` with ``normal_values="zero"``,
    ``scale=1``): per image, v = :func:`sign_max` over all tokens and all listed neurons -- one value for the layer,
    not one per neuron; the register tokens (the last ``n_registers``) get v in every listed neuron; every other
    token except CLS (token 0) gets 0 there; CLS and other neurons unchanged.
    acts: (B, T + n_registers, F) -> a new tensor of the same shape."""
    a = acts.clone()
    value = sign_max(a[:, :, neurons])  # (B,): read before any write
    a[:, 1:-n_registers, neurons] = 0
    a[:, -n_registers:, neurons] = value.view(-1, 1, 1).to(a.dtype)
    return a


class TestTimeRegisters(Intervention):
    """Append ``n_registers`` all-zeros tokens after the image tokens (the authors' ``torch.zeros`` start) and move
    the register neurons' activation onto them.

    ``neurons``: {layer: [neuron, ...]}. In those layers' MLPs the edit is :func:`move_to_registers` (one signed
    maximum per image and layer into the extra tokens, 0 on every other token but CLS). Outputs get
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
        extra = h.new_zeros(h.shape[0], self.n_registers, h.shape[-1])  # the authors' torch.zeros start
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


def detection_layer(config: JiangConfig | None) -> int:
    """The block (negative from the end) whose output norms the authors detect outliers at and evaluate the register
    on: ``config.detect_outliers_layer``; -1 without a config."""
    return -1 if config is None else config.detect_outliers_layer


def register_norm_ratio(after, layer: int = -1) -> float:
    """The test-time register's norm over the median patch norm of the same image at block ``layer``, mean over
    images. after: a :class:`VitProfile` with the register as its last token."""
    median = after.patch_norms()[layer].median(dim=-1).values  # (B,)
    return (after.norms[layer, :, -1] / median).mean().item()


# jiang2025.test_time_register_takes_outliers: norms over the median patch norm, at the detection layer
TEST_TIME_REGISTER_QUANTITIES = {"max/median patch norm before": q.ratio(), "after": q.ratio(),
                                 "register norm / median patch norm": q.ratio(), "layer": q.identity("layer")}


def test_time_register_claim(before, after, stand_in: bool, config: JiangConfig | None = None) -> Claim:
    """Jiang et al. (arXiv 2506.08010, Fig. 1 and Sec. 4): with a test-time register the high-norm outliers leave the
    image patches and sit on the extra token. Rule: where the model has outliers, it holds when no patch passes the
    outlier cut afterwards and the register's norm does, both read at the layer where the authors detect and
    evaluate the outliers (``config.detect_outliers_layer``: -2 for DINOv2-L, -1 for CLIP ViT-B/16; -1 without a
    config, :func:`detection_layer`); without outliers (``stand_in``) it cannot be judged and the record carries the
    measured norms. before / after: :class:`VitProfile` (after has the extra token at the end)."""
    factor = OUTLIER_FACTOR
    layer = detection_layer(config)
    ratio_before = before.max_norm_ratio()[layer]
    ratio_after = after.max_norm_ratio()[layer]
    register = register_norm_ratio(after, layer)
    holds = None if stand_in else (ratio_after < factor and register > factor)
    return Claim(
        id="jiang2025.test_time_register_takes_outliers",
        source="Jiang et al., Vision Transformers Don't Need Trained Registers, arXiv 2506.08010, Fig. 1",
        statement="moving the register neurons' activation onto an extra token moves the high-norm outliers there",
        rule=f"outliers exist; afterwards, at the detection layer ({layer}), no patch exceeds {factor:g} x the "
             f"median patch norm and the register token does",
        published="outliers move to the test-time register; attention maps lose their artefacts",
        measured={"max/median patch norm before": ratio_before, "after": ratio_after,
                  "register norm / median patch norm": register, "layer": int(layer)},
        holds=holds,
        note="no outliers in this model: the register neurons were found at each image's highest-norm patch"
        if stand_in else "", needs_gpu=stand_in,
        follows="Sec. 3-4, Algorithm 1 and Fig. 1; nickjiang2378/test-time-registers:shared/algorithms.py:"
                "find_register_neurons, shared/hook_fn.py:activate_on_registers and shared/utils.py:sign_max (the "
                "intervention), configs/*.yaml",
        adapted=("register neurons by " + (config.source if config is not None else "the relative cut") +
                 "; zero-initialised register, one signed maximum per image and layer, CLS untouched (their "
                 "recipe); judged on the norms at their detect_outliers_layer (relative cut "
                 f"{factor:g} x the median patch norm), not on attention maps; without outliers each image's "
                 "highest-norm patch stands in and the claim is not judged"),
        at_init=False, quantities=TEST_TIME_REGISTER_QUANTITIES)
