"""Negative controls: the same architecture with random weights.

A claim about an effect that training makes (a sink, a massive activation, a super neuron) must fail on randomly
initialised weights of the same configuration; if its rule holds there too, the rule cannot tell a trained model
from noise. :func:`random_weights` builds that control for any loaded model -- same configuration, same tokenizer,
same device and dtype, each weight drawn by the architecture's own initialiser (``_init_weights`` of the
transformers class, ``init_weights`` of a timm model) from ``seed`` -- and labels it so that no figure or table can
mistake it for the trained model.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from sinklib.core.loaded import LoadedModel

CONTROL_SUFFIX = "random weights"


def random_weights(lm: LoadedModel, seed: int = 0) -> LoadedModel:
    """``lm``'s architecture and configuration with freshly initialised weights (no training, eval mode).

    transformers models: ``type(model)._from_config(config)`` under ``torch.manual_seed(seed)``, so every module is
    initialised as the library initialises a new model of that class (e.g. normal(0, initializer_range) for linear
    and embedding weights, ones for norms). timm models: a deep copy re-initialised by ``init_weights()``. The
    attention implementation of the loaded model is kept, so captures switch it exactly as for the original.
    """
    model = lm.model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if hasattr(model, "config") and hasattr(type(model), "_from_config"):
            config = copy.deepcopy(model.config)
            with torch.device(lm.device):  # built where it runs: no host copy of a large model first
                control = type(model)._from_config(config, dtype=lm.dtype)
        elif hasattr(model, "init_weights"):
            control = copy.deepcopy(model)
            control.init_weights()
        else:
            raise TypeError(f"random_weights: no way to re-initialise a {type(model).__name__} (neither a transformers "
                            f"model nor one with init_weights())")
    control = control.to(device=lm.device, dtype=lm.dtype).eval()
    spec = replace(lm.spec, label=f"{lm.spec.label} ({CONTROL_SUFFIX}, seed {seed})",
                   description=f"random-weight control of {lm.spec.name}")
    return replace(lm, model=control, spec=spec)
