"""One-call analyses that combine capture and metrics over a batch of sequences (used by the CLI and notebooks)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from sinklib.core import metrics
from sinklib.core.attnstats import AttentionStats
from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel
from sinklib.core.memory import check_fits, check_length, fit_batch
from sinklib.core.profile_checks import LayerProgress, check_batch_size, check_eps, check_profile_ids


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
        :attr:`sink_rate`, and draws' sequences pool (:func:`sinklib.core.gu_claims.llama_family_shape_pooled`)."""
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
    Ids outside the vocabulary and layers outside the model are refused in one line; ``-1`` is the last layer.
    """
    from sinklib.core.data import as_token_ids
    from sinklib.core.profile_checks import check_layers

    ids = as_token_ids(input_ids, lm.vocab_size, "attention_maps").reshape(1, -1).to(lm.device)
    layers = check_layers(lm, layers, "attention_maps")
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
    from sinklib.core.profile_checks import check_lengths

    lengths = check_lengths(lengths, "first_token_mass_by_length")
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


# judged by :func:`sinklib.core.gu_claims.llama_family_shape`
SHAPE_CUTS = {"natural": 0.3, "random": 0.3, "repeated": 0.05}  # Gu et al.'s shape: > 0.3, > 0.3, < 0.05
