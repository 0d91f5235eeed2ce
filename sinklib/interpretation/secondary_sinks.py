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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FOLLOWS = ("arXiv 2512.22213, Sec. 3; JeffreyWong20/Secondary-Attention-Sinks:src/hidden_state_base.py:"
           "hidden_state_norm_detection, sink_labeling_machine")
COS_CUT = 0.9  # |cos(h_j, h_bos)| above which position j counts as a sink in that layer (the authors')
BOS_MARGIN = 15  # lifetime >= L - 15: a BOS-like sink (the authors')
MIN_LIFETIME = 4  # lifetime <= 4: noise (the authors')


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
