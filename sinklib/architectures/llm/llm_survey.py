"""``10_llm``: the same measurements on several dense language models, one model at a time.

:func:`measure` loads nothing itself: it takes one loaded model and returns an :class:`LlmReport` with every number
the notebook compares (so on a GPU the models can be loaded and freed one by one); :func:`report_claims` turns a
report into its :class:`~sinklib.core.claims.Claim` records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from sinklib.architectures.llm import placement
from sinklib.core import analysis
from sinklib.core.claims import Claim
from sinklib.core.data import INPUT_KINDS, make_inputs, text_windows
from sinklib.core.errors import WrongFamilyError
from sinklib.core.loaded import LoadedModel
from sinklib.core.metrics import GU_EPS
from sinklib.interpretation import chain, intervention_effects, origin, origin_claims


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

    def as_dict(self) -> dict:
        out = asdict(self)
        out["massive"] = self.massive.as_dict()
        out.pop("chain")  # its claims are in claims.json
        return out


@torch.inference_mode()
def measure(lm: LoadedModel, *, num_seqs: int, seq_len: int, batch_size: int, placement_seqs: int,
            context_lengths: tuple[int, ...], context_windows: int, paper: dict, seed: int = 0,
            progress: bool = True) -> LlmReport:
    """Gu et al.'s protocol on three input kinds; Sun et al.'s criterion; where the mass sits by token kind (in the
    sink layers: those whose alpha_0, mean over heads, exceeds eps -- all layers if none does); position or token;
    raw vs chat template; alpha_0 against context length with the O(N) statistics; the structural-origin chain's
    first four links on ``placement_seqs`` windows (``paper``: the ``structural_origin`` reference)."""
    profiles = {kind: analysis.profile_sinks(lm, make_inputs(lm, kind, num_seqs, seq_len, seed), input_name=kind,
                                             batch_size=batch_size, progress=progress) for kind in INPUT_KINDS}
    natural = profiles["natural"]
    by_layer = [float(a) for a in natural.alpha_first_by_layer]
    sink_layers = [i for i, a in enumerate(by_layer) if a > GU_EPS] or list(range(lm.n_layers))
    ids = text_windows(lm.tokenizer, placement_seqs, seq_len, seed)
    mass = placement.key_mass(lm, ids, sink_layers, batch_size)
    raw_vs_chat = chat_top = None
    chat = placement.chat_windows(lm, ids)
    if chat is not None:
        raw_vs_chat = {fmt: analysis.profile_sinks(lm, x, input_name=fmt, batch_size=batch_size,
                                                   progress=False).sink_rate
                       for fmt, x in (("raw", ids), ("chat template", chat))}
        chat_mass = placement.key_mass(lm, chat, sink_layers, batch_size)  # where the sink went, if it moved
        chat_top = placement.secondary_sinks(chat_mass, chat, lm.tokenizer, first=0, top=4)
    sweep = analysis.first_token_mass_by_length(lm, list(context_lengths), seed, progress=progress,
                                                n_windows=context_windows)
    low, high = sweep.range_over_windows(sink_layers)
    massive = analysis.massive_dimensions(natural)
    links, numbers = origin_chain(lm, ids, massive.dims, analysis.first_layer_above(by_layer, GU_EPS), paper,
                                  seq_len, placement_seqs, seed, batch_size)
    return LlmReport(
        name=lm.name, label=lm.label, n_layers=lm.n_layers, adds_bos=lm.adds_bos,
        sink_rate={kind: p.sink_rate for kind, p in profiles.items()}, alpha_by_layer=by_layer,
        massive=massive,
        by_kind=placement.mass_by_kind(mass, placement.token_kinds(lm.tokenizer, ids)),
        secondary=placement.secondary_sinks(mass, ids, lm.tokenizer),
        position=placement.position_or_token(lm, ids, sink_layers, batch_size=batch_size), sink_layers=sink_layers,
        bos_stripped=intervention_effects.sink_follows_bos(
            intervention_effects.without_bos(lm, placement_seqs, seq_len, seed, batch_size), sink_layers)
        if lm.adds_bos else None,
        raw_vs_chat=raw_vs_chat, chat_top=chat_top,
        context={"lengths": sweep.lengths, "alpha_first": sweep.mean_over(sink_layers), "low": low, "high": high,
                 "skipped": sweep.skipped},
        chain=links, chain_numbers=numbers,
    )


def origin_chain(lm: LoadedModel, natural: torch.Tensor, massive_dims: list[int], sink_onset: int | None,
                 paper: dict, seq_len: int, num_seqs: int, seed: int, batch_size: int):
    """Links 1-4 of the structural-origin chain (:mod:`sinklib.interpretation.chain`) on one model: (claims,
    numbers), or (None, None) when the model has no gated MLP (the chain's super neuron lives in one)."""
    try:
        origin.require_gated_mlp(lm, "the structural-origin chain")
    except WrongFamilyError:
        return None, None
    random_ids = make_inputs(lm, "random", num_seqs, seq_len, seed, bos=False)  # position 0 must vary too
    variance = chain.variance_link(lm, random_ids)
    neuron = chain.super_neuron_link(lm, natural, massive_dims, paper, batch_size)
    disparity = chain.disparity_link(lm, natural, massive_dims, neuron.top, sink_onset, paper, batch_size)
    lock = chain.lock_link(lm, natural)
    numbers = {"variance_ratio_t0": variance.ratio_t0[0],
               "super_neuron": None if neuron.top is None else
               {"layer": neuron.top.layer, "neuron": neuron.top.neuron, "write_dims": neuron.top.write_dims},
               "massive_onset": disparity.onset, "sink_onset": sink_onset,
               "dom_after_super": disparity.dom_after_super,
               "positive_sink_vs_other": lock.sink_vs_other["positive_fraction"]}
    return [variance.claim, neuron.claim, disparity.claim, lock.claim], numbers


def report_claims(report: LlmReport, gu: dict) -> list[Claim]:
    """One model's records: Gu et al.'s Llama-family input shape, Sun et al.'s criterion, the first delimiter,
    position or token. Ids end in the model name, so one notebook can hold every model's."""
    shape = analysis.llama_family_shape(report.sink_rate, gu)
    sun = origin_claims.massive_by_sun(report.massive)
    own = [Claim(**{**asdict(c), "id": f"{c.id}.{report.name}"}) for c in [shape, sun, *(report.chain or [])]]
    return own[:2] + [placement.delimiter_claim(report.by_kind, report.name),
                      placement.position_claim(report.position, report.name)] + own[2:]
