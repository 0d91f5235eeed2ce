"""Learned sink logits, checked across attention kernels: which kernels keep them, and how wrong are those that drop them.

gpt-oss gives every attention head h a learned logit s_h that competes with the real keys in the softmax and whose
column is then dropped (openai/gpt-oss, gpt_oss/torch/model.py:sdpa: the sinks concatenated to QK^T, softmax,
``W[..., :-1]``); 03's sink-logit variant (:class:`~sinklib.mitigation.variants.SinkLogit`) is the same form:

    p_tj = exp(l_tj) / (exp(s_h) + sum_k exp(l_tk)),   p_sink,t = 1 - sum_j p_tj,

with l_tj = q_t . k_j * scaling (+ the mask). A kernel that ignores s_h normalises over the real keys alone: every
row sums to 1 and the model's output changes with no error raised -- a bug class seen in training and serving
stacks. :func:`check_model` runs one forward of a model through each attention kernel available here (each routed
by :class:`~sinklib.core.attention_switch.AttentionSwitch`, the one place that touches transformers' registry) and
compares it with :func:`transcribed_attention`, the formula above in float64: the next-token log-probs, the sink's
mass and the first key's alpha (Gu et al.'s alpha_0) per layer. The same transcription with the sinks left out
measures what dropping them does to this model (the check's control: a kernel that drops them must be told apart).
:func:`check_tiny_lm` does the same for 03's TinyLM, whose two paths are its own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import fmean

import torch

from sinklib.core import quantities as q
from sinklib.core.attention_masks import allowed
from sinklib.core.attention_switch import AttentionSwitch
from sinklib.core.claims import IMPLEMENTATION_CHECK, Claim

FOLLOWS = "openai/gpt-oss:gpt_oss/torch/model.py:sdpa (sinks as an extra logit column, softmax, column dropped)"
# float32 kernels against the float64 transcription: rounding stays near 1e-6 in log-prob on these sizes; bfloat16
# kernels round each product to 8 bits of mantissa
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-9, torch.bfloat16: 5e-2, torch.float16: 1e-2}
DECIDABLE = 10.0  # the sinks' own effect must exceed the tolerance this many times for a verdict


def sink_softmax(logits: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """p_tj = exp(l_tj) / (exp(s_h) + sum_k exp(l_tk)) in float64 (a plain softmax when ``sinks`` is None).

    logits (B, H, T, S), -inf (or a large negative number) where a key is masked; sinks (H,). Returns (B, H, T, S);
    1 - p.sum(-1) is the sink's mass p_sink,t. Stable: every exponent is shifted by max(max_j l_tj, s_h)."""
    logits = logits.double()
    if sinks is None:
        return torch.softmax(logits, dim=-1)
    s = sinks.double().view(1, -1, 1, 1)  # (1, H, 1, 1)
    top = torch.maximum(logits.amax(dim=-1, keepdim=True), s)  # (B, H, T, 1)
    e = torch.exp(logits - top)
    return e / (torch.exp(s - top) + e.sum(dim=-1, keepdim=True))


def transcribed_attention(module, query, key, value, attention_mask, scaling: float | None = None,
                          dropout: float = 0.0, s_aux: torch.Tensor | None = None, keep_sinks: bool = True, **kwargs):
    """The formula of the module docstring as a transformers attention function, in float64.

    query (B, H, T, hd), key / value (B, Hkv, S, hd) -> (output (B, T, H, hd) in the query's dtype, probabilities
    (B, H, T, S)). The sinks are ``s_aux`` (what gpt-oss passes) or the module's ``sinks``; ``keep_sinks=False``
    leaves them out (the control: a kernel made to drop them). The mask is read by
    :func:`~sinklib.core.attention_masks.allowed` (the eager one the switch hands over)."""
    sinks = s_aux if s_aux is not None else getattr(module, "sinks", None)
    group = query.shape[1] // key.shape[1]
    k = key.double().repeat_interleave(group, dim=1)  # (B, H, S, hd)
    v = value.double().repeat_interleave(group, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    T, S = query.shape[-2], key.shape[-2]
    seen = allowed(attention_mask, T, S, 0, T, query.device)  # (B | 1, 1, T, S): None read as sdpa reads it
    logits = (query.double() @ k.transpose(-1, -2) * scale).masked_fill(~seen, float("-inf"))  # (B, H, T, S)
    p = sink_softmax(logits, sinks if keep_sinks else None)
    out = (p @ v).transpose(1, 2).contiguous()  # (B, T, H, hd)
    return out.to(query.dtype), p.to(query.dtype)


def has_learned_sinks(model: torch.nn.Module) -> bool:
    """Whether any module of ``model`` holds a learned sink logit per head (gpt-oss's ``sinks``)."""
    return any(isinstance(getattr(m, "sinks", None), torch.Tensor) for m in model.modules())


def sink_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The attention modules with a learned ``sinks`` parameter, in layer order."""
    return [m for m in model.modules() if isinstance(getattr(m, "sinks", None), torch.Tensor)]


def shortest_window(model: torch.nn.Module) -> int | None:
    """The smallest sliding window among the model's layers (None: every layer sees every key)."""
    config = getattr(model, "config", None)
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if window is None or (types is not None and "sliding_attention" not in types):
        return None
    return int(window)


@dataclass
class KernelResult:
    """One kernel's forward against the transcription: ``ran`` False with ``why`` when the kernel refused (its own
    error, one line); else the next-token log-prob error (max and mean |delta| over the positions), and where the
    kernel hands back probabilities, the sink's mass and alpha_0 per layer beside the transcription's."""

    kernel: str
    ran: bool
    why: str = ""
    logp_max: float | None = None
    logp_mean: float | None = None
    sink_mass: list[float] | None = None  # per layer: mean p_sink over heads and queries (None: not returned)
    sink_mass_error: float | None = None  # max over layers of |kernel - transcription|
    alpha_error: float | None = None  # max over layers of |alpha_0 kernel - alpha_0 transcription|
    keeps: bool | None = None  # None: not run, or the sinks' effect too small to tell

    def line(self, tolerance: float) -> str:
        """One line: the kernel, whether it keeps the sinks, and its errors."""
        if not self.ran:
            return f"{self.kernel}: not run -- {self.why}"
        word = {True: "keeps the sinks", False: "DROPS the sinks", None: "cannot tell"}[self.keeps]
        extra = "" if self.sink_mass_error is None else (f", sink mass off by {self.sink_mass_error:.2g}, alpha_0 "
                                                         f"off by {self.alpha_error:.2g}")
        return (f"{self.kernel}: {word} (next-token log-prob off by {self.logp_max:.2g} at most, {self.logp_mean:.2g} "
                f"on average{extra}; tolerance {tolerance:g})" + (f" -- {self.why}" if self.why else ""))


@dataclass
class SinkCheck:
    """:func:`check_model`'s result: the model, its dtype's tolerance, the size of the sinks' effect (the
    transcription with and without them), the transcription's own sink mass per layer, and one row per kernel."""

    model: str
    dtype: str
    tolerance: float
    drop_effect: float  # max |delta log p| between the transcription with and without the sinks
    reference_sink_mass: list[float]
    kernels: list[KernelResult] = field(default_factory=list)
    windows: int = 0  # the input the check ran on: windows x tokens
    tokens: int = 0

    @property
    def decidable(self) -> bool:
        """Dropping the sinks moves the log-probs by more than :data:`DECIDABLE` x the tolerance."""
        return self.drop_effect > DECIDABLE * self.tolerance

    def headline(self) -> dict:
        """The check as the notebook's headline keeps it: model, the sinks' effect and share, each kernel's row."""
        return {"model": self.model, "drop_effect": self.drop_effect, "tolerance": self.tolerance,
                "sink_mass": self.reference_sink_mass,
                "kernels": {k.kernel: {"ran": k.ran, "keeps": k.keeps, "logp_max": k.logp_max, "why": k.why}
                            for k in self.kernels}}

    def lines(self) -> list[str]:
        head = (f"{self.model} ({self.dtype}): learned sinks take {fmean(self.reference_sink_mass):.3g} of the "
                f"attention on average; dropping them moves the next-token log-probs by up to {self.drop_effect:.3g}")
        return [head] + [k.line(self.tolerance) for k in self.kernels]


class _Recorder:
    """Wraps an attention function: calls it and keeps each sink layer's returned probabilities (B, H, T, S) or
    None, by the module's position among :func:`sink_modules`."""

    def __init__(self, fn: Callable, layers: dict[int, int]):
        self.fn, self.layers, self.probs = fn, layers, {}

    def __call__(self, module, *args, **kwargs):
        out, probs = self.fn(module, *args, **kwargs)
        layer = self.layers.get(id(module))
        if layer is not None:
            self.probs[layer] = None if probs is None else probs.detach().double()
        return out, probs


def _per_layer(probs: dict[int, torch.Tensor | None], n: int) -> tuple[list[float], list[float]] | None:
    """(sink mass, alpha_0) per layer from returned probabilities: p_sink = 1 - sum_j p_tj and alpha_0 = mean over
    the queries of p_t0 (Gu et al.; every query sees key 0 in a window no longer than the model's sliding window),
    each a mean over batch and heads; None when a layer returned none."""
    if len(probs) < n or any(p is None for p in probs.values()):
        return None
    mass = [float((1 - probs[i].sum(-1)).mean()) for i in range(n)]
    alpha = [float(probs[i][..., :, 0].mean()) for i in range(n)]
    return mass, alpha


def _next_token_logp(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[:, t + 1] | ids[:, :t + 1]) in float64 (not :func:`~sinklib.core.evaluation.shifted_nll`, which
    rounds to float32 -- the size of the errors compared here): (B, T, V) logits, (B, T) ids -> (B, T - 1)."""
    return torch.log_softmax(logits.double()[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def _model_eager(model) -> Callable | str:
    """transformers' eager attention for this architecture: the modeling file's own ``eager_attention_forward``
    (gpt-oss's appends the sinks), or why there is none."""
    module = inspect.getmodule(type(sink_modules(model)[0]))
    return getattr(module, "eager_attention_forward", None) or f"{getattr(module, '__name__', 'its modeling file')} " \
                                                               f"has no eager_attention_forward"


@dataclass(frozen=True)
class StatsPath:
    """sinklib's statistics path as a kernel row: :class:`~sinklib.core.attnstats.AttentionStats` over every key
    (``keys`` None) or over the first only (``keys=(0,)``)."""

    keys: tuple[int, ...] | None = None


def kernels(model) -> dict[str, Callable | StatsPath | str]:
    """name -> attention function to route ``model`` through, or a string saying why it cannot run here: the model's
    eager (transformers), sdpa and flex attention (transformers' functions, each forced through the registry whatever
    the model declares it supports), and sinklib's statistics path (:class:`~sinklib.core.attnstats.AttentionStats`,
    which computes the layer's output itself; with ``keys=[0]`` it would take torch's log-sum-exp kernel, which has
    no sink term, and must not). On CUDA, sdpa once per backend torch has (flash, cuDNN, efficient)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    out: dict[str, Callable | StatsPath | str] = {
        "eager (transformers)": _model_eager(model), "sdpa (transformers)": ALL_ATTENTION_FUNCTIONS["sdpa"],
        "flex_attention (transformers)": ALL_ATTENTION_FUNCTIONS["flex_attention"],
        "sinklib statistics (fused output)": StatsPath(), "sinklib statistics (first key only)": StatsPath((0,))}
    device = next(model.parameters()).device
    if device.type == "cuda":
        from torch.nn.attention import SDPBackend

        for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION),
                               ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            out[f"sdpa {label} (torch)"] = _pinned_sdpa(ALL_ATTENTION_FUNCTIONS["sdpa"], backend)
    else:
        out["flash / cuDNN (torch sdpa backends)"] = "needs a CUDA device"
    return out


def _pinned_sdpa(fn: Callable, backend) -> Callable:
    """``fn`` with torch's sdpa pinned to one backend (it raises where that backend cannot run the call)."""
    from torch.nn.attention import sdpa_kernel

    def pinned(*args, **kwargs):
        with sdpa_kernel([backend]):
            return fn(*args, **kwargs)
    return pinned


@torch.inference_mode()
def check_model(model, ids: torch.Tensor, name: str = "", extra: dict[str, Callable] | None = None) -> SinkCheck:
    """Every kernel of :func:`kernels` (and ``extra``: name -> attention function) on ``ids`` (B, T) against the
    transcription. A kernel keeps the sinks when its next-token log-probs stay within the dtype's
    :data:`TOLERANCE` of the transcription's (and its sink mass too, where it returns probabilities); it drops them
    when it is off by more; cannot tell when dropping the sinks moves this model's log-probs by less than
    :data:`DECIDABLE` x the tolerance. Raises ValueError for a model without learned sinks."""
    from sinklib.core.attnstats import AttentionStats

    if not has_learned_sinks(model):
        raise ValueError(f"{name or type(model).__name__} has no learned sink logits (no attention module with a "
                         "'sinks' parameter): there is nothing to check")
    layers = {id(m): i for i, m in enumerate(sink_modules(model))}
    dtype = next(model.parameters()).dtype
    tolerance = TOLERANCE.get(dtype, 1e-2)

    def through(fn: Callable) -> tuple[torch.Tensor, dict]:
        rec = _Recorder(fn, layers)
        with AttentionSwitch(model, "sinkcheck", rec, mask="eager"):
            return _next_token_logp(model(input_ids=ids).logits, ids), rec.probs

    ref, ref_probs = through(transcribed_attention)
    dropped, _ = through(lambda *a, **k: transcribed_attention(*a, keep_sinks=False, **k))
    ref_mass, ref_alpha = _per_layer(ref_probs, len(layers))
    check = SinkCheck(name or type(model).__name__, str(dtype).removeprefix("torch."), tolerance,
                      float((dropped - ref).abs().max()), ref_mass, windows=ids.shape[0], tokens=ids.shape[1])
    for label, fn in {**kernels(model), **(extra or {})}.items():
        if isinstance(fn, str):  # why it cannot run here
            check.kernels.append(KernelResult(label, False, why=fn))
            continue
        try:
            if isinstance(fn, StatsPath):  # sinklib's statistics path, every key or the first only
                with AttentionStats(model, keys=fn.keys) as st:
                    logp = _next_token_logp(model(input_ids=ids).logits, ids)
                masses = [st.learned_sink_mass(i) for i in st.layers]
                per = None if any(m is None for m in masses) else (
                    [float(m.mean()) for m in masses], [float(a) for a in st.alpha(keys=[0]).mean(dim=(1, 2, 3))])
            else:
                logp, probs = through(fn)
                per = _per_layer(probs, len(layers))
        except Exception as err:  # the kernel's own refusal, said in one line
            check.kernels.append(KernelResult(label, False, why=f"{type(err).__name__}: {str(err).splitlines()[0]}"))
            continue
        row = _judge(label, logp, ref, per, (ref_mass, ref_alpha), tolerance, check.decidable)
        refused = [flag for flag, word in (("_supports_sdpa", "sdpa"), ("_supports_flex_attn", "flex_attention"))
                   if label.startswith(word) and getattr(model, flag, True) is False]
        if refused:  # forced through the registry: say that transformers itself would not run it
            row.why = (row.why + "; " if row.why else "") + f"transformers refuses {label.split()[0]} for this model " \
                      f"({refused[0]} = False): forced here through the registry"
        check.kernels.append(row)
    return check


def _judge(label: str, logp: torch.Tensor, ref: torch.Tensor, per, ref_per, tolerance: float,
           decidable: bool) -> KernelResult:
    """A kernel's row: its errors against the transcription and whether they stay within ``tolerance``."""
    diff = (logp - ref).abs()
    row = KernelResult(label, True, logp_max=float(diff.max()), logp_mean=float(diff.mean()))
    if per is not None:
        row.sink_mass = per[0]
        row.sink_mass_error = max(abs(a - b) for a, b in zip(per[0], ref_per[0]))
        row.alpha_error = max(abs(a - b) for a, b in zip(per[1], ref_per[1]))
    if not decidable:
        row.why = f"dropping the sinks moves this model's log-probs by less than {DECIDABLE:g}x the tolerance"
        return row
    row.keeps = row.logp_max <= tolerance and (row.sink_mass_error is None or row.sink_mass_error <= tolerance)
    return row


# ------------------------------------------------------------------------------------------ 03's TinyLM, its own paths
def _tiny_paths() -> dict[str, Callable]:
    """03's sink-logit attention computed four ways from one layer's (q, k, v) (B, H, T, hd): name -> fn(module, q,
    k, v) -> (output (B, H, T, hd), probabilities (B, H, T, T) or None). The transcription and the control (sinks
    left out) are float64; the two others are the variant's own: its materialised weights (the CPU path, and
    whenever maps are recorded) and its fused SDPA path (CUDA: an extra zero key biased by s_h, zero value)."""
    from sinklib.mitigation.variants import causal_logits

    def transcription(m, q, k, v, keep: bool = True):
        p = sink_softmax(causal_logits(q.double(), k.double()), m.sink if keep else None)
        return p @ v.double(), p

    return {"transcription": transcription,
            "control: sinks dropped": lambda m, q, k, v: transcription(m, q, k, v, keep=False),
            "TinyLM weights path (CPU)": lambda m, q, k, v: ((a := m.weights(q, k)) @ v, a),
            "TinyLM fused path (SDPA + extra key)": lambda m, q, k, v: (m.fused_output(q, k, v), None)}


@torch.inference_mode()
def check_tiny_lm(model, ids: torch.Tensor, name: str = "TinyLM sink_logit") -> SinkCheck:
    """:func:`check_model` for 03's TinyLM with the ``sink_logit`` variant: each block's attention output replaced
    (a forward hook) by one of :func:`_tiny_paths`, the whole model run once per path on ``ids`` (B, T)."""
    from sinklib.mitigation.variants import SinkLogit

    mods = [b.attn for b in model.blocks if isinstance(b.attn, SinkLogit)]
    if not mods:
        raise ValueError(f"{name} has no sink-logit attention: there is nothing to check")
    index = {id(m): i for i, m in enumerate(mods)}

    def through(path: Callable) -> tuple[torch.Tensor, dict]:
        probs = {}

        def hook(module, args, output):
            q, k, v = args[:3]
            y, p = path(module, q, k, v)
            probs[index[id(module)]] = None if p is None else p.double()
            return y.to(q.dtype), None if p is None else p.to(q.dtype)

        handles = [m.register_forward_hook(hook) for m in mods]
        try:
            logits = model(ids)
        finally:
            for h in handles:
                h.remove()
        return _next_token_logp(logits, ids), probs

    paths = _tiny_paths()
    ref, ref_probs = through(paths.pop("transcription"))
    dropped, _ = through(paths.pop("control: sinks dropped"))
    ref_mass, ref_alpha = _per_layer(ref_probs, len(mods))
    dtype = next(model.parameters()).dtype
    check = SinkCheck(name, str(dtype).removeprefix("torch."), TOLERANCE.get(dtype, 1e-2),
                      float((dropped - ref).abs().max()), ref_mass, windows=ids.shape[0], tokens=ids.shape[1])
    for label, path in paths.items():
        logp, probs = through(path)
        check.kernels.append(_judge(label, logp, ref, _per_layer(probs, len(mods)), (ref_mass, ref_alpha),
                                    check.tolerance, check.decidable))
    return check


PROJECT_KERNELS = ("eager (transformers)", "sinklib statistics", "TinyLM")  # what sinklib measures sink models with


def project_kernels_keep(checks: list[SinkCheck]) -> tuple[bool | None, list[str]]:
    """The implementation check's rule over :func:`check_model` / :func:`check_tiny_lm` results: every kernel this
    project runs a sink model through (its statistics path, transformers' eager it measures with, TinyLM's two paths)
    keeps the sinks. None when a check cannot tell (the sinks' effect within the tolerance); also the kernels that
    drop them."""
    ours = [(c, k) for c in checks for k in c.kernels if k.ran and k.kernel.startswith(PROJECT_KERNELS)]
    if not ours or any(not c.decidable for c in checks):
        return None, []
    dropping = [f"{k.kernel} on {c.model}" for c, k in ours if k.keeps is False]
    return not dropping, dropping



# ------------------------------------------------------------------------------------------------- the record
GPT_OSS = "OpenAI, gpt-oss-120b & gpt-oss-20b model card (arXiv 2508.10925), attention sinks"
_LOGP_ERROR = q.Quantity(kind=q.Kind.VALUE, unit="nats", abs_tol=TOLERANCE[torch.float32],
                         why="a float32 kernel's rounding against the float64 transcription: 1e-7 on this host's tiny "
                             "models for every kernel that keeps the sinks, far below the 1e-4 tolerance")
KERNEL_QUANTITIES = {"drop_effect": q.value("nats"), "sink_mass": q.share(), "logp_max": _LOGP_ERROR}


def kernel_claim(check: SinkCheck) -> Claim:
    """The implementation check on one model: every kernel sinklib measures a learned-sink model with
    (:data:`PROJECT_KERNELS`) keeps the sinks (:func:`project_kernels_keep`); the others are reported beside it."""
    keeps, dropping = project_kernels_keep([check])
    ran = [k for k in check.kernels if k.ran]
    note = ("; ".join(f"drops the sinks: {d}" for d in dropping) if dropping else
            "dropping the sinks moves this model's log-probs too little to tell" if keeps is None else "")
    others = [f"{k.kernel} {'keeps' if k.keeps else 'drops'} them" for k in ran
              if not k.kernel.startswith(PROJECT_KERNELS) and k.keeps is not None]
    note = "; ".join(filter(None, [note, "beside the rule: " + ", ".join(others) if others else ""]))
    return Claim(id="learned_sinks.kept_by_every_kernel", source=f"{GPT_OSS}; openai/gpt-oss", paper=IMPLEMENTATION_CHECK,
                 statement="every attention kernel sinklib measures a learned-sink model with keeps the sink logits",
                 rule=f"each such kernel's next-token log-probs (and sink mass, where it returns probabilities) within "
                      f"{check.tolerance:g} of the formula's float64 transcription, on a model where dropping the "
                      f"sinks moves them by more than {DECIDABLE:g}x that",
                 published=None, holds=keeps, note=note, quantities=KERNEL_QUANTITIES,
                 measured={"drop_effect": check.drop_effect, "sink_mass": fmean(check.reference_sink_mass),
                           "logp_max": {k.kernel: k.logp_max for k in ran}},
                 follows=f"{FOLLOWS}; transformers' GptOssAttention (s_aux passed to the attention function)",
                 adapted=f"the {check.tolerance:g} tolerance and the {DECIDABLE:g}x margin are ours; next-token "
                         f"log-probs of Bible / training windows, not a benchmark")
