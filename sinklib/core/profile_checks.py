"""What :func:`~sinklib.core.analysis.profile_sinks` checks at the door and while it runs: its inputs (the sink
threshold, the batch size, the token ids), each refused in one line, and its time -- a progress bar that moves per
layer and stops a run whose first layer says it would take longer than allowed."""

from __future__ import annotations

import math
import time

import torch

from sinklib.core.attention_switch import Patch
from sinklib.core.data import as_token_ids, whole_number
from sinklib.core.errors import InputError
from sinklib.core.loaded import LoadedModel


def check_eps(eps: float) -> float:
    """The sink threshold on alpha, refused in one line unless 0 < eps < 1: alpha is a share of a query's attention,
    so eps <= 0 calls every head a sink, eps >= 1 none, and NaN compares false everywhere (a sink rate of 0)."""
    value = None
    if not isinstance(eps, bool | str):  # a numpy scalar or a 0-d tensor is a number too
        try:
            value = float(eps)
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of more than one value
            value = None
    if value is None or not 0 < value < 1:
        raise InputError(f"--eps / eps must be a number in (0, 1) -- a share of attention; got {eps!r} (Gu et al. "
                         f"use 0.3)")
    return value


def check_batch_size(batch_size: int | None) -> int | None:
    """Sequences per forward: None (as many as the memory check admits) or an int >= 1; else one line."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise InputError(f"batch size must be a whole number >= 1 (or None: as many as fit); got {batch_size!r}")
    return batch_size


def check_profile_ids(lm: LoadedModel, input_ids) -> torch.Tensor:
    """The token ids :func:`~sinklib.core.analysis.profile_sinks` reads, as (N, T) (:func:`sinklib.core.data.as_token_ids`), refused in one
    line when they are malformed or only one token long: alpha_0 over one token is 1 by construction (the token can
    only attend to itself), so a sink rate there means nothing."""
    if lm.vocab_size is None:
        raise InputError(f"profile_sinks needs a language model; {lm.name!r} is a {lm.spec.family} model without "
                         f"a vocabulary")
    ids = as_token_ids(input_ids, lm.vocab_size, "profile_sinks")
    if ids.shape[1] < 2:
        raise InputError("profile_sinks: a sink rate over one token means nothing (alpha_0 of a lone token is 1 by "
                         "construction); give at least 2 tokens per sequence (Gu et al. use 64)")
    return ids


def duration_words(seconds: float) -> str:
    """A duration as a person reads it: "42 s", "10 min", "4 h 42 min"."""
    seconds = max(0.0, float(seconds))
    if seconds >= 3600:
        hours, rest = divmod(round(seconds / 60), 60)
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    if seconds >= 60:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds)} s"


def estimated_seconds(elapsed: float, done: float, total: float) -> float:
    """The whole run's time from the time ``elapsed`` on its first ``done`` of ``total`` units (layer-sequences),
    assuming every unit costs the same: elapsed x total / done (inf before anything is done)."""
    return math.inf if done <= 0 else elapsed * total / done


class LayerProgress(Patch):
    """Advance a sequence-counting tqdm bar by ``batch`` / L after every decoder layer's forward (hooks removed on
    exit): at long lengths the bar moves per layer instead of sitting at 0 until the first batch ends.

    With ``max_seconds``, the first layer's forward also times the whole run (:func:`estimated_seconds`, from the
    run's start to the end of that layer); a run estimated above ``max_seconds`` is stopped there with one line
    (:class:`~sinklib.core.errors.InputError`) that says how long it would take and how to run it anyway."""

    def __init__(self, lm: LoadedModel, bar, max_seconds: float | None = None, shape: tuple[int, int] = (0, 0)):
        super().__init__()
        self.blocks, self.bar, self.batch = [p.block for p in lm.adapter.layers], bar, 0
        self.max_seconds, self.shape, self.device = max_seconds, shape, lm.device
        self.started, self.timed = time.perf_counter(), max_seconds is None

    def _install(self) -> None:
        self._handles = [b.register_forward_hook(self._tick) for b in self.blocks]

    def _tick(self, module, args, output) -> None:  # returns None: the layer's output is left alone
        self.bar.update(self.batch / len(self.blocks))
        if not self.timed:  # once, after the first layer: a run is never stopped late
            self.timed = True
            self._refuse_if_long(time.perf_counter() - self.started)

    def _refuse_if_long(self, elapsed: float) -> None:
        N, T = self.shape
        total = estimated_seconds(elapsed, self.batch, N * len(self.blocks))
        if total > self.max_seconds:
            raise InputError(
                f"this profile of {N} x {T} tokens would take about {duration_words(total)} on {self.device} "
                f"(estimated from its first layer), over the {duration_words(self.max_seconds)} limit; ask for "
                f"fewer or shorter sequences, or run it anyway (python -m sinklib profile ... --yes; "
                f"profile_sinks(..., max_seconds=None))")


def check_layers(lm: LoadedModel, layers: list[int] | None, where: str) -> list[int] | None:
    """Layer indices as Python counts them -- ``-1`` is the last -- turned into 0 .. L-1, or one line naming the index
    outside the model's L layers (None: every layer)."""
    if layers is None:
        return None
    out = []
    for layer in layers:
        index = whole_number(layer)
        if index is None or not -lm.n_layers <= index < lm.n_layers:
            raise InputError(f"{where}: layer {layer!r} is not one of {lm.name}'s {lm.n_layers} layers (0 .. "
                             f"{lm.n_layers - 1}, or -1 for the last)")
        out.append(index % lm.n_layers)
    return out


def check_lengths(lengths, where: str) -> list[int]:
    """Context lengths of at least 2 tokens (alpha_0 over one token is 1 by construction), or one line."""
    whole = [whole_number(n) for n in lengths]
    if not whole or any(n is None or n < 2 for n in whole):
        raise InputError(f"{where}: context lengths must be whole numbers of at least 2 tokens; got "
                         f"{list(lengths)!r}")
    return whole

