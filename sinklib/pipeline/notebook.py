"""The setup and close-out every notebook shares, in one place.

>>> nb = notebook.start("00_tour", profile, model, device, seed, out_dir, families="llm", dtype="float32")
>>> run, lm, record, fig_dir = nb.run, nb.lm, nb.record, nb.fig_dir
... # sections: compute -> figure with caption -> record.add(claim)
>>> nb.close()   # headline.json (with the seconds it took) and claims.json beside the figures

:func:`start` resolves the parameters cell through the profile (seeds everything, makes the figure folder, keeps
the hub offline where the profile says so), loads the model and checks its family with a one-line error, and opens
the claims :class:`~sinklib.core.claims_file.Recorder` and the headline dictionary.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

from sinklib.core.claims_file import Recorder
from sinklib.core.errors import NotFiniteResultError
from sinklib.core.loaded import LoadedModel
from sinklib.core.results import non_finite_paths, write_json
from sinklib.models.load import load_model, require_family
from sinklib.pipeline import profiles
from sinklib.pipeline.model_results import KeptWork, kept_code

T = TypeVar("T")


@dataclass
class Notebook:
    """One notebook run: its resolved parameters, model, claims recorder, headline numbers and clock."""

    name: str
    run: profiles.Run
    lm: LoadedModel | None
    record: Recorder
    headline: dict = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    @property
    def fig_dir(self) -> Path:
        return self.run.out_dir

    @property
    def title(self) -> str:
        """How figure titles name the model: "SmolLM2-135M-Instruct (smollm2-135m)"."""
        return f"{self.lm.label} ({self.lm.name})" if self.lm is not None else self.record.model

    def placed(self, lm: LoadedModel) -> LoadedModel:
        """Note in the headline which devices ``lm``'s weights sit on (``devices``: model name -> devices; two or
        more for a model split over GPUs) and return it, for the notebooks that load their own models."""
        self.headline.setdefault("devices", {})[lm.name] = model_devices(lm.model)
        return lm

    def per_model(self, name: str, measure: Callable[[], T], kept_as: str = "") -> T:
        """``measure()`` for model ``name``, kept as soon as it returns (:class:`~sinklib.pipeline.model_results.KeptWork`):
        a rerun with the same code and sizes reads it back instead, with the devices the model ran on, so a failure
        on a later model of a list keeps the earlier ones. ``measure`` loads the model through :meth:`placed`.
        ``kept_as``: a suffix of the kept result's name, for a second measurement of the same model (other sizes)."""
        done = KeptWork.for_model(self.run, name + kept_as)
        self.headline["kept_code"] = kept_code(self.run.notebook)  # for the scheduler: kept for this code?
        if done.exists():
            result, devices = done.load()
            self.headline.setdefault("devices", {})[name] = devices  # where it ran
            print(f"{name}: measured by an earlier run with this code and these sizes; read from {done.path}")
            return result
        result = measure()
        done.save((result, self.headline["devices"][name]))
        return result

    def close(self) -> None:
        """Write ``headline.json`` (plus the seconds this run took) and ``claims.json``, and say where in one line
        (nothing is returned: a notebook's last cell shows that line, not the headline's raw dict)."""
        self.headline["seconds"] = round(time.perf_counter() - self.started, 1)
        # a quantity that does not exist (no delimiter in the windows, no sink head) is None at its producer, so a
        # NaN or infinity here is a computation that broke: the run fails and the previous figures stay
        bad = non_finite_paths(self.headline)
        if bad:
            raise NotFiniteResultError(
                f"{self.name}: {len(bad)} headline value(s) are NaN or infinite ({', '.join(bad[:3])}"
                f"{', ...' if len(bad) > 3 else ''}): a measurement broke (NaN weights or inputs, a division by zero); "
                f"rerun with a fresh cache (make verify-cache) or report it with the executed notebook")
        write_json(self.fig_dir / "headline.json", self.headline)
        self.record.write(self.fig_dir)
        held = sum(c.holds is True for c in self.record.claims)
        print(f"{self.name}: {len(self.record.claims)} claims ({held} hold), {self.headline['seconds']:.0f} s; "
              f"figures and JSON in {self.fig_dir}")


def model_devices(model: torch.nn.Module) -> list[str]:
    """The devices a model's parameters sit on, in order (``["cuda:0", "cuda:1"]`` for a model split over two)."""
    return sorted({str(p.device) for p in model.parameters()})


def start(name: str, profile: str, model: str, device: str, seed: int, out_dir: str, *,
          families: str | tuple[str, ...] | None = ("llm", "moe"), dtype: str | None = None,
          label: str | None = None, grad: bool = False) -> Notebook:
    """Resolve a notebook's parameters, load and check its model, open its recorder and headline.

    ``families``: the model families the notebook accepts (None: the notebook loads no model, e.g. it trains its
    own; then ``label`` names what its claims were measured on). ``dtype``: e.g. "float32" for Gu et al.'s protocol
    on any device. ``grad``: keep autograd on (off by default: the notebooks only measure).
    """
    run = profiles.resolve(profile, model, device, seed, out_dir, notebook=name)
    torch.set_grad_enabled(grad)
    lm = None
    if families is not None:
        lm = load_model(run.model, device=run.device, dtype=dtype or run.dtype)
        require_family(lm, families, name)
        label = lm.label
    record = Recorder(name, label or name, run.profile.name)
    headline = {"notebook": name, "profile": run.profile.name, "device": run.device,
                "fake_cuda_devices": int(os.environ.get("SINKLIB_FAKE_CUDA", "0") or 0)}  # set by the tests
    if lm is not None:  # devices: more than one when the model was split over GPUs (device_map)
        headline |= {"model": lm.name, "label": lm.label, "devices": {lm.name: model_devices(lm.model)}}
    return Notebook(name, run, lm, record, headline)
