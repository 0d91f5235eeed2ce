"""A dry run of ``make figures``: per notebook, what it would download and whether each step fits the device.

>>> plans = plan_run("gpu", gpu_gb=80)          # make figures PROFILE=gpu DRYRUN=1 [GPU_GB=80]
>>> print(format_plans(plans)); all(p.fits for p in plans)

Nothing is downloaded: model shapes come from ``data/hub_models.json`` (transcribed from each model's config.json);
a hub id that is not listed there is read from its ``config.json`` alone when the profile may use the network, else
the plan cannot be checked and says so. Each notebook is described by the steps that dominate its memory (what it
runs, batch, tokens, whether attention maps are kept), read from the same :data:`sinklib.pipeline.profiles.SIZES`
the notebook uses. A step's estimate is the weights in the notebook's dtype plus
:func:`sinklib.core.memory.activation_bytes` (training: weights, gradients and AdamW's two moments in float32, plus
Korthikanti et al.'s per-layer activations ``B T (34 d + 5 H T)`` bytes at 16 bits, doubled for float32).

Rule: a step fits when its estimate at its batch size is at most 90% of the device; when only a smaller batch
fits, the plan says which (the notebooks' :func:`~sinklib.core.memory.fit_batch` halves the batch the same way);
a notebook whose step does not fit even at batch 1 is refused, before anything runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache

from sinklib.core.errors import InputError
from sinklib.core.memory import activation_bytes
from sinklib.core.paths import ROOT
from sinklib.pipeline import profiles

GB = 1e9
HEADROOM = 0.9  # usable share of the device: the CUDA context, the allocator's fragmentation
TEXT_TOKENS = 40  # a caption prompt's text tokens beside an MLLM's image tokens
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
GU_PROTOCOL = ("00_tour", "10_llm")  # float32 attention on every device (Gu et al.'s protocol)


@dataclass(frozen=True)
class Shape:
    """What a memory estimate needs of a model (``data/hub_models.json``)."""

    params_b: float
    layers: int
    heads: int
    kv_heads: int
    hidden: int
    d_ff: int
    vocab: int = 0
    max_positions: int | None = None
    download_gb: float = 0.0
    patch: int | None = None  # ViTs
    registers: int = 0
    image_tokens: int = 0  # MLLMs: tokens one image becomes
    offline: bool = False


@dataclass(frozen=True)
class Step:
    """One memory-dominant step of a notebook."""

    what: str
    model: str
    batch: int
    tokens: int
    maps: bool = False  # attention probabilities of every layer kept (eager capture)
    hidden_states: bool = False
    logits: bool = False
    kv_tokens: int = 0  # a KV cache of this many tokens (decoding)
    train: bool = False


@dataclass
class StepEstimate:
    step: Step
    bytes: float
    fits_batch: int  # the largest batch <= step.batch that fits (0: not even one)
    tokens: int = 0  # the sequence length for this model (image tokens, clipped contexts resolved)
    note: str = ""


@dataclass
class NotebookPlan:
    notebook: str
    dtype: str
    capacity_gb: float
    downloads: dict[str, float] = field(default_factory=dict)  # hub id -> GB (offline models: 0)
    estimates: list[StepEstimate] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why it is refused

    @property
    def fits(self) -> bool:
        return not self.problems


@cache
def hub_shapes() -> dict[str, Shape]:
    data = json.loads((ROOT / "data" / "hub_models.json").read_text())
    return {name: Shape(**facts) for name, facts in data["models"].items()}


def shape_from_config(name: str) -> Shape:
    """A model not in ``data/hub_models.json``: its shape from ``config.json`` alone (no weights; needs the hub)."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(name)
    except Exception as err:
        raise InputError(f"cannot check {name!r}: it is not in data/hub_models.json and its config.json could not "
                         f"be read ({type(err).__name__}); add its shape there to plan offline.") from err
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    d, L = text.hidden_size, text.num_hidden_layers
    d_ff = getattr(text, "intermediate_size", 4 * d)
    vocab = getattr(text, "vocab_size", 0) or 0
    params = (L * (4 * d * d + 3 * d * d_ff) + 2 * vocab * d) / 1e9  # dense estimate (MoE: add to the table)
    return Shape(params_b=params, layers=L, heads=text.num_attention_heads,
                 kv_heads=getattr(text, "num_key_value_heads", text.num_attention_heads), hidden=d, d_ff=d_ff,
                 vocab=vocab, max_positions=getattr(text, "max_position_embeddings", None),
                 download_gb=params * 2, patch=getattr(text, "patch_size", None))


def shape_of(name: str, offline: bool) -> Shape:
    shapes = hub_shapes()
    if name in shapes:
        return shapes[name]
    if offline:
        raise InputError(f"cannot check {name!r} offline: add its shape to data/hub_models.json.")
    return shape_from_config(name)


def _models(run: profiles.Run, model: str, first_only: bool = False) -> tuple[str, ...]:
    """The models a notebook loads: MODEL= alone, else the profile's list (11_moe and 12_mllm run its first)."""
    if model:
        return (model,)
    models = tuple(getattr(run.sizes, "models", None) or (run.profile.model,))
    return models[:1] if first_only else models


def notebook_steps(notebook: str, run: profiles.Run, model: str = "") -> list[Step]:
    """The steps of ``notebook`` that dominate its memory, with the run's sizes (see the module docstring)."""
    r, steps = run, []
    if notebook == "00_tour":
        m = model or r.profile.model
        steps += [Step("sink rates (attention maps)", m, r.batch_size, r.seq_len, maps=True),
                  Step("long context (O(N) statistics)", m, 1, max(r.context_lengths))]
    elif notebook == "01_utilization":
        m = model or r.profile.model
        steps += [Step("held-out perplexity", m, r.batch_size, r.eval_seq_len, logits=True),
                  Step("ACT head choice (O(N) statistics)", m, r.batch_size, r.eval_seq_len),
                  Step("streaming, sink + window cache", m, 1, r.stream_chunk, kv_tokens=r.cache_budget),
                  Step("dense decoding (full KV cache)", m, 1, 1, kv_tokens=r.decode_tokens)]
    elif notebook == "02_interpretation":
        m = model or r.profile.model
        steps += [Step("probe (statistics + hidden states)", m, r.batch_size, r.seq_len, hidden_states=True),
                  Step("perplexity under interventions", m, r.batch_size, r.eval_seq_len, logits=True)]
    elif notebook == "03_mitigation":
        steps.append(Step(f"training, {r.train_seeds} seeds x 9 variants", "tinylm", r.train.batch_size,
                          r.train.seq_len, train=True))
    elif notebook == "10_llm":
        for m in _models(r, model):
            steps += [Step("sink rates (attention maps)", m, r.batch_size, r.seq_len, maps=True),
                      Step("long context (O(N) statistics)", m, 1, max(r.context_lengths))]
    elif notebook == "11_moe":
        for m in _models(r, model, first_only=True):
            steps += [Step("routing + statistics + hidden states", m, r.batch_size, r.seq_len, hidden_states=True),
                      Step("perplexity with experts pruned", m, r.batch_size, r.eval_seq_len, logits=True)]
    elif notebook == "12_mllm":
        for m in _models(r, model, first_only=True):
            steps.append(Step("caption forward (attention maps)", m, r.batch_size, -1, maps=True))
    elif notebook == "13_vit":
        for m in _models(r, model):
            steps += [Step("photos (attention maps)", m, r.batch_size, -r.image_size, maps=True),
                      Step("probe features", m, r.batch_size, -r.probe_size, hidden_states=True)]
    return steps


def _dtype(notebook: str, run: profiles.Run) -> str:
    """As the notebooks load: float32 for Gu et al.'s protocol and 03's training, else the profile's dtype, else
    the device's default (:func:`sinklib.models.load.default_dtype`: bfloat16 on CUDA, float32 elsewhere)."""
    if notebook in GU_PROTOCOL or notebook == "03_mitigation":
        return "float32"
    return run.dtype or ("bfloat16" if run.device.startswith("cuda") else "float32")


def _tokens(step: Step, shape: Shape) -> tuple[int, str]:
    """A step's sequence length for this model, and a note when the model changes it."""
    if step.tokens == -1:  # MLLM: image tokens + caption text
        return shape.image_tokens + TEXT_TOKENS, f"{shape.image_tokens} image + {TEXT_TOKENS} text tokens"
    if step.tokens < 0:  # ViT: -image_size
        side = -step.tokens // (shape.patch or 14)
        return side * side + 1 + shape.registers, f"{side}x{side} patches + CLS + {shape.registers} registers"
    if shape.max_positions and step.tokens > shape.max_positions:
        return shape.max_positions, f"{step.tokens} clipped to the model's {shape.max_positions} positions"
    return step.tokens, ""


def _training_bytes(run: profiles.Run, batch: int) -> tuple[float, float]:
    """(parameters, bytes) of one training step of 03's TinyLM, counted on the meta device (nothing allocated)."""
    import torch

    from sinklib.mitigation.tinylm import TinyLM

    cfg = run.train.model
    with torch.device("meta"):
        params = sum(p.numel() for p in TinyLM(cfg).parameters())
    T, d, H, L = run.train.seq_len, cfg.d_model, cfg.n_heads, cfg.n_layers
    acts = 2 * L * batch * T * (34 * d + 5 * H * T)  # Korthikanti et al. at 16 bits, doubled for float32
    return params, 16 * params + acts


def estimate(step: Step, shape: Shape | None, dtype: str, run: profiles.Run, batch: int) -> tuple[float, str]:
    """Bytes one step needs at ``batch``, and a note."""
    if step.train:
        params, need = _training_bytes(run, batch)
        return need, f"{params / 1e6:.1f}M parameters, float32 + AdamW"
    tokens, note = _tokens(step, shape)
    weights = shape.params_b * 1e9 * DTYPE_BYTES[dtype]
    acts = activation_bytes(hidden=shape.hidden, d_ff=shape.d_ff, heads=shape.heads, layers=shape.layers,
                            vocab=shape.vocab, batch=batch, seq_len=tokens, eager_attentions=step.maps,
                            hidden_states=step.hidden_states, logits=step.logits)
    kv = 2 * shape.layers * shape.kv_heads * (shape.hidden // shape.heads) * step.kv_tokens * batch * DTYPE_BYTES[dtype]
    if step.kv_tokens:
        note = f"KV cache of {step.kv_tokens} tokens: {kv / GB:.2f} GB"
        if shape.max_positions and step.kv_tokens > shape.max_positions:
            note += f"; beyond the model's {shape.max_positions} trained positions"
    return weights + acts + kv, note


def plan_notebook(notebook: str, profile: str, model: str, capacity_gb: float) -> NotebookPlan:
    run = profiles.resolve(profile, model, None, 0, ROOT / "build" / "plan", notebook=notebook)
    dtype = _dtype(notebook, run)
    plan = NotebookPlan(notebook, dtype, capacity_gb)
    limit = HEADROOM * capacity_gb * GB
    for step in notebook_steps(notebook, run, model):
        shape = None
        if not step.train:
            try:
                shape = shape_of(step.model, run.profile.offline)
            except InputError as err:
                if str(err) not in plan.problems:  # once per model, not per step
                    plan.problems.append(str(err))
                continue
            plan.downloads[step.model] = 0.0 if shape.offline else shape.download_gb
        need, note = estimate(step, shape, dtype, run, step.batch)
        batch = step.batch
        while batch > 0 and estimate(step, shape, dtype, run, batch)[0] > limit:
            batch //= 2
        tokens = run.train.seq_len if step.train else _tokens(step, shape)[0]
        plan.estimates.append(StepEstimate(step, need, batch, tokens, note))
        if batch == 0:
            plan.problems.append(f"{step.model}: {step.what} needs {estimate(step, shape, dtype, run, 1)[0] / GB:.1f} "
                                 f"GB even at batch 1, over {HEADROOM:.0%} of {capacity_gb:g} GB")
    return plan


def plan_run(profile: str = "gpu", model: str = "", gpu_gb: float = 80.0,
             notebooks: list[str] | None = None) -> list[NotebookPlan]:
    """A :class:`NotebookPlan` for every notebook ``make figures`` would run (``notebooks``: the same filter). The
    device is a GPU of ``gpu_gb`` GB for the gpu profile, else this machine's memory."""
    import psutil

    from sinklib.pipeline.runner import discover

    if profile not in profiles.PROFILES:
        raise InputError(f"unknown profile {profile!r}; use one of {', '.join(profiles.PROFILES)}.")
    if gpu_gb <= 0:
        raise InputError(f"GPU_GB must be a positive number of GB, got {gpu_gb!r}.")
    from sinklib.pipeline.routing import route

    capacity = gpu_gb if profiles.PROFILES[profile].device == "cuda" else psutil.virtual_memory().total / GB
    books = [book.stem for book in discover(only=notebooks)]
    try:
        models, _ = route(model, books, explicit=notebooks is not None)  # MODEL= only where its family fits
        unknown = ""
    except InputError as err:  # a model whose family nobody knows: every notebook is planned with it, and refused
        models, unknown = {b: model for b in books}, str(err)
    plans = [plan_notebook(book, profile, models[book], capacity) for book in books]
    for p in plans:
        if unknown and models[p.notebook] and unknown not in p.problems:
            p.problems.append(unknown)
    return plans


def format_plans(plans: list[NotebookPlan], profile: str = "gpu") -> str:
    lines = []
    for p in plans:
        dtype = p.dtype if p.estimates else "-"
        lines.append(f"{p.notebook}  dtype {dtype}  device {p.capacity_gb:.0f} GB (a step fits under "
                     f"{HEADROOM * p.capacity_gb:.0f} GB)")
        for model, gb in p.downloads.items():
            lines.append(f"  model {model}: " + ("offline, nothing to download" if gb == 0 else f"download ~{gb:.1f} GB"))
        if not p.estimates and not p.problems:
            lines.append("  no model: reads the other notebooks' results")
        for e in p.estimates:
            batch = f"{e.step.batch}" if e.fits_batch == e.step.batch else f"{e.step.batch} -> {e.fits_batch}"
            verdict = "fits" if e.fits_batch == e.step.batch else ("lower batch" if e.fits_batch else "DOES NOT FIT")
            lines.append(f"  {e.step.what[:38]:<38} {e.step.model[:34]:<34} batch {batch:<8} tokens {e.tokens:<6} "
                         f"{e.bytes / GB:7.1f} GB  {verdict}{'  (' + e.note + ')' if e.note else ''}")
        lines += [f"  REFUSED: {msg}" for msg in p.problems]
    total = sum({m: gb for p in plans for m, gb in p.downloads.items()}.values())
    refused = [p.notebook for p in plans if not p.fits]
    lines.append(f"{len(plans)} notebooks planned for profile {profile}; downloads ~{total:.0f} GB in all; "
                 + (f"REFUSED: {', '.join(refused)}" if refused else "every step fits"))
    return "\n".join(lines)
