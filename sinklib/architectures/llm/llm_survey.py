"""``10_llm``: the same measurements on several dense language models, one model at a time.

:func:`measure` loads nothing itself: it takes one loaded model and returns an :class:`LlmReport` with every number
the notebook compares (so on a GPU the models can be loaded and freed one by one); :func:`report_claims` turns a
report into its :class:`~sinklib.core.claims.Claim` records, judged on all the report's draws pooled with a bootstrap
interval (random-token sequences for Gu et al.'s shape; Bible windows for the first delimiter and position-or-token;
:mod:`sinklib.core.pooled`), each draw's verdict kept beside; :func:`control_claims` runs the same rules
on randomly initialised weights of the model's own configuration (the negative control).
"""

from __future__ import annotations

import copy
import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import torch

from sinklib.architectures.llm import first_key_rates, placement
from sinklib.architectures.llm.survey_chain import CHAIN_DRAWS, massive_sites, origin_chain  # noqa: F401 (re-export)
from sinklib.architectures.llm.xiao_position import xiao_control, xiao_position_test
from sinklib.core import analysis, gu_claims
from sinklib.core.attnstats import AttentionStats
from sinklib.core.claims import Claim, over_draws
from sinklib.core.data import INPUT_KINDS, make_inputs, text_windows
from sinklib.core.loaded import LoadedModel
from sinklib.core.metrics import GU_EPS
from sinklib.core.takeaways import windows
from sinklib.interpretation import intervention_effects, massive_claims, secondary_sinks
from sinklib.interpretation.sun_sites import SunSites, sun_sites
from sinklib.models.random_init import random_weights


@dataclass
class LlmReport:
    """Everything ``10_llm`` shows about one model. Layers: L; depth of layer l = l / (L - 1)."""

    name: str
    label: str
    n_layers: int
    adds_bos: bool
    sink_rate: dict[str, float]  # input kind -> Gu et al.'s sink rate (eps 0.3, first token)
    alpha_by_layer: list[float]  # natural text: alpha_0 per layer, mean over heads and sequences
    massive: analysis.MassiveDims
    sun_sites: SunSites | None  # where Sun et al.'s criterion holds, layer by layer, on the natural windows
    by_kind: dict[str, float]  # token kind -> mean sink mass m_j (sink layers)
    secondary: list[tuple[str, int, float]]  # tokens beyond position 0 drawing the most attention
    position: placement.PositionOrToken
    bos_stripped: dict | None  # models that add a BOS: alpha_0 with and without it (intervention_effects.without_bos)
    sink_layers: list[int]
    raw_vs_chat: dict[str, float] | None  # sink rate on raw windows and the same text in the chat template
    chat_top: list[tuple[str, int, float]] | None  # in the chat template: the tokens drawing the most attention
    context: dict[str, list]  # lengths, alpha_0 (sink layers) per length, (low, high) over windows
    chain: list[Claim] | None  # the structural-origin chain's first four links; None: no gated MLP (GPT-2, OPT)
    chain_numbers: dict | None  # what each link measured, for the table
    draws: dict = field(default_factory=dict)  # per draw: seeds, random-token sink rate (and per sequence, (N,)),
    #                                            by_kind and kind_sums ((N, K) each), position (with its (N, 4) alphas)
    seconds: dict = field(default_factory=dict)  # what the draws cost
    absolute_positions: bool = False  # learned absolute position embeddings (GPT-2-style): outside Gu's Llama shape
    eps_curve: dict[str, list[float]] = field(default_factory=dict)  # natural text: {"eps": [...], "rate": [...]}
    xiao: dict[str, float] | None = None  # Xiao et al.'s streaming position test (xiao_position), if run
    mid_sequence: dict | None = None  # mid-sequence sinks on the longest windows (secondary_sinks), if run

    def as_dict(self) -> dict:
        out = asdict(self)
        out["massive"] = self.massive.as_dict()
        out["sun_sites"] = None if self.sun_sites is None else self.sun_sites.as_dict()
        out.pop("chain")  # its claims are in claims.json
        return out


MID_COS_CUT = secondary_sinks.COS_CUT  # the authors' |cos(h_j, h_bos)| cut, for 10_llm's section 7

EPS_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05 .. 0.95: Gu et al.'s sink rate against eps


def sink_rate_by_eps(alphas: torch.Tensor, grid: tuple[float, ...] = EPS_GRID) -> dict[str, list[float]]:
    """Gu et al.'s sink rate at each threshold of ``grid``: the share of (sequence, layer, head) with alpha_0 > eps.
    alphas: (N, L, H) alpha_0 per sequence, layer and head (``SinkProfile.alphas``)."""
    return {"eps": list(grid), "rate": [float((alphas > e).float().mean()) for e in grid]}


@torch.inference_mode()
def measure(lm: LoadedModel, *, num_seqs: int, seq_len: int, batch_size: int, placement_seqs: int,
            context_lengths: tuple[int, ...], context_windows: int, paper: dict, seed: int = 0,
            draw_seqs: int = 0, progress: bool = True, n_draws: int = CHAIN_DRAWS,
            chat_template: bool = True) -> LlmReport:
    """Gu et al.'s protocol on three input kinds; Sun et al.'s criterion; where the mass sits by token kind (in the
    sink layers: those whose alpha_0, mean over heads, exceeds eps -- all layers if none does); position or token;
    raw vs chat template; alpha_0 against context length with the O(N) statistics; the structural-origin chain's
    first four links and Sun et al.'s bias test on ``placement_seqs`` windows (``paper``: the ``structural_origin``
    reference). ``draw_seqs`` > 0: two more draws (seeds seed+1, seed+2) of ``draw_seqs`` random-token sequences and
    ``placement_seqs`` Bible windows each -- the window draws the same size as the run's own (:func:`extra_draws`) --
    and the chain judged over three equal-sized draws of windows
    (:func:`~sinklib.architectures.llm.survey_chain.origin_chain`). ``chat_template`` False: raw vs chat template
    is not measured (``raw_vs_chat`` None, as for a model without a template).

    The ``placement_seqs`` windows are the first natural sequences (the same sampler and seed), so their mass per
    key, their raw sink rate and their alpha_0 with a BOS are read off the natural profile's own forwards
    (:func:`profile_with_mass`) instead of running them again; of random and repeated tokens only the sink rate is
    read (:func:`first_key_rates.sink_rate`)."""
    natural_ids = make_inputs(lm, "natural", num_seqs, seq_len, seed)
    natural, natural_mass = profile_with_mass(lm, natural_ids, batch_size, progress)
    random_rates = random_by_sequence(lm, num_seqs, seq_len, seed, batch_size, progress)  # (N,)
    rates = sink_rates(lm, natural, num_seqs, seq_len, seed, batch_size, progress, random=random_rates)
    by_layer = [float(a) for a in natural.alpha_first_by_layer]
    sink_layers = [i for i, a in enumerate(by_layer) if a > GU_EPS] or list(range(lm.n_layers))
    ids = text_windows(lm.tokenizer, placement_seqs, seq_len, seed)
    ids_mass = rows_of(ids, natural_ids, natural_mass)  # (N, L, H, T), or None: run them
    if ids_mass is None:
        ids_mass = placement.layer_mass(lm, ids, batch_size)
    mass = placement.over_layers(ids_mass, sink_layers)
    sums = placement.kind_sums(mass, placement.token_kinds(lm.tokenizer, ids))  # (N, K) each
    by_kind = placement.by_kind_of(*sums)
    position = placement.position_or_token(lm, ids, sink_layers, batch_size=batch_size, mass=mass)
    start = time.perf_counter()
    draws = {"seeds": [seed], "random": [rates["random"]], "random_by_sequence": [random_rates], "by_kind": [by_kind],
             "kind_sums": [sums], "position": [position],
             "sizes": {"random tokens": [num_seqs], "Bible windows": [placement_seqs]}}
    if draw_seqs:
        draws = extra_draws(lm, draws, seq_len, draw_seqs, placement_seqs, sink_layers, batch_size, n_draws)
    seconds = {"draws": time.perf_counter() - start}
    raw_vs_chat = chat_top = None
    chat = first_key_rates.chat_windows(lm, ids) if chat_template else None
    if chat is not None:
        # the same content tokens, raw and in the template; alpha_0 over the queries of content tokens 2..C in both
        c = chat.n_content
        raw_rate, _ = first_key_rates.first_key_rate(lm, chat.raw, slice(chat.raw_start + 1, chat.raw_start + c),
                                                     batch_size)
        chat_rate, _ = first_key_rates.first_key_rate(lm, chat.chat,
                                                      slice(chat.chat_start + 1, chat.chat_start + c), batch_size)
        raw_vs_chat = {"raw": raw_rate, "chat template": chat_rate}
        chat_mass = placement.layer_mass(lm, chat.chat, batch_size)  # where the attention went in the template
        chat_top = placement.secondary_sinks(placement.over_layers(chat_mass, sink_layers), chat.chat, lm.tokenizer,
                                             first=0, top=4)
    sweep = analysis.first_token_mass_by_length(lm, list(context_lengths), seed, progress=progress,
                                                n_windows=context_windows)
    low, high = sweep.range_over_windows(sink_layers)
    massive = analysis.massive_dimensions(natural)
    sites = sun_sites(lm, natural_ids, batch_size)  # the same windows as the criterion: is it "a few"?
    start = time.perf_counter()
    links, numbers = origin_chain(lm, ids, massive.dims, analysis.first_layer_above(by_layer, GU_EPS), paper, seed,
                                  batch_size, massive.min_ratio, sites, n_draws if draw_seqs else 1)
    seconds["chain"] = time.perf_counter() - start
    return LlmReport(
        name=lm.name, label=lm.label, n_layers=lm.n_layers, adds_bos=lm.adds_bos,
        sink_rate=rates, alpha_by_layer=by_layer,
        massive=massive, sun_sites=sites, by_kind=by_kind, secondary=placement.secondary_sinks(mass, ids, lm.tokenizer),
        position=position, sink_layers=sink_layers,
        bos_stripped=intervention_effects.sink_follows_bos(
            bos_stripped(lm, ids_mass[..., 0], placement_seqs, seq_len, seed, batch_size), sink_layers)
        if lm.adds_bos else None,
        raw_vs_chat=raw_vs_chat, chat_top=chat_top,
        context={"lengths": sweep.lengths, "alpha_first": sweep.mean_over(sink_layers), "low": low, "high": high,
                 "skipped": sweep.skipped, "uniform": [sweep.uniform_over(n, sink_layers) for n in sweep.lengths],
                 "sliding_layers": sweep.sliding_layers,
                 "window": next((w for w in sweep.windows if w), None)},
        chain=links, chain_numbers=numbers, draws=draws, seconds=seconds,
        absolute_positions=analysis.absolute_positions(lm), eps_curve=sink_rate_by_eps(natural.alphas),
    )


def profile_with_mass(lm: LoadedModel, ids: torch.Tensor, batch_size: int, progress: bool = False
                      ) -> tuple[analysis.SinkProfile, torch.Tensor]:
    """:func:`sinklib.core.analysis.profile_sinks` of natural ``ids`` (N, T) and, from the same forwards, m_j per
    sequence, layer, head and key (N, L, H, T) -- what :func:`placement.layer_mass` would measure with forwards of
    its own. An outer :class:`~sinklib.core.attnstats.AttentionStats` around the profile: the switches nest, the
    profile's statistics reduce the layer's probabilities and hand the output to the outer one, which reduces the
    same probabilities and computes the output (one more reduction per layer, no more forward)."""
    with AttentionStats(lm) as outer:
        profile = analysis.profile_sinks(lm, ids, input_name="natural", batch_size=batch_size, progress=progress)
    return profile, placement.stacked_mass(outer, lm.n_layers)


def sink_rates(lm: LoadedModel, natural: analysis.SinkProfile, num_seqs: int, seq_len: int, seed: int,
               batch_size: int, progress: bool = False, random: torch.Tensor | None = None) -> dict[str, float]:
    """Input kind -> Gu et al.'s sink rate (:data:`INPUT_KINDS` in order): natural text from its profile, random and
    repeated tokens (``num_seqs`` x ``seq_len``, ``seed``) from their attention alone
    (:func:`first_key_rates.sink_rate`).
    ``random``: the random tokens' rate per sequence (:func:`random_by_sequence`) when already measured; their mean."""
    def rate(kind: str) -> float:
        if kind == "natural":
            return natural.sink_rate
        if kind == "random" and random is not None:
            return float(random.mean())
        return first_key_rates.sink_rate(lm, make_inputs(lm, kind, num_seqs, seq_len, seed), batch_size,
                                         progress=f"{lm.name} / {kind}" if progress else None)
    return {kind: rate(kind) for kind in INPUT_KINDS}


def random_by_sequence(lm: LoadedModel, num_seqs: int, seq_len: int, seed: int, batch_size: int,
                       progress: bool = False) -> torch.Tensor:
    """Gu et al.'s sink rate of each of ``num_seqs`` random-token sequences of ``seed`` (N,)
    (:func:`first_key_rates.sink_rate_by_sequence`): their mean is the random-token rate, and the draws' sequences
    pool."""
    return first_key_rates.sink_rate_by_sequence(lm, make_inputs(lm, "random", num_seqs, seq_len, seed), batch_size,
                                                 progress=f"{lm.name} / random" if progress else None)


def rows_of(ids: torch.Tensor, measured: torch.Tensor, values: torch.Tensor) -> torch.Tensor | None:
    """``values`` of ``ids`` (N, T) when they are the first N rows of the ``measured`` inputs (the samplers draw a
    seed's windows in order, so 16 windows of a seed are the first 16 of 32): ``values[:N]``; else None."""
    n = len(ids)
    return values[:n] if n <= len(measured) and torch.equal(ids, measured[:n]) else None


def bos_stripped(lm: LoadedModel, alphas_with_bos: torch.Tensor, num_seqs: int, seq_len: int, seed: int,
                 batch_size: int) -> dict:
    """:func:`sinklib.interpretation.intervention_effects.without_bos` for a model that adds a BOS, with its "with
    BOS" windows already measured: ``alphas_with_bos`` (N, L, H), alpha_0 of ``text_windows(..., seed)`` (the
    natural profile's first windows); one profile of the same windows without the BOS gives the rest. Returns the
    entries :func:`~sinklib.interpretation.intervention_effects.sink_follows_bos` reads: alpha_0 per layer with and
    without the BOS, and where the largest activation sits per layer without it."""
    ids = text_windows(lm.tokenizer, num_seqs, seq_len, seed, add_special_tokens=False)
    prof = analysis.profile_sinks(lm, ids, input_name="without_bos", batch_size=batch_size, progress=False)
    return {"with_bos": {"alpha_first_by_layer": alphas_with_bos.mean(dim=(0, 2)).tolist()},
            "without_bos": {"alpha_first_by_layer": prof.alpha_first_by_layer,
                            "largest": [{"position": e.position, "dim": e.dim, "value": e.value,
                                         "token": lm.tokenizer.decode([int(ids[e.seq, e.position])])}
                                        for e in prof.extremes]}}


def extra_draws(lm: LoadedModel, draws: dict, seq_len: int, num_seqs: int, num_windows: int, sink_layers: list[int],
                batch_size: int, n: int = 3) -> dict:
    """``draws`` (the run's own draw first) extended to ``n`` draws: for seeds seed+1, ... , ``num_seqs`` random-token
    sequences (Gu et al.'s sink rate, and per sequence for the pooled verdict) and ``num_windows`` Bible windows
    (mass by token kind, position or token with its per-window alphas, on the run's sink layers). Two batches of
    forwards per window draw (the windows; the replaced and moved ones stacked), one per random-token draw."""
    out = {k: list(v) for k, v in draws.items() if k != "sizes"}
    sizes = {k: list(v) for k, v in draws.get("sizes", {}).items()}
    out.setdefault("random_by_sequence", [])
    for seed in range(draws["seeds"][0] + 1, draws["seeds"][0] + n):
        per_sequence = random_by_sequence(lm, num_seqs, seq_len, seed, batch_size)  # (num_seqs,)
        out["random_by_sequence"].append(per_sequence)
        out["random"].append(float(per_sequence.mean()))
        ids = text_windows(lm.tokenizer, num_windows, seq_len, seed)
        mass = placement.key_mass(lm, ids, sink_layers, batch_size)
        sums = placement.kind_sums(mass, placement.token_kinds(lm.tokenizer, ids))
        out["kind_sums"].append(sums)
        out["by_kind"].append(placement.by_kind_of(*sums))
        out["position"].append(placement.position_or_token(lm, ids, sink_layers, batch_size=batch_size, mass=mass))
        out["seeds"].append(seed)
        sizes.setdefault("random tokens", []).append(num_seqs)
        sizes.setdefault("Bible windows", []).append(num_windows)
    return out | {"sizes": sizes}


def draws_of(report: LlmReport, what: str) -> str:
    """What was redrawn, in words (no semicolons: the verdict's prose cuts a note there):
    "3 seeds of random tokens (seeds 0, 1, 2 with 32, 8, 8 sequences)"."""
    seeds = report.draws.get("seeds", [])
    if len(seeds) < 2:
        return "one evaluation"
    sizes = report.draws.get("sizes", {}).get(what, [])
    return (f"{len(seeds)} seeds of {what} (seeds {', '.join(map(str, seeds))}"
            + (f" with {', '.join(map(str, sizes))} sequences)" if sizes else ")"))


def shape_over_draws(report: LlmReport, gu: dict) -> Claim:
    """Gu et al.'s Llama-family shape (:func:`sinklib.core.gu_claims.llama_family_shape`) judged on each seed of
    random tokens, natural and repeated input as measured once (windows and one repeated token)."""
    rates = report.draws.get("random") or [report.sink_rate["random"]]
    absolute = getattr(report, "absolute_positions", False)
    claims = [gu_claims.llama_family_shape({**report.sink_rate, "random": r}, gu, absolute=absolute)
              for r in rates]
    return over_draws(claims, draws_of(report, "random tokens"), key=lambda c: c.measured["random"])


def shape_pooled(report: LlmReport, gu: dict) -> Claim:
    """Gu et al.'s Llama-family shape on a pretrained model, the random-token rate judged on every seed's sequences
    pooled with a bootstrap interval over sequences (:func:`sinklib.core.gu_claims.llama_family_shape_pooled`: rate =
    mean_n r[n] over the pooled sequences, r[n] the share of sequence n's heads with alpha_0 > eps; unsettled only
    when its interval straddles 0.3); natural text and the repeated token are measured once. Each seed's own verdict
    stays in ``draws``, its rate in the spread. Without per-sequence rates (an older report), or for a model outside
    the Llama shape (learned absolute positions), as :func:`shape_over_draws`."""
    per_seq = report.draws.get("random_by_sequence")
    if not per_seq or getattr(report, "absolute_positions", False):
        return shape_over_draws(report, gu)
    return gu_claims.llama_family_shape_pooled(report.sink_rate, per_seq, gu, report.draws["seeds"][0],
                                              draws_of(report, "random tokens"))


def _named(claim: Claim, name: str) -> Claim:
    return replace(claim, id=f"{claim.id}.{name}")


def report_claims(report: LlmReport, gu: dict) -> list[Claim]:
    """One model's records: Gu et al.'s Llama-family input shape, Sun et al.'s criterion, the first delimiter,
    position or token, the chain's links. Where the report has draws, the shape, the first delimiter and position or
    token are judged on every draw's sequences / windows pooled with a bootstrap interval
    (:mod:`sinklib.core.pooled`: a pretrained model has no training noise), each draw's verdict kept beside; the chain's links as
    :func:`~sinklib.architectures.llm.survey_chain.origin_chain` judged them. Ids end in the model name, so one
    notebook can hold every model's."""
    windows = draws_of(report, "Bible windows")
    by_kinds = report.draws.get("by_kind") or [report.by_kind]
    positions = report.draws.get("position") or [report.position]
    seed = (report.draws.get("seeds") or [0])[0]
    return [_named(shape_pooled(report, gu), report.name),
            _named(massive_claims.massive_by_sun(report.massive, report.sun_sites), report.name),
            (placement.delimiter_pooled(report.draws["kind_sums"], report.name, windows, seed)
             if report.draws.get("kind_sums") else placement.delimiter_over_draws(by_kinds, report.name, windows)),
            placement.position_pooled(positions, report.name, windows, seed),
            *[_named(c, report.name) for c in report.chain or []]]


@torch.inference_mode()
def control_claims(lm: LoadedModel, name: str, *, num_seqs: int, seq_len: int, batch_size: int, paper: dict,
                   gu: dict, seed: int = 0) -> dict[str, Claim]:
    """The negative control: every rule of :func:`report_claims` once more on ``lm`` -- randomly initialised
    weights of the model's configuration (:func:`sinklib.models.random_init.random_weights`) -- with ``num_seqs``
    sequences per input, one draw. Sink layers are the control's own (all layers when none passes eps). Returns
    claim id (ending in ``name``, the trained model's) -> claim, for ``Recorder.add(..., control=...)``."""
    natural_ids = make_inputs(lm, "natural", num_seqs, seq_len, seed)
    natural, natural_mass = profile_with_mass(lm, natural_ids, batch_size)
    rates = sink_rates(lm, natural, num_seqs, seq_len, seed, batch_size)
    by_layer = [float(a) for a in natural.alpha_first_by_layer]
    sink_layers = [i for i, a in enumerate(by_layer) if a > GU_EPS] or list(range(lm.n_layers))
    ids = text_windows(lm.tokenizer, num_seqs, seq_len, seed)
    ids_mass = rows_of(ids, natural_ids, natural_mass)
    mass = placement.over_layers(placement.layer_mass(lm, ids, batch_size) if ids_mass is None else ids_mass,
                                 sink_layers)
    massive = analysis.massive_dimensions(natural)
    sites = sun_sites(lm, natural_ids, batch_size)
    links, _ = origin_chain(lm, ids, massive.dims, analysis.first_layer_above(by_layer, GU_EPS), paper, seed,
                            batch_size, massive.min_ratio, sites)
    claims = [_named(gu_claims.llama_family_shape(rates, gu, absolute=analysis.absolute_positions(lm)), name),
              _named(massive_claims.massive_by_sun(massive, sites), name),
              placement.delimiter_claim(placement.mass_by_kind(mass, placement.token_kinds(lm.tokenizer, ids)), name),
              placement.position_claim(placement.position_or_token(lm, ids, sink_layers, batch_size=batch_size,
                                                                   mass=mass), name),
              *[_named(c, name) for c in links or []]]
    return {c.id: c for c in claims}


def measure_and_judge(load: Callable[[], LoadedModel], run, *, gu: dict, paper: dict, streaming: dict,
                      control: bool = True) -> tuple[LlmReport, list[tuple[Claim, dict]], dict[str, float]]:
    """One model of ``10_llm`` measured and judged: its :func:`measure` report (``run``: the profile's sizes), Xiao et
    al.'s streaming test where the profile streams, and every claim with its random-weight control
    (:func:`control_claims`, :func:`xiao_control`), as (claim, ``Recorder.add``'s keywords); and the seconds the
    draws, the chain and the control took. ``load()`` gives the model; it is freed before the control is built, so
    one model is in memory at a time. ``control`` False: no random-weight control (the claims come without one: for
    a second measurement whose records are not kept, as the scale rung's smaller model already measured above)."""
    lm = load()
    report = measure(lm, num_seqs=run.num_seqs, seq_len=run.seq_len, batch_size=run.batch_size,
                     placement_seqs=run.placement_seqs, context_lengths=run.context_lengths,
                     context_windows=run.context_windows, paper=paper, seed=run.seed, draw_seqs=run.draw_seqs,
                     n_draws=run.draws, chat_template=getattr(run, "chat_template", True))
    stream = (run.stream_tokens, run.stream_budget, run.stream_chunk, streaming, run.seed)
    if run.stream_tokens:  # Xiao et al.'s own position test (Table 1): the first 4 tokens replaced by line breaks
        report.xiao, xiao_claim = xiao_position_test(lm, *stream)
    mid_windows = mid_sequence_windows(lm, run)
    if mid_windows is not None:  # Wong et al.'s secondary sinks on the longest windows the notebook reads
        report.mid_sequence = {"tokens": mid_windows.shape[1],
                               "windows": secondary_sinks.measure(lm, mid_windows)}
    mid_claim = None if mid_windows is None else secondary_sinks.alignment_over_windows(
        report.mid_sequence["windows"], report.name, windows(len(mid_windows), "Bible windows", mid_windows.shape[1]))
    xiao_named = _named(xiao_claim, report.name) if run.stream_tokens else None
    seconds = {"draws": round(report.seconds["draws"], 1), "chain": round(report.seconds["chain"], 1), "control": 0.0}
    if not control:
        claims = [c for c in (xiao_named, mid_claim) if c is not None] + report_claims(report, gu)
        return report, [(c, {}) for c in claims], seconds
    start = time.perf_counter()
    # the control needs only the class and configuration: an empty (meta) shell of them stands in for the model, and
    # the trained weights are released here unless the caller keeps them (a 1.5B is 7 GB in float32), so one model's
    # weights are in memory at a time; the caller's model is left untouched
    with torch.device("meta"):
        shell = type(lm.model)._from_config(copy.deepcopy(lm.model.config))
    shell.config = copy.deepcopy(lm.model.config)  # exactly the loaded model's configuration
    skeleton = replace(lm, model=shell)
    del lm
    gc.collect()
    control_lm = random_weights(skeleton, seed=run.seed)  # the negative control: same configuration, no training
    judged = [(xiao_named, {"control": xiao_control(control_lm, report.name, *stream)})] if xiao_named else []
    if mid_claim is not None:  # the control reads the first window
        report.mid_sequence["control"] = secondary_sinks.measure(control_lm, mid_windows[:1])
        judged.append((mid_claim, secondary_sinks.control_of(report.mid_sequence["control"][0], report.name)))
    controls = control_claims(control_lm, report.name, num_seqs=run.control_seqs, seq_len=run.seq_len,
                              batch_size=run.batch_size, paper=paper, gu=gu, seed=run.seed)
    del control_lm
    gc.collect()
    seconds["control"] = round(time.perf_counter() - start, 1)
    unrun = "no random-weight control here: 02_interpretation runs this rule's control on SmolLM2's configuration"
    judged += [(claim, {"control": controls.get(claim.id), "control_note": "" if claim.id in controls else unrun})
               for claim in report_claims(report, gu)]
    return report, judged, seconds


def mid_sequence_seen(report: LlmReport, part: str = "windows") -> dict:
    """What the mid-sequence search found on ``report``'s windows (``part`` "control": on random weights), together
    (:func:`secondary_sinks.over_windows`: the keys found, the strongest other key, the detection's counts);
    ``strongest`` is None where it did not run."""
    return secondary_sinks.over_windows((report.mid_sequence or {}).get(part) or [])


def mid_sequence_windows(lm: LoadedModel, run) -> torch.Tensor | None:
    """The windows the mid-sequence search reads, (``run.mid_windows``, T): Bible windows of the longest context
    length the notebook sweeps (capped at the model's positions; seed ``run.seed``, so the first is the context
    sweep's own passage). None when the profile runs no mid-sequence search."""
    from sinklib.core.memory import check_fits, max_length

    if not getattr(run, "mid_windows", 0):
        return None
    length = min(max(run.context_lengths), max_length(lm) or max(run.context_lengths))
    check_fits(lm, 1, length)
    return text_windows(lm.tokenizer, run.mid_windows, length, run.seed)


def pooled_interval(claim: Claim | None, name: str) -> tuple[float, float] | None:
    """The 95 % bootstrap interval of condition ``name`` of a claim judged on pooled windows
    (:func:`~sinklib.core.pooled.pooled_claim`), or None (no claim, not pooled, or no finite interval)."""
    spread = claim.spread if claim is not None and isinstance(claim.spread, dict) else {}
    b = (spread.get("intervals") or {}).get(name)
    return (float(b[0]), float(b[1])) if b and len(b) == 2 and b[0] is not None and b[0] == b[0] else None


def uniform_share(n: int) -> float:
    """alpha_0 if every query t spread its attention evenly over its t + 1 keys: (1/N) sum_t 1/(t+1) = H_N / N."""
    return sum(1 / k for k in range(1, n + 1)) / n
