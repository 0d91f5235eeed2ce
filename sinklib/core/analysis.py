"""One-call analyses that combine capture and metrics over a batch of sequences (used by the CLI and notebooks)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch
from tqdm.auto import tqdm

from sinklib.core import metrics, pooled
from sinklib.core import quantities as q
from sinklib.core.attention_switch import Patch
from sinklib.core.attnstats import AttentionStats
from sinklib.core.capture import Capture
from sinklib.core.claims import Claim
from sinklib.core.data import as_token_ids
from sinklib.core.errors import InputError
from sinklib.core.loaded import LoadedModel
from sinklib.core.memory import check_fits, check_length, fit_batch


@dataclass
class SinkProfile:
    """Sink statistics of one model on one batch of inputs (Gu et al.'s protocol: eager attention, key 0).

    Shapes: N sequences, L layers, H heads, T positions.
    """

    model: str
    input: str
    eps: float
    alphas: torch.Tensor  # (N, L, H) alpha of the first token per sequence, layer, head
    key_mass: torch.Tensor  # (L, T) sink mass per key, averaged over sequences and heads
    dom_first: torch.Tensor  # (N, L) DomRatio of the first token's hidden state after each layer
    dom_rest: torch.Tensor  # (N, L) DomRatio of the other tokens, averaged over positions 1..T-1
    extremes: list[metrics.Extreme]  # per layer: the largest |h| over the batch
    massive_dims: list[list[int]] = field(default_factory=list)  # per layer: dims meeting Sun et al.'s criterion

    @property
    def sink_rate(self) -> float:
        return metrics.sink_rate(self.alphas, self.eps)

    @property
    def sink_rate_by_sequence(self) -> torch.Tensor:
        """(N,) float64: r[n] = the share of sequence n's (layer, head) pairs with alpha_0 > eps; their mean is
        :attr:`sink_rate`, and draws' sequences pool (:func:`llama_family_shape_pooled`)."""
        return (self.alphas > self.eps).double().flatten(1).mean(1)

    @property
    def alpha_first_by_layer(self) -> list[float]:
        return self.alphas.mean(dim=(0, 2)).tolist()

    @property
    def sink_layers(self) -> list[int]:
        """Layers whose mean alpha of the first token (over heads and sequences) exceeds eps."""
        return [i for i, a in enumerate(self.alpha_first_by_layer) if a > self.eps]

    @property
    def dom_ratio_first_by_layer(self) -> list[float]:
        return self.dom_first.mean(dim=0).tolist()

    @property
    def dom_ratio_rest_by_layer(self) -> list[float]:
        return self.dom_rest.mean(dim=0).tolist()

    def to_json(self) -> dict:
        """The CLI's JSON object (keys fixed by the ``profile`` command's contract), plus a few extras."""
        return {
            "model": self.model,
            "input": self.input,
            "sink_rate": self.sink_rate,
            "alpha_first_by_layer": self.alpha_first_by_layer,
            "dom_ratio_first_by_layer": self.dom_ratio_first_by_layer,
            "massive": [e.as_dict() for e in self.extremes],
            "eps": self.eps,
            "num_seqs": int(self.alphas.shape[0]),
            "seq_len": int(self.key_mass.shape[1]),
            "dom_ratio_rest_by_layer": self.dom_ratio_rest_by_layer,
            "massive_dims_by_layer": self.massive_dims,
        }


def check_eps(eps: float) -> float:
    """The sink threshold on alpha, refused in one line unless 0 < eps < 1: alpha is a share of a query's attention,
    so eps <= 0 calls every head a sink, eps >= 1 none, and NaN compares false everywhere (a sink rate of 0)."""
    if not (isinstance(eps, int | float) and 0 < eps < 1):
        raise InputError(f"--eps / eps must be in (0, 1) -- a share of attention; got {eps!r} (Gu et al. use 0.3)")
    return float(eps)


def check_batch_size(batch_size: int | None) -> int | None:
    """Sequences per forward: None (as many as the memory check admits) or an int >= 1; else one line."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise InputError(f"batch size must be a whole number >= 1 (or None: as many as fit); got {batch_size!r}")
    return batch_size


def check_profile_ids(lm: LoadedModel, input_ids) -> torch.Tensor:
    """The token ids :func:`profile_sinks` reads, as (N, T) (:func:`sinklib.core.data.as_token_ids`), refused in one
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


@torch.inference_mode()
def profile_sinks(
    lm: LoadedModel, input_ids: torch.Tensor, *, input_name: str = "custom", eps: float = metrics.GU_EPS,
    batch_size: int | None = 16, progress: bool = True, max_seconds: float | None = None,
) -> SinkProfile:
    """Run ``input_ids`` (N, T) through the model in batches and reduce each batch to sink statistics.

    The inputs are checked at the door, each refusal one line (:class:`~sinklib.core.errors.InputError`): ids
    (:func:`check_profile_ids`: integer, (N, T) or one (T,) sequence, T >= 2, within the vocabulary), ``eps``
    (:func:`check_eps`) and ``batch_size`` (:func:`check_batch_size`). ``max_seconds``: stop after the first layer
    when the whole run is estimated to take longer (:class:`LayerProgress`; None: no limit).

    Attention statistics come from :class:`~sinklib.core.attnstats.AttentionStats` (equal to eager ``output_attentions``
    within 1e-5, but O(T) extra memory), hidden states from :class:`~sinklib.core.capture.Capture`; only reductions are
    kept, so memory is one batch's activations. Checks length first; the batch is the largest <= ``batch_size``
    (None: N) that the memory check admits. The progress bar counts sequences and moves after every layer, so
    long inputs show progress and an estimate of the time left from the first layer on.
    """
    input_ids = check_profile_ids(lm, input_ids)
    eps, batch_size = check_eps(eps), check_batch_size(batch_size)
    N, T = input_ids.shape
    L = lm.n_layers
    check_length(lm, T)
    batch_size = fit_batch(lm, min(batch_size or N, N), T, hidden_states=True)
    alphas, masses, dom_first, dom_rest = [], [], [], []
    best: list[metrics.Extreme | None] = [None] * L
    dims: list[set[int]] = [set() for _ in range(L)]
    bar = tqdm(total=N, desc=f"{lm.name} / {input_name} (batch {batch_size})", unit="seq", disable=not progress,
               leave=False, bar_format="{l_bar}{bar}| {n:.1f}/{total} seq [{elapsed}<{remaining}]")
    with contextlib.closing(bar), Capture(lm, hidden_states=True) as cap, AttentionStats(lm) as stats, \
            LayerProgress(lm, bar, max_seconds, (N, T)) as tick:
        for start in range(0, N, batch_size):
            tick.batch = len(input_ids[start:start + batch_size])
            batch = input_ids[start:start + batch_size].to(lm.device)
            lm.model(batch, use_cache=False, logits_to_keep=1)
            mass = torch.stack([stats.key_mass(i) for i in range(L)], dim=1)  # (B, L, H, T)
            stats.clear()
            alphas.append(mass[..., 0])
            masses.append(mass.sum(dim=(0, 2)))
            hidden = cap.stack("hidden_states")  # (L, B, T, d)
            dr = metrics.dom_ratio(hidden)  # (L, B, T)
            dom_first.append(dr[:, :, 0].T)
            dom_rest.append(dr[:, :, 1:].mean(dim=-1).T)
            for i in range(L):
                ext = metrics.largest_activation(hidden[i])
                ext.seq += start
                if best[i] is None or abs(ext.value) > abs(best[i].value):
                    best[i] = ext
                dims[i].update(massive_dims_of(hidden[i]))
            cap.clear()
    key_mass = torch.stack(masses).sum(dim=0) / (N * lm.n_heads)
    return SinkProfile(
        model=lm.name, input=input_name, eps=eps, alphas=torch.cat(alphas), key_mass=key_mass,
        dom_first=torch.cat(dom_first), dom_rest=torch.cat(dom_rest), extremes=best,  # type: ignore[arg-type]
        massive_dims=[sorted(d) for d in dims]
    )


def massive_dims_of(h: torch.Tensor, min_abs: float = metrics.SUN_MIN_ABS,
                    min_ratio: float = metrics.SUN_MIN_RATIO) -> set[int]:
    """The dimensions of :func:`metrics.find_massive` as a set: Sun et al.'s |h_j| > 100 and > 1000x the median |h|
    of the sequence's layer output (:func:`metrics.layer_median`). h: (N, T, d)."""
    return set(metrics.massive_mask(h, min_abs, min_ratio).nonzero()[:, -1].tolist())


@torch.inference_mode()
def attention_maps(lm: LoadedModel, input_ids: torch.Tensor, layers: list[int] | None = None,
                   intervention=None) -> torch.Tensor:
    """Attention probabilities of one sequence: ``input_ids`` (T,) or (1, T) -> (L_sel, H, T, T).

    ``intervention``: an optional :mod:`sinklib.interpretation.interventions` context manager active during the forward.
    """
    ids = input_ids.reshape(1, -1).to(lm.device)
    with Capture(lm, attentions=True, layers=layers) as cap:
        with intervention if intervention is not None else contextlib.nullcontext():
            lm.model(ids, use_cache=False)
        return cap.stack("attentions")[:, 0]


FALLBACK_RATIO = 100.0  # used, and said, when Sun et al.'s 1000x-median ratio is not met


@dataclass
class MassiveDims:
    """Massive dimensions of a model by Sun et al.'s criterion (|h| > 100 and > 1000x the median |h| of the layer's
    output over the sequence, as their code computes it).

    ``dims`` are the dimensions later analyses use: Sun's when the criterion is met anywhere (``strict``), else
    those whose largest entry is > 100 and > ``min_ratio`` (the fallback, 100x) -- and then every caller must say
    that the published criterion was not met. ``peak_ratio``: the largest |h| / median over layers.
    """

    dims: list[int]
    strict: bool
    min_ratio: float
    peak_ratio: float

    def describe(self) -> str:
        if self.strict:
            return (f"Sun et al.'s criterion (|h| > 100 and > 1000x the layer's median |h|) is met on dims "
                    f"{self.dims}")
        return (f"Sun et al.'s 1000x-median criterion is NOT met (the largest entry is {self.peak_ratio:.0f}x its "
                f"layer's median |h|); using |h| > 100 and > {self.min_ratio:.0f}x instead: dims {self.dims}")

    def as_dict(self) -> dict:
        return {**self.__dict__, "criterion": self.describe()}


def massive_dimensions(profile: SinkProfile, fallback_ratio: float = FALLBACK_RATIO) -> MassiveDims:
    """Sun et al.'s massive dimensions from a :func:`profile_sinks` result, or the stated fallback (see
    :class:`MassiveDims`)."""
    strict = sorted({d for layer in profile.massive_dims for d in layer})
    peak = max((e.ratio for e in profile.extremes), default=0.0)
    if strict:
        return MassiveDims(strict, True, metrics.SUN_MIN_RATIO, peak)
    loose = sorted({e.dim for e in profile.extremes if abs(e.value) > metrics.SUN_MIN_ABS and e.ratio > fallback_ratio})
    return MassiveDims(loose, False, fallback_ratio, peak)


def first_layer_above(values, threshold: float) -> int | None:
    """Index of the first entry above ``threshold`` (e.g. the sink-onset layer), or None."""
    for i, v in enumerate(values):
        if v > threshold:
            return i
    return None


def layer_windows(lm: LoadedModel) -> list[int | None]:
    """Per layer, the sliding window W of a sliding-attention layer (query t sees keys t-W+1..t), None for a layer
    that sees every earlier key -- from the text config's ``layer_types`` and ``sliding_window`` (Gemma-3: five
    sliding layers of 512 for each global one), or every layer when a window is set without layer types."""
    cfg = lm.model.config
    cfg = getattr(cfg, "text_config", None) or cfg
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    if not window:
        return [None] * lm.n_layers
    if types is None:
        return [window if getattr(cfg, "use_sliding_window", True) else None] * lm.n_layers
    return [window if t == "sliding_attention" else None for t in types][:lm.n_layers]


@dataclass
class ContextSweep:
    """First-token attention mass at several context lengths (``n_windows`` natural windows per length).

    In a sliding-window layer of W keys, alpha_0 at length n averages over the min(n, W) queries that see key 0
    (Gu et al.'s T - k generalised to windows, :func:`metrics.alpha` with ``window``): the queries past the window
    cannot attend to it, and counting them would make alpha_0 fall with n by construction."""

    lengths: list[int]
    skipped: list[int]  # requested lengths beyond the model's max_position_embeddings
    by_window: torch.Tensor  # (len(lengths), n_windows, L, H)
    windows: list[int | None] = field(default_factory=list)  # per layer: its sliding window, None for global ones

    @property
    def alpha_first(self) -> torch.Tensor:
        """(len(lengths), L, H): alpha of the first token, mean over the windows."""
        return self.by_window.mean(dim=1)

    def mean_over(self, layers: list[int] | None = None) -> list[float]:
        """Per length: alpha of the first token averaged over windows, the given layers (all: None) and heads."""
        a = self.alpha_first if layers is None else self.alpha_first[:, layers]
        return a.mean(dim=(1, 2)).tolist()

    def range_over_windows(self, layers: list[int] | None = None) -> tuple[list[float], list[float]]:
        """Per length: (lowest, highest) over the windows of the layer-and-head mean -- the spread a plot shows."""
        a = self.by_window if layers is None else self.by_window[:, :, layers]
        per_window = a.mean(dim=(2, 3))  # (len, n_windows)
        return per_window.min(dim=1).values.tolist(), per_window.max(dim=1).values.tolist()

    @staticmethod
    def uniform_baseline(n: int) -> float:
        """alpha_0 if every query spread its attention uniformly over what it sees: (1/N) sum_t 1/(t+1)."""
        return float(sum(1.0 / (t + 1) for t in range(n)) / n)

    def uniform_over(self, n: int, layers: list[int] | None = None) -> float:
        """The even-spread alpha_0 at length n, averaged over ``layers`` (None: all) as this sweep normalises them:
        a sliding layer of W keys counts its first min(n, W) queries, whose t + 1 <= W keys are all visible."""
        windows = self.windows or [None] * self.by_window.shape[2]
        chosen = range(len(windows)) if layers is None else layers
        if not chosen:
            raise ValueError("uniform_over needs at least one layer (None: all layers)")
        values = [self.uniform_baseline(min(n, windows[i] or n)) for i in chosen]
        return sum(values) / len(values)

    @property
    def sliding_layers(self) -> list[int]:
        return [i for i, w in enumerate(self.windows) if w]


@torch.inference_mode()
def first_token_mass_by_length(lm: LoadedModel, lengths: list[int], seed: int = 0, source: str = "bible",
                               progress: bool = True, n_windows: int = 1) -> ContextSweep:
    """alpha of the first token per layer and head at each context length, read off one forward per window.

    ``n_windows`` natural windows of the longest length, each run alone (batch 1: memory stays O(N)) with
    :class:`~sinklib.core.attnstats.AttentionStats` tracking key 0 (torch's flash kernel plus one column). In a causal
    model the first n queries of that forward are exactly a forward of the window's first n tokens, so alpha_0 at
    length n is Gu et al.'s (1/n) sum_{t<n} A[t, 0] over those queries: every length costs one forward of the longest,
    and the lengths of one window share their text (a curve shows the same passage growing). Lengths beyond the
    model's ``max_position_embeddings`` are skipped (and listed), not an error. In a sliding-window layer of W keys
    only the first min(n, W) queries see key 0, and alpha_0 averages over those (:class:`ContextSweep`).
    """
    from sinklib.core.data import text_windows
    from sinklib.core.memory import max_length

    limit = max_length(lm) or max(lengths)
    used, skipped = sorted(n for n in lengths if n <= limit), [n for n in lengths if n > limit]
    if not used:
        return ContextSweep([], skipped, torch.empty(0, n_windows, lm.n_layers, lm.n_heads), layer_windows(lm))
    longest = used[-1]
    check_fits(lm, 1, longest)
    windows = text_windows(lm.tokenizer, n_windows, longest, seed, source)  # (n_windows, longest)
    sliding = layer_windows(lm)
    per_window = []
    for ids in tqdm(windows, desc=f"{n_windows} window(s) of {longest} tokens", disable=not progress, leave=False):
        with AttentionStats(lm, keys=[0]) as stats:  # one flash pass per layer: output + key 0
            lm.model(ids[None].to(lm.device), use_cache=False, logits_to_keep=1)
        p0 = torch.stack([stats.probs_of_keys(i)[0, :, :, 0] for i in stats.layers])  # (L, H, longest): A[t, 0]
        # length n: the first n queries; in a sliding layer of W keys only the first min(n, W) of them see key 0
        per_window.append(torch.stack([torch.stack([p0[i, :, :min(n, w or n)].mean(dim=-1) for i, w in
                                                    enumerate(sliding[:len(p0)])]) for n in used]))  # (len(used), L, H)
    return ContextSweep(used, skipped, torch.stack(per_window, dim=1), sliding)  # (len(used), n_windows, L, H)


ABSOLUTE_POSITION_EMBEDDINGS = ("wpe", "embed_positions", "position_embeddings")  # GPT-2 / OPT / BERT-style


def absolute_positions(lm: LoadedModel) -> bool:
    """Whether the model adds learned absolute position embeddings to its input (GPT-2's ``wpe``, OPT's
    ``embed_positions``): then position 0 can be told apart even when every token is the same, which is why Gu et
    al.'s GPT2-XL keeps a sink on a repeated token and the Llama/Mistral families (rotary positions only) do not."""
    return any(isinstance(m, torch.nn.Embedding) and name.rsplit(".", 1)[-1] in ABSOLUTE_POSITION_EMBEDDINGS
               for name, m in lm.model.named_modules())


# Gu et al.'s sink rate by input kind (the share of heads with alpha_0 > eps); over draws, the random-token rate's
# spread (:func:`llama_family_shape_pooled`: each seed's rate and the pooled rate's interval)
GU_SHAPE_QUANTITIES = {kind: q.share("fraction of heads") for kind in ("natural", "random", "repeated", "@spread")}


SHAPE_CUTS = {"natural": 0.3, "random": 0.3, "repeated": 0.05}  # Gu et al.'s shape: > 0.3, > 0.3, < 0.05


def llama_family_shape(measured: dict[str, float], reference: dict, eps: float = 0.3,
                       absolute: bool = False) -> Claim:
    """Gu et al. (arXiv 2410.10781, Table 1): Llama-family models sink on natural text and on random tokens, but not
    on one token repeated at every position. Rule: sink rate > 0.3 on natural and random input and < 0.05 on the
    repeated token. ``measured``: {"natural", "random", "repeated"} -> sink rate; ``reference``: the
    ``gu2024_sink_rates`` file.

    The paper states this shape for the Llama/Mistral families, whose positions are rotary only; a model with
    learned absolute position embeddings (``absolute``, :func:`absolute_positions`; Gu et al.'s GPT2-XL keeps
    62.28% on a repeated token) is outside it: its rates are recorded beside GPT2-XL's and the verdict is "cannot
    be judged here". Rotary decoders of other families (Qwen2, Gemma-3) are judged by it, as said in ``adapted``."""
    if absolute:
        gpt2 = reference["models"].get("GPT2-XL", {})
        return Claim(
            id="gu2024.llama_family_input_shape",
            statement="Llama-family models sink on natural text and random tokens, not on one token repeated",
            source=reference["source"], rule="not applied: the model has learned absolute position embeddings",
            published={"GPT2-XL": gpt2}, measured=dict(measured), quantities=GU_SHAPE_QUANTITIES, holds=None,
            note=f"outside the Llama/Mistral families the paper states this for (learned absolute positions); "
                 f"its own repeated-token rate {measured['repeated']:.1%} against GPT2-XL's "
                 f"{gpt2.get('repeated', float('nan')):.2%}",
            follows="Table 1, Sec. 3 (GPT2-XL: 62.28% on a repeated token; LLaMA2/3, Mistral: 0%)",
            adapted="judged only for models with rotary positions and no absolute position embedding",
            at_init=False)
    holds = (measured["natural"] > SHAPE_CUTS["natural"] and measured["random"] > SHAPE_CUTS["random"]
             and measured["repeated"] < SHAPE_CUTS["repeated"])
    return Claim(
        id="gu2024.llama_family_input_shape",
        statement="Llama-family models sink on natural text and random tokens, not on one token repeated",
        source=reference["source"],
        rule=f"sink rate (eps {eps}) > 30% on natural and random input and < 5% on a repeated token",
        published={m: reference["models"][m] for m in reference["llama_family"]},
        measured=dict(measured), quantities=GU_SHAPE_QUANTITIES, holds=bool(holds),
        follows="Table 1, Sec. 3 (alpha_k = sum_{t>=k} A[t, k] / (T - k + 1) for the first token k = 1; Sink^eps = "
                "share of heads with alpha_1 > eps; eps 0.3, T 64); sail-sg/Attention-Sink:eval_sink_open_source.py:compute_attention_sink",
        adapted="the paper reports rates per model; the cut-offs (> 30% on natural and random input, < 5% on a "
                "repeated token) are this project's reading of the Llama-family rows of Table 1; applied to every "
                "decoder with rotary positions and no absolute position embedding (Qwen2, Gemma-3 too), not to "
                "GPT-2-style models",
        at_init=False)  # Gu et al., Sec. 4: the sink emerges during pre-training once the model is optimised


# the pooled shape's spread: each seed's random-token rate and the pooled rate's interval (fractions of heads)
SHAPE_POOLED_QUANTITIES = {"@spread": q.share("fraction of heads")}


def shape_conditions(measured: Mapping[str, float], random: torch.Tensor, seed: int = 0) -> list[pooled.Condition]:
    """Gu et al.'s shape as three conditions: natural > 0.3 and repeated < 0.05 as measured once (no draws: read
    without an interval), random = mean_n r[n] over the pooled random-token sequences > 0.3 with its bootstrap
    interval over sequences. random: (N,) per-sequence sink rates (:attr:`SinkProfile.sink_rate_by_sequence`)."""
    natural, repeated = measured["natural"], measured["repeated"]
    return [pooled.Condition("natural", fixed=natural > SHAPE_CUTS["natural"],
                             label=f"natural-text rate {natural:.3g} > {SHAPE_CUTS['natural']:g}"),
            pooled.Condition("repeated", fixed=repeated < SHAPE_CUTS["repeated"],
                             label=f"repeated-token rate {repeated:.3g} < {SHAPE_CUTS['repeated']:g}"),
            pooled.Condition("random", SHAPE_CUTS["random"], pooled.mean_interval(random, seed),
                             label="random-token sink rate")]


def shape_rule(answers: Mapping[str, bool]) -> bool:
    """The shape's rule on its conditions' answers (:func:`shape_conditions`): all three hold."""
    return answers["natural"] and answers["random"] and answers["repeated"]


def llama_family_shape_pooled(measured: Mapping[str, float], random: Sequence[torch.Tensor], reference: dict,
                              seed: int, draws_of: str, per_draw: Sequence[Claim] | None = None,
                              eps: float = 0.3) -> Claim:
    """Gu et al.'s Llama-family shape (:func:`llama_family_shape`) on a pretrained model, the random-token rate
    judged on every seed's sequences pooled: a fixed model has no training noise, only the drawn sequences differ.
    rate = mean_n r[n] over the pooled N = sum_s N_s sequences (r[n]: the share of sequence n's heads with alpha_0 >
    eps); its 95 % bootstrap interval over sequences decides the random condition -- holds / fails when it is clear
    of 0.3, unsettled only when it straddles 0.3 and the other two hold (:func:`~sinklib.core.pooled.pooled_claim`).

    ``measured``: {"natural", "repeated"} -> sink rate, measured once (a "random" entry is replaced by the pooled
    rate); ``random``: per seed s its sequences' rates r, (N_s,) each; ``reference``: the ``gu2024_sink_rates`` file;
    ``seed``: the bootstrap's; ``draws_of``: what was redrawn, in words; ``per_draw``: each seed's own claim
    (default: :func:`llama_family_shape` on each seed's mean rate) -- its verdict in ``draws``, its rate in the
    spread."""
    pooled_rates = torch.cat([torch.as_tensor(r, dtype=torch.float64).flatten() for r in random])  # (N,)
    conditions = shape_conditions(measured, pooled_rates, seed)
    claim = llama_family_shape({**measured, "random": conditions[-1].interval.value}, reference, eps)
    if per_draw is None:
        per_draw = [llama_family_shape({**measured, "random": float(torch.as_tensor(r, dtype=torch.float64).mean())},
                                       reference, eps) for r in random]
    claim = replace(claim, quantities={**claim.quantities, **SHAPE_POOLED_QUANTITIES})
    return pooled.pooled_claim(claim, conditions, shape_rule, per_draw, [c.measured["random"] for c in per_draw],
                               draws_of, f"{len(pooled_rates)} random-token sequences", main="random", unit="sequences")
