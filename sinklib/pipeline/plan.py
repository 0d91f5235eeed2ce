"""A dry run of ``make figures``: per notebook, what it would download and whether each step fits the device.

>>> plans = plan_run("gpu", gpu_gb=80)          # make figures PROFILE=gpu DRYRUN=1 [GPU_GB=80]
>>> print(format_plans(plans)); all(p.fits for p in plans)

Nothing is downloaded: model shapes (:mod:`sinklib.pipeline.plan_shapes`) come from ``data/hub_models.json``
(transcribed from each model's config.json); a hub id that is not listed there is read from its ``config.json``
alone when the profile may use the network, else the plan cannot be checked and says so. Each notebook is described
by the steps that dominate its memory (what it runs, batch, tokens, whether attention maps are kept): its protocol
module's ``steps`` (:mod:`sinklib.pipeline.protocols`), counted from the same sizes the notebook uses. A step's
estimate (:mod:`sinklib.pipeline.plan_estimates`) is the weights in the notebook's dtype plus
:func:`sinklib.core.memory.activation_bytes` (training: weights, gradients and AdamW's two moments in float32, plus
Korthikanti et al.'s per-layer activations ``B T (34 d + 5 H T)`` bytes at 16 bits, doubled for float32).

Training (03) is counted per attention variant on the meta device
(:func:`sinklib.mitigation.training.training_step_bytes`: the tensors autograd saves for backward, softpick's
several (B, H, T, T) tensors included), at the micro-batch the profile trains with. Streaming (01) counts its dense
reference cache over the whole stream.

Rule: a step fits when its estimate at its batch size is at most 90% of the device; when only a smaller batch fits,
the plan says which (the notebooks' :func:`~sinklib.core.memory.fit_batch` halves the batch the same way); a
notebook whose step does not fit even at batch 1 is refused, before anything runs. Attention maps a step copies
whole to the host (``host_maps``; 12_mllm reduces them on the device first) are its host RAM: their float32 bytes
for one forward, checked against ``host_gb``.

Time: each step's forwards are counted from the profile's sizes (the dominant ones; a margin of :data:`MARGIN`
covers the rest) and timed by a model calibrated on this project's code measured on a real GPU
(:mod:`sinklib.pipeline.plan_calibration`, the H200 run), carried over to
:data:`~sinklib.pipeline.plan_estimates.GPU` (an H100 SXM 80 GB) by published peaks: a forward
(:func:`~sinklib.pipeline.plan_estimates.call_seconds`) is its matmul FLOPs and attention FLOPs over the peak at
each one's measured utilisation, plus a per-layer cost; a decoded token the larger of its FLOPs and bytes (weights,
KV cache) over the card, plus the measured per-layer host cost of a decode step in its dtype; a statistics forward
an sdpa forward times the statistics' cost over sdpa (its target until measured: said in the output); a training
step (:func:`~sinklib.pipeline.plan_estimates.train_step_seconds`) the measured step of its attention variant,
scaled by FLOPs.

Access: every hub id is checked (:func:`sinklib.models.hub_access.access_problem`): online by asking the hub,
offline from the table's ``gated`` mark, with the licence link and the login to use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sinklib.core.errors import InputError
from sinklib.core.paths import ROOT
from sinklib.core.protocol import Step
from sinklib.models.hub_access import access_problem
from sinklib.pipeline import plan_calibration as calibration
from sinklib.pipeline import profiles, protocols
from sinklib.pipeline.plan_estimates import GB, GPU, estimate, step_seconds
from sinklib.pipeline.plan_shapes import shape_of, step_tokens

HEADROOM = 0.9  # usable share of the device: the CUDA context, the allocator's fragmentation
HOST_GB = 128.0  # host RAM assumed beside the GPU (make figures HOST_GB=...)
MARGIN = 1.25  # the notebook's other forwards (figures, controls, smaller steps), beyond its dominant steps


@dataclass
class StepEstimate:
    step: Step
    bytes: float
    fits_batch: int  # the largest batch <= step.batch that fits (0: not even one)
    tokens: int = 0  # the sequence length for this model (image tokens, clipped contexts resolved)
    note: str = ""
    seconds: float = 0.0  # estimated GPU time of all the step's calls (see call_seconds)
    host_bytes: float = 0.0  # host RAM the step's kept attention maps need for one forward (float32)


@dataclass
class NotebookPlan:
    notebook: str
    dtype: str
    capacity_gb: float
    downloads: dict[str, float] = field(default_factory=dict)  # hub id -> GB (offline models: 0)
    estimates: list[StepEstimate] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why it is refused
    access: dict[str, str] = field(default_factory=dict)  # hub id -> what to do before it can be read
    cut: str = ""  # what the profile cut from the papers' protocol to fit the time budget

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def gpu_hours(self) -> float:
        return MARGIN * sum(e.seconds for e in self.estimates) / 3600


def _dtype(notebook: str, run: profiles.Run) -> str:
    """As the notebooks load: the dtype the notebook's protocol fixes (float32 for Gu et al.'s protocol and 03's
    training), else the profile's dtype, else the device's default (:func:`sinklib.models.load.default_dtype`:
    bfloat16 on CUDA, float32 elsewhere)."""
    return (protocols.protocol(notebook).dtype or run.dtype
            or ("bfloat16" if run.device.startswith("cuda") else "float32"))


def _hub_off() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def plan_notebook(notebook: str, profile: str, model: str, capacity_gb: float, host_gb: float = HOST_GB,
                  check_access: bool = True) -> NotebookPlan:
    run = profiles.resolve(profile, model, None, 0, ROOT / "build" / "plan", notebook=notebook)
    dtype = _dtype(notebook, run)
    plan = NotebookPlan(notebook, dtype, capacity_gb, cut=protocols.protocol(notebook).cuts.get(profile, ""))
    limit = HEADROOM * capacity_gb * GB
    for step in protocols.protocol(notebook).steps(run, model):
        shape = None
        if not step.train:
            try:
                shape = shape_of(step.model, run.profile.offline)
            except InputError as err:
                if str(err) not in plan.problems:  # once per model, not per step
                    plan.problems.append(str(err))
                continue
            if step.model not in plan.downloads:
                plan.downloads[step.model] = 0.0 if shape.offline else shape.download_gb
                problem = "" if shape.offline or not check_access else access_problem(
                    step.model, run.profile.offline or _hub_off(), shape.gated)
                if problem:
                    plan.access[step.model] = problem
        need, note = estimate(step, shape, dtype, run, step.batch)
        batch = step.batch
        while batch > 0 and estimate(step, shape, dtype, run, batch)[0] > limit:
            batch //= 2
        tokens = run.train.seq_len if step.train else step_tokens(step, shape)[0]
        seconds = step_seconds(step, shape, dtype, run, max(batch, 1)) * (step.batch / max(batch, 1))
        host = (shape.layers * shape.heads * max(batch, 1) * tokens * (tokens + step.kv_tokens) * 4
                if step.maps and step.host_maps else 0)
        plan.estimates.append(StepEstimate(step, need, batch, tokens, note, seconds, host))
        if batch == 0:
            plan.problems.append(f"{step.model}: {step.what} needs {estimate(step, shape, dtype, run, 1)[0] / GB:.1f} "
                                 f"GB even at batch 1, over {HEADROOM:.0%} of {capacity_gb:g} GB")
        if host > HEADROOM * host_gb * GB:
            plan.problems.append(f"{step.model}: {step.what} keeps {host / GB:.0f} GB of attention maps on the host "
                                 f"per forward, over {HEADROOM:.0%} of {host_gb:g} GB of host RAM (HOST_GB=)")
    return plan


def plan_run(profile: str = "gpu", model: str = "", gpu_gb: float = 80.0,
             notebooks: list[str] | None = None, host_gb: float = HOST_GB) -> list[NotebookPlan]:
    """A :class:`NotebookPlan` for every notebook ``make figures`` would run (``notebooks``: the same filter). The
    device is a GPU of ``gpu_gb`` GB for the gpu profile, else this machine's memory."""
    import psutil

    from sinklib.pipeline.runner import discover

    if profile not in profiles.PROFILES:
        raise InputError(f"unknown profile {profile!r}; use one of {', '.join(profiles.PROFILES)}.")
    for name, gb in (("GPU_GB", gpu_gb), ("HOST_GB", host_gb)):
        if not (math.isfinite(gb) and gb > 0):  # nan compares false: every step "fitted" under nan GB
            raise InputError(f"{name} must be a positive, finite number of GB, got {gb!r}.")
    capacity = gpu_gb if profiles.PROFILES[profile].device == "cuda" else psutil.virtual_memory().total / GB
    books = [book.stem for book in discover(only=notebooks)]
    try:
        models, _ = protocols.route(model, books, explicit=notebooks is not None)  # MODEL= only where its family fits
        unknown = ""
    except InputError as err:  # a model whose family nobody knows: every notebook is planned with it, and refused
        models, unknown = {b: model for b in books}, str(err)
    plans = [plan_notebook(book, profile, models[book], capacity, host_gb) for book in books]
    for p in plans:
        if unknown and models[p.notebook] and unknown not in p.problems:
            p.problems.append(unknown)
    return plans


def format_plans(plans: list[NotebookPlan], profile: str = "gpu") -> str:
    on_gpu = profiles.PROFILES[profile].device == "cuda" if profile in profiles.PROFILES else True
    lines, told = [], set()
    for p in plans:
        dtype = p.dtype if p.estimates else "-"
        hours = f"  ~{p.gpu_hours:.2f} GPU-hours" if on_gpu and p.estimates else ""
        lines.append(f"{p.notebook}  dtype {dtype}  device {p.capacity_gb:.0f} GB (a step fits under "
                     f"{HEADROOM * p.capacity_gb:.0f} GB){hours}")
        for model, gb in p.downloads.items():
            lines.append(f"  model {model}: " + ("offline, nothing to download" if gb == 0 else f"download ~{gb:.1f} GB"))
        for model, what in p.access.items():
            lines.append(f"  ACCESS {what}" if model not in told else f"  ACCESS {model}: as above")
            told.add(model)
        if not p.estimates and not p.problems:
            lines.append("  no model: reads the other notebooks' results")
        for e in p.estimates:
            batch = f"{e.step.batch}" if e.fits_batch == e.step.batch else f"{e.step.batch} -> {e.fits_batch}"
            verdict = "fits" if e.fits_batch == e.step.batch else ("lower batch" if e.fits_batch else "DOES NOT FIT")
            time = f"{e.seconds / 60:6.1f} min " if on_gpu else ""
            host = f"; host {e.host_bytes / GB:.1f} GB of maps per forward" if e.host_bytes >= 0.1 * GB else ""
            lines.append(f"  {e.step.what[:38]:<38} {e.step.model[:34]:<34} batch {batch:<8} tokens {e.tokens:<6} "
                         f"{e.bytes / GB:7.1f} GB {time} {verdict}"
                         + (f"  ({'; '.join(x for x in (e.note, host.removeprefix('; ')) if x)})"
                            if e.note or host else ""))
        if p.cut and on_gpu:
            lines.append(f"  cut to fit the budget: {p.cut}")
        lines += [f"  REFUSED: {msg}" for msg in p.problems]
    total = sum({m: gb for p in plans for m, gb in p.downloads.items()}.values())
    refused = [p.notebook for p in plans if not p.fits]
    lines.append(f"{len(plans)} notebooks planned for profile {profile}; downloads ~{total:.0f} GB in all; "
                 + (f"REFUSED: {', '.join(refused)}" if refused else "every step fits"))
    if on_gpu:
        hours = sum(p.gpu_hours for p in plans)
        lines.append(f"estimated {hours:.1f} GPU-hours in all on one {GPU.name}: calibrated on this code measured "
                     f"on an {calibration.MEASURED_ON.name} (two H200 runs; carried over by published peaks), x{MARGIN:g} "
                     f"for the steps not listed")
    gated = sorted({m for p in plans for m in p.access})
    if gated:
        lines.append(f"before the run: {len(gated)} hub id(s) need access -- {', '.join(gated)} (lines marked ACCESS)")
    return "\n".join(lines)
