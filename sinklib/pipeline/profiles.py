"""Run profiles and the resolved run: a notebook's parameters cell becomes a :class:`Run`, so notebooks never branch
on ``if smoke:``.

A profile fixes the default model and device for every notebook; each notebook's sizes in each profile live in its
protocol module beside its research code (``SIZES`` there; :mod:`sinklib.pipeline.protocols` finds them), and a
:class:`Run` reads them through (``run.num_seqs``).

* ``smoke``: seconds per notebook, for ``make test`` (real offline model, tiny batches);
* ``cpu``: the default of ``make figures``: offline, the protocol sizes that fit a 2-core CPU;
* ``gpu``: paper scale on a hub model (needs network or a filled hub cache and a CUDA device);
* ``tiny-gpu``: the gpu profile's code path on tiny random models, on CPU, for the tests.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sinklib.core.errors import InputError
from sinklib.pipeline import protocols


@dataclass(frozen=True)
class Profile:
    """What a profile fixes for every notebook: the default model and device, and whether the hub is off-limits."""

    name: str
    model: str  # default model of the profile (a registry name or a hub id)
    device: str  # default device
    offline: bool  # sets HF_HUB_OFFLINE=1 so nothing tries the network
    dtype: str | None = None  # the models' dtype where a notebook does not fix one (None: the device's default)


PROFILES: dict[str, Profile] = {
    "smoke": Profile("smoke", "smollm2-135m", "cpu", True),  # seconds per notebook, for make test
    "cpu": Profile("cpu", "smollm2-135m", "cpu", True, dtype="float32"),  # make figures' default: offline, 2-core CPU;
    # the CPU on any machine (a GPU would change the numbers behind the README: bfloat16, other kernels)
    "gpu": Profile("gpu", "meta-llama/Llama-2-7b-hf", "cuda", False),  # paper scale on a hub model
    # the gpu profile's code path (hub ids from a hub cache, several model classes per notebook, bfloat16) on tiny
    # random models, on CPU, for the test: sinklib.models.tiny_random_hub.write_hub_cache fills the cache
    "tiny-gpu": Profile("tiny-gpu", "sinklib-tiny/llama", "cpu", True, dtype="bfloat16"),
}


@dataclass(frozen=True)
class Run:
    """A resolved notebook run: the profile, the notebook's sizes in it, the user's model/device/seed, the folder."""

    profile: Profile
    model: str
    device: str
    seed: int
    out_dir: Path
    notebook: str = "notebook"
    sizes: object | None = None

    @property
    def dtype(self) -> str | None:
        """The profile's model dtype (None: the device's default, float32 on CPU and bfloat16 on CUDA)."""
        return self.profile.dtype

    def __getattr__(self, name: str):  # run.num_seqs etc. read through to the notebook's sizes
        if name.startswith("__") or name in ("profile", "sizes"):
            raise AttributeError(name)
        if self.sizes is None or not hasattr(self.sizes, name):
            home = protocols.HOMES.get(self.notebook)
            where = f"{home}.SIZES" if home else "any protocol module (sinklib.pipeline.protocols finds none for it)"
            raise AttributeError(f"{self.notebook} has no size {name!r} in {where}")
        return getattr(self.sizes, name)


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy and torch (CPU and CUDA) with one number (0..2**32-1, else one line)."""
    from sinklib.core.data import check_seed

    seed = check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


OFFLINE_MARK = "SINKLIB_SET_HF_HUB_OFFLINE"  # set when sinklib (not the user) turned the hub off in this process


def hub_offline(offline: bool) -> None:
    """Switch the Hugging Face hub off (an offline profile) or back on (the gpu profile) for this process and the
    processes it starts: ``HF_HUB_OFFLINE`` and huggingface_hub's own switch, which it reads once at import. Back on
    only where sinklib turned it off: a user's own ``HF_HUB_OFFLINE=1`` stays (so one JupyterLab kernel can run the
    cpu profile, then the gpu one)."""
    from huggingface_hub import constants

    if offline:
        if os.environ.get("HF_HUB_OFFLINE") is None:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ[OFFLINE_MARK] = "1"
        constants.HF_HUB_OFFLINE = os.environ["HF_HUB_OFFLINE"].upper() in ("1", "ON", "YES", "TRUE")
    elif os.environ.pop(OFFLINE_MARK, None):
        os.environ.pop("HF_HUB_OFFLINE", None)
        constants.HF_HUB_OFFLINE = False


def resolve(
    profile: str = "cpu", model: str | None = None, device: str | None = None, seed: int = 0,
    out_dir: str | Path | None = None, notebook: str = "notebook",
) -> Run:
    """Turn a notebook's parameters cell into a :class:`Run`; empty model/device take the profile's defaults.

    Also seeds everything, creates ``out_dir`` and switches the hub off for offline profiles (:func:`hub_offline`).
    """
    if profile not in PROFILES:
        raise InputError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}.")
    prof = PROFILES[profile]
    hub_offline(prof.offline)
    out = Path(out_dir) if out_dir else Path("figures") / notebook
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(seed)
    sizes = protocols.protocol(notebook).sizes.get(profile)
    return Run(prof, model or prof.model, device or prof.device, int(seed), out, notebook, sizes)
