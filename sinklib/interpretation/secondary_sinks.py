"""Secondary attention sinks (Wong et al., arXiv 2512.22213): tokens after the first whose hidden state turns to point
along the first (BOS) sink's for a run of middle layers, and draw attention while it does.

The authors' detection (JeffreyWong20/Secondary-Attention-Sinks, src/hidden_state_base.py:
``hidden_state_norm_detection`` and ``sink_labeling_machine``), transcribed on one sequence's block outputs
h^(l) (the embeddings left out, as their ``hidden_states[1:]``):

1. the BOS sink is the candidate position (0 or 1; 0-2 under a chat template) whose |h^(l)| averaged over the layers
   is largest (:func:`bos_position`);
2. only the layers where the BOS sink is "on" are read: with d_l = |h_bos^(l+1)| - |h_bos^(l)|, start = argmax_l d_l
   + 1 and end = start + argmin_{l >= start} d_l + 1, layers start .. end - 1 (:func:`clipped_layers`);
3. in each of those layers every later position j with |cos(h_j^(l), h_bos^(l))| > 0.9 is a candidate there
   (:func:`candidate_layers`);
4. a candidate's lifetime is its number of such layers: a **secondary** sink when 4 < lifetime < L - 15, a BOS-like
   sink when lifetime >= L - 15, noise otherwise (:func:`kind_of`; L = the model's layers; the 15 and the 4 are the
   authors', for their 28-48-layer models -- a model of 19 layers or fewer can have no secondary sink under them).

The attention a found sink draws is read from the every-key mass m_j the statistics already compute
(:func:`mass_in_lifetime`): its m_j over its own layers beside the BOS sink's and the median key's in those layers.

The converse search starts from attention (:func:`mass_candidates`): keys j >= 1 with m_j > 0.3 (Gu et al.'s eps)
in some layer; :func:`measure_window` runs both on one long window (one forward: the O(N) statistics for every key
and the block outputs), and :func:`alignment_claim` judges the authors' finding that such keys point along the
first token's state -- against how well an ordinary key of the same layers does, since a model whose states share
one direction (Gemma-3) passes |cos| > 0.9 almost everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sinklib.core import quantities as q
from sinklib.core.claims import Claim, over_draws
from sinklib.core.loaded import LoadedModel
from sinklib.core.metrics import GU_EPS

FOLLOWS = ("arXiv 2512.22213, Sec. 3; JeffreyWong20/Secondary-Attention-Sinks:src/hidden_state_base.py:"
           "hidden_state_norm_detection, sink_labeling_machine")
COS_CUT = 0.9  # |cos(h_j, h_bos)| above which position j counts as a sink in that layer (the authors')
BOS_MARGIN = 15  # lifetime >= L - 15: a BOS-like sink (the authors')
MIN_LIFETIME = 4  # lifetime <= 4: noise (the authors')
SKIP_LAST = 8  # the last keys are seen by few queries: their m_j is large by construction (placement.kind_sums)
TYPICAL_QUANTILE = 0.9  # an ordinary key's alignment: this quantile of |cos(h_i, h_bos)| over the other keys
PAPER = "Wong et al., On the Existence and Behaviour of Secondary Attention Sinks, arXiv 2512.22213"


def adapted_margin(n_layers: int) -> int:
    """The BOS-like margin used here: lifetime >= ceil(L / 2) is BOS-like, i.e. a margin of L - ceil(L / 2). The
    authors' fixed 15 was set for 28-48 layers and equals ceil(L / 2) at L = 30; under it a model of 19 layers or
    fewer could have no secondary sink at all (:func:`kind_of`)."""
    return n_layers - math.ceil(n_layers / 2)


def bos_position(hidden: torch.Tensor, candidates: tuple[int, ...] = (0, 1)) -> int:
    """The BOS sink among ``candidates``: the position whose hidden-state norm, averaged over the layers, is largest.
    hidden (L, T, d): one sequence's block outputs."""
    norms = hidden[:, list(candidates)].float().norm(dim=-1).mean(dim=0)  # (len(candidates),)
    return candidates[int(norms.argmax())]


def clipped_layers(bos_norm: torch.Tensor) -> range:
    """The layers where the BOS sink is on, from its norm per layer (L,): d_l = norm[l+1] - norm[l]; start =
    argmax d + 1; end = start + argmin d[start:] + 1 (its largest jump up, then its largest drop after it). When the
    largest jump is into the last layer (nothing after it to drop) the range runs to the last layer."""
    diff = bos_norm[1:] - bos_norm[:-1]  # (L - 1,)
    start = int(diff.argmax()) + 1
    if start >= len(diff):
        return range(start, len(bos_norm))
    return range(start, int(diff[start:].argmin()) + start + 1)


def candidate_layers(hidden: torch.Tensor, bos: int, layers: range, cut: float = COS_CUT) -> dict[int, list[int]]:
    """Position -> the layers of ``layers`` where |cos(h_j, h_bos)| > ``cut``, for every position j > ``bos``.
    hidden (L, T, d)."""
    found: dict[int, list[int]] = {}
    for layer in layers:
        h = hidden[layer].float()  # (T, d)
        cos = torch.nn.functional.cosine_similarity(h[bos + 1:], h[bos][None], dim=-1)  # (T - bos - 1,)
        for j in (cos.abs() > cut).nonzero().flatten().tolist():
            found.setdefault(bos + 1 + j, []).append(layer)
    return found


def kind_of(lifetime: int, n_layers: int, bos_margin: int = BOS_MARGIN, min_lifetime: int = MIN_LIFETIME) -> str:
    """"secondary" when ``min_lifetime`` < lifetime < L - ``bos_margin``; "bos" when lifetime >= L - ``bos_margin``;
    else "noise" (the authors' labelling)."""
    if lifetime >= n_layers - bos_margin:
        return "bos"
    return "secondary" if lifetime > min_lifetime else "noise"


@dataclass(frozen=True)
class SecondarySink:
    """A candidate sink of one sequence: its position, the layers it was found in, how many (its lifetime), the
    layer it appeared in (``created``) and its label (:func:`kind_of`)."""

    position: int
    layers: tuple[int, ...]
    kind: str

    @property
    def lifetime(self) -> int:
        return len(self.layers)

    @property
    def created(self) -> int:
        return self.layers[0]


@dataclass(frozen=True)
class Detection:
    """:func:`detect` on one sequence: the BOS sink's position, the layers read, and every candidate."""

    bos: int
    layers: range
    sinks: tuple[SecondarySink, ...]

    def of_kind(self, kind: str) -> list[SecondarySink]:
        return [s for s in self.sinks if s.kind == kind]


def detect(hidden: torch.Tensor, candidates: tuple[int, ...] = (0, 1), cut: float = COS_CUT,
           bos_margin: int = BOS_MARGIN, min_lifetime: int = MIN_LIFETIME) -> Detection:
    """The authors' detection on one sequence's block outputs ``hidden`` (L, T, d): steps 1-4 of the module
    docstring."""
    bos = bos_position(hidden, candidates)
    layers = clipped_layers(hidden[:, bos].float().norm(dim=-1))
    found = candidate_layers(hidden, bos, layers, cut)
    n = hidden.shape[0]
    return Detection(bos, layers, tuple(SecondarySink(p, tuple(ls), kind_of(len(ls), n, bos_margin, min_lifetime))
                                        for p, ls in sorted(found.items())))


def mass_in_lifetime(key_mass: torch.Tensor, sink: SecondarySink, bos: int) -> dict[str, float]:
    """What a found sink draws: its mean m_j over its own layers, the BOS sink's and the median key's (every key but
    the two) in the same layers. key_mass (L, T): m_j per layer, averaged over heads (the statistics' ``key_mass``)."""
    rows = key_mass[list(sink.layers)].double()  # (lifetime, T)
    others = [j for j in range(key_mass.shape[1]) if j not in (bos, sink.position)]
    return {"mass": float(rows[:, sink.position].mean()), "bos_mass": float(rows[:, bos].mean()),
            "median_key_mass": float(rows[:, others].median(dim=1).values.mean())}


def mass_candidates(key_mass: torch.Tensor, bos: int, cut: float = 0.3, skip_last: int = 8) -> dict[int, list[int]]:
    """The converse search, from attention alone: position -> the layers where key j (j != ``bos``, not among the last
    ``skip_last`` keys, which few queries see) draws sink-level mass, m_j^(l) > ``cut`` (Gu et al.'s eps, read on
    m_j = alpha_j). key_mass (L, T): m_j per layer, averaged over heads."""
    found: dict[int, list[int]] = {}
    keep = key_mass.shape[1] - skip_last
    for layer, row in enumerate(key_mass):
        for j in (row[:keep] > cut).nonzero().flatten().tolist():
            if j != bos:
                found.setdefault(j, []).append(layer)
    return found


def alignment(hidden: torch.Tensor, bos: int, position: int, layers: list[int] | tuple[int, ...]) -> float:
    """Mean over ``layers`` of |cos(h_position, h_bos)|: does a key found by its mass point along the BOS sink's
    state, as the authors find for theirs? hidden (L, T, d)."""
    h = hidden[list(layers)].double()  # (n, T, d)
    return float(torch.nn.functional.cosine_similarity(h[:, position], h[:, bos], dim=-1).abs().mean())


def typical_alignment(hidden: torch.Tensor, bos: int, layers, exclude: set[int], keep: int,
                      quantile: float = TYPICAL_QUANTILE) -> float:
    """How well an ordinary key points along the BOS sink's state in ``layers``: the mean over those layers of the
    ``quantile`` of |cos(h_i, h_bos)| over keys i < ``keep`` other than ``bos`` and ``exclude``. hidden (L, T, d)."""
    others = [i for i in range(keep) if i != bos and i not in exclude]
    h = hidden[list(layers)].double()  # (n, T, d)
    cos = torch.nn.functional.cosine_similarity(h[:, others], h[:, bos:bos + 1], dim=-1).abs()  # (n, len(others))
    return float(torch.quantile(cos, quantile, dim=1).mean())


def alignment_by_layer(hidden: torch.Tensor, bos: int, keep: int) -> dict[str, list[float]]:
    """Per layer, the median and :data:`TYPICAL_QUANTILE` of |cos(h_i, h_bos)| over keys i < ``keep``, i != bos:
    how much a model's states share the BOS sink's direction at all. hidden (L, T, d)."""
    others = [i for i in range(keep) if i != bos]
    cos = torch.nn.functional.cosine_similarity(hidden[:, others].double(), hidden[:, bos:bos + 1].double(),
                                                dim=-1).abs()  # (L, len(others))
    return {"median": cos.median(dim=1).values.tolist(),
            "p90": torch.quantile(cos, TYPICAL_QUANTILE, dim=1).tolist()}


@torch.inference_mode()
def window_states(lm: LoadedModel, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward of one window ``ids`` (T,): the every-key mass m_j per layer, averaged over heads, (L, T) -- the
    O(N) statistics (:class:`~sinklib.core.attnstats.AttentionStats`, no T x T map kept) -- and the block outputs
    h^(1..L) (L, T, d), the embeddings left out as in the authors' ``hidden_states[1:]``."""
    from sinklib.core.attnstats import AttentionStats

    with AttentionStats(lm) as stats:
        out = lm.model(ids[None].to(lm.device), use_cache=False, output_hidden_states=True, logits_to_keep=1)
    mass = torch.stack([stats.key_mass(i)[0].mean(dim=0) for i in range(lm.n_layers)]).double()  # (L, T)
    hidden = torch.stack([h[0] for h in out.hidden_states[1:]]).float().cpu()  # (L, T, d)
    return mass, hidden


def summarise_window(mass: torch.Tensor, hidden: torch.Tensor, tokens: list[str], skip_last: int = SKIP_LAST) -> dict:
    """Both searches on one window, as plain numbers. mass (L, T): m_j per layer; hidden (L, T, d); tokens: the
    window's tokens as text (for the keys found).

    ``mass_sinks``: every key found by its mass (:func:`mass_candidates`) with its layers, its m_j and the BOS
    sink's in them (:func:`mass_in_lifetime`), its alignment (:func:`alignment`) and an ordinary key's
    (:func:`typical_alignment`); ``by_layer``: m_0's row (the BOS sink's), the strongest other key's m_j and position
    (the last ``skip_last`` left out) and the alignment quantiles (:func:`alignment_by_layer`); ``detection``:
    the authors' hidden-state detection (:func:`detect`) counted by kind under their margins and under
    :func:`adapted_margin`, and the share of later positions that pass |cos| > 0.9 in at least one read layer.
    ``skip_last``: keys at the window's end left out of the mass search."""
    n_layers, T = mass.shape
    keep = T - skip_last
    found = detect(hidden)
    bos = found.bos
    adapted = detect(hidden, bos_margin=adapted_margin(n_layers))
    candidates = mass_candidates(mass, bos, GU_EPS, skip_last)
    keys = []
    for position, layers in sorted(candidates.items()):
        sink = SecondarySink(position, tuple(layers), kind_of(len(layers), n_layers, adapted_margin(n_layers)))
        keys.append({"position": position, "token": tokens[position], "layers": list(layers), "kind": sink.kind,
                     **mass_in_lifetime(mass, sink, bos), "alignment": alignment(hidden, bos, position, layers),
                     "typical_alignment": typical_alignment(hidden, bos, layers, set(candidates), keep)})
    others = mass[:, :keep].clone()
    others[:, bos] = -1.0  # the strongest key other than the BOS sink
    strongest = others.max(dim=1)
    return {
        "bos": bos, "tokens": T, "mass_sinks": keys,
        "by_layer": {"bos_mass": mass[:, bos].tolist(), "strongest_other": strongest.values.tolist(),
                     "strongest_position": strongest.indices.tolist(), **alignment_by_layer(hidden, bos, keep)},
        "detection": {"layers": [found.layers.start, found.layers.stop],
                      "authors": {k: len(found.of_kind(k)) for k in ("secondary", "bos", "noise")},
                      "adapted": {k: len(adapted.of_kind(k)) for k in ("secondary", "bos", "noise")},
                      "share_aligned": len(found.sinks) / max(T - bos - 1, 1)},
    }


def measure(lm: LoadedModel, windows: torch.Tensor) -> list[dict]:
    """:func:`summarise_window` of every window (N, T), one forward each (batch 1: memory stays O(T) in attention)."""
    out = []
    for ids in windows:
        mass, hidden = window_states(lm, ids)
        out.append(summarise_window(mass, hidden, [lm.tokenizer.decode([int(i)]) for i in ids]))
    return out


def over_windows(windows: list[dict]) -> dict:
    """What several windows' :func:`summarise_window` found, together: ``found``, every key found by its mass (window
    by window, in position order); ``strongest``, the strongest key other than the BOS sink's over every window and
    layer as {"mass", "layer", "position"} (None for no windows); ``secondary`` / ``secondary_adapted``, the authors'
    detection's secondary sinks summed over windows under their margins / :func:`adapted_margin`; ``share_aligned``,
    the largest share of later positions passing |cos| > 0.9."""
    peaks = [(m, layer, w["by_layer"]["strongest_position"][layer]) for w in windows
             for layer, m in enumerate(w["by_layer"]["strongest_other"])]
    mass, layer, position = max(peaks, key=lambda p: p[0]) if peaks else (None, None, None)  # ties: the first
    detected = [w["detection"] for w in windows]
    return {"found": [k for w in windows for k in w["mass_sinks"]],
            "strongest": None if mass is None else {"mass": mass, "layer": layer, "position": position},
            "secondary": sum(d["authors"]["secondary"] for d in detected),
            "secondary_adapted": sum(d["adapted"]["secondary"] for d in detected),
            "share_aligned": max((d["share_aligned"] for d in detected), default=None)}


ALIGN_FOLLOWS = (f"{FOLLOWS}; the converse search from attention: m_j > eps (Gu et al., arXiv 2410.10781, "
                 "Sec. 3) on this project's every-key statistics")
ALIGN_ADAPTED = ("the authors find secondary sinks by their hidden states and then read their attention; here keys are "
                 "found by attention (m_j > 0.3 in a layer, mean over heads) and their hidden states are read, and an "
                 f"ordinary key's alignment (the {TYPICAL_QUANTILE:.0%} quantile over the other keys, same layers) "
                 "must be beaten as well as 0.9")
ALIGN_QUANTITIES = {"found": q.count("keys"), "alignment": q.value("|cos|"), "typical_alignment": q.value("|cos|")}


def alignment_claim(window: dict, model: str) -> Claim:
    """Wong et al.: keys that become sinks after the first point along the primary (BOS) sink's hidden state. Rule, on
    one window's :func:`summarise_window`: every key found by its mass counts; it holds when their mean |cos(h_j,
    h_bos)| over their layers exceeds 0.9 **and** an ordinary key's in the same layers (else it fails); it cannot be
    judged when no key but the first draws sink-level mass."""
    keys = window["mass_sinks"]
    aligned = sum(k["alignment"] for k in keys) / len(keys) if keys else None
    typical = sum(k["typical_alignment"] for k in keys) / len(keys) if keys else None
    holds = None if not keys else bool(aligned > COS_CUT and aligned > typical)
    return Claim(
        id=f"wong2025.mass_sinks_align_with_bos.{model}", source=f"{PAPER}, Sec. 3-4 (finding 1)",
        statement="keys after the first that draw sink-level attention point along the first (BOS) sink's hidden "
                  "state",
        rule=f"keys j >= 1 with m_j > {GU_EPS:g} in a layer (last {SKIP_LAST} keys left out); their mean |cos(h_j, "
             f"h_bos)| over those layers > {COS_CUT:g} and > an ordinary key's ({TYPICAL_QUANTILE:.0%} quantile of the "
             "others)",
        published={"cos_cut": COS_CUT}, holds=holds,
        measured={"found": len(keys), "alignment": aligned, "typical_alignment": typical},
        quantities=ALIGN_QUANTITIES,
        note="no key but the first draws sink-level mass in any layer" if not keys else "",
        follows=ALIGN_FOLLOWS, adapted=ALIGN_ADAPTED, at_init=False, paper="2512.22213")


def alignment_over_windows(windows: list[dict], model: str, draws_of: str) -> Claim:
    """:func:`alignment_claim` on each window (``windows[0]`` the run's own): it holds or fails only when every window
    that can be judged agrees (:func:`~sinklib.core.claims.over_draws`)."""
    return over_draws([alignment_claim(w, model) for w in windows], draws_of,
                      key=lambda c: c.measured["found"])


def control_of(window: dict, model: str) -> dict:
    """``Recorder.add``'s control keywords for :func:`alignment_claim` from its run on random weights (one window's
    :func:`summarise_window`): the control claim, and -- where no key draws sink-level mass there, so the rule has
    nothing to judge -- a note saying so with the strongest key the control found: the effect the rule reads is
    absent on random weights."""
    claim = alignment_claim(window, model)
    if claim.holds is not None:
        return {"control": claim}
    strongest = max(window["by_layer"]["strongest_other"])
    return {"control": claim,
            "control_note": f"on random weights no key but the first draws sink-level mass (the strongest other key "
                            f"m_j = {strongest:.3g} < {GU_EPS:g}), so the rule has nothing to judge there: the "
                            "mid-sequence sinks it reads are absent without training"}
