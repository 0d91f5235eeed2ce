"""What the pipeline knows of one notebook, in one record: :class:`NotebookProtocol`.

Each notebook has one protocol module beside its research code -- ``protocol.py`` in its folder
(``sinklib/utilization/protocol.py`` for 01_utilization, ``sinklib/architectures/vit/protocol.py`` for 13_vit), or
``<name>_protocol.py`` where a folder serves two notebooks (``sinklib/utilization/tour_protocol.py`` for 00_tour,
``sinklib/reproduction/protocol.py`` for 90_scorecard) -- that defines ``PROTOCOL``: the notebook's sizes in
every run profile, what the gpu profile cut from the papers' protocols, the model families it takes, its CPU budget,
its first-run seconds and the steps the dry run counts (:class:`Step`). :mod:`sinklib.pipeline.protocols` collects
them by name; the profiles, the runner and the plan read them from there.

A protocol module holds plain data and functions of the run only: one in a research folder may import that folder,
:mod:`sinklib.core`, :mod:`sinklib.models` and the folders below it, never :mod:`sinklib.pipeline` (the layers of
``tests/test_layout.py``). That is why :class:`Step` lives here and not in the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Step:
    """One memory-dominant step of a notebook, as the dry run (:mod:`sinklib.pipeline.plan`) counts it."""

    what: str
    model: str
    batch: int
    tokens: int  # -1: an MLLM's image tokens + caption text; -N: a ViT's N x N px image
    maps: bool = False  # attention probabilities of every layer formed (eager capture)
    host_maps: bool = True  # ... and copied whole to the host (False: reduced on the device first)
    hidden_states: bool = False
    logits: bool = False
    kv_tokens: int = 0  # a KV cache of this many tokens (decoding)
    train: bool = False
    calls: int = 1  # forwards of this shape (training: optimizer steps of every run)
    call_tokens: tuple[int, ...] = ()  # when the forwards differ in length: each one's tokens (calls ignored)
    growing: bool = False  # the KV cache grows from 0 to kv_tokens over the calls (time at the mean)
    variant: str = ""  # training: the attention variant
    stats: str = ""  # sink statistics taken in the forward: "first key" or "every key" (AttentionStats)


def no_steps(run: Any, model: str = "") -> list[Step]:
    """The steps of a notebook that loads no model and trains none (it reads the others' results)."""
    return []


@dataclass(frozen=True)
class NotebookProtocol:
    """Everything the pipeline needs to know of one notebook (see the module docstring).

    ``steps(run, model)``: the steps that dominate its memory and time, counted from ``run``'s sizes as the notebook
    spends them (``run``: a :class:`sinklib.pipeline.profiles.Run`, whose attributes read through to the sizes;
    ``model``: MODEL= when its family is one the notebook takes, else "").
    """

    name: str  # the notebook's file stem, e.g. "01_utilization"
    families: tuple[str, ...]  # the families its model may have, its own model lists' first; (): it loads none of yours
    sizes: Mapping[str, Any] = field(default_factory=dict)  # profile -> its sizes dataclass ({}: no size knobs)
    cuts: Mapping[str, str] = field(default_factory=dict)  # profile -> what it cut from the papers' protocol to fit
    cpu_budget_s: int | None = None  # the cpu profile's seconds with warm caches on the 2-core machine
    first_run_s: int | None = None  # ... from empty caches, two at a time (the order and ETA of a first run; the
    # values are one fresh-clone run's, 51f9551 on 2026-11-28, a slow day: benchmarks/machine_speed.py)
    dtype: str | None = None  # the dtype its models run in on every device (None: the profile's, else the device's)
    steps: Callable[[Any, str], list[Step]] = no_steps


def forwards(items: int, batch: int) -> int:
    """Forwards that ``items`` sequences take in batches of ``batch`` (at least one)."""
    return max(1, -(-items // max(1, batch)))


def models_of(run: Any, model: str, first_only: bool = False) -> tuple[str, ...]:
    """The models a notebook loads: MODEL= alone, else its sizes' list, else the profile's model (``first_only``:
    the list's first -- 11_moe and 12_mllm run one model)."""
    if model:
        return (model,)
    models = tuple(getattr(run.sizes, "models", None) or (run.profile.model,))
    return models[:1] if first_only else models
