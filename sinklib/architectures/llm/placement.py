"""Where a language model's sink sits, and whether it belongs to a position or to a token.

* :func:`token_kinds` / :func:`mass_by_kind` -- the sink mass each key receives, m_j = sum_t A[t, j] / #queries that
  see j (Gu et al.'s alpha_j for every key j), grouped by what the key is: the first position, a BOS token, the
  first delimiter (Sun et al.'s first "." or "\\n"), another delimiter (later ones and ``, ; : ! ?``), a
  weak-semantic token (articles, prepositions, conjunctions, other punctuation) or a content word;
* :func:`secondary_sinks` -- keys beyond position 0 whose mass passes eps, by token;
* :func:`position_or_token` -- the first token replaced by another, and the original first token moved to a later
  position (Xiao et al., arXiv 2309.17453, Section 3.1: the sink is the *initial position*, whatever its token;
  Gu et al., arXiv 2410.10781, Section 5: a sink follows the first position);
* :func:`layer_mass` -- the attention mass every key receives per layer and head, which the sink rates of
  :mod:`sinklib.architectures.llm.first_key_rates` (raw windows, and the same content in the chat template) read too.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

from sinklib.core import pooled
from sinklib.core import quantities as q
from sinklib.core.attnstats import AttentionStats
from sinklib.core.claims import Claim, over_draws
from sinklib.core.loaded import LoadedModel
from sinklib.core.metrics import GU_EPS
from sinklib.interpretation.origin import batches

KINDS = ("first", "first delimiter", "delimiter", "weak", "content")
DELIMITERS = frozenset({".", ",", ";", ":", "!", "?", "\n"})  # the "delimiter" kind (ours, wider than Sun's)
SUN_DELIMITERS = frozenset({".", "\n"})  # Sun et al., Sec. 2.2: "the first period (.) or newline token (\n)"
WEAK_WORDS = frozenset({
    "the", "a", "an", "of", "to", "in", "and", "or", "but", "for", "on", "at", "by", "with", "from", "as", "is",
    "was", "be", "are", "were", "it", "that", "this", "his", "her", "their", "he", "she", "they", "him", "them",
    "not", "so", "then", "also", "all", "which", "who", "will", "shall", "unto",
})
XIAO, GU = "Xiao et al., StreamingLLM, arXiv 2309.17453", "Gu et al., arXiv 2410.10781"
SUN = "Sun et al., Massive Activations in LLMs, arXiv 2402.17762"
POSITION_KEEP = 0.5  # the position-or-token rule's cut: alpha kept >= 0.5x its own value (PositionOrToken.verdict)
DELIMITER_CUT = 2.0  # the first-delimiter rule: its m_j over a content word's must exceed this (delimiter_claim)
DELIMITER_FOLLOWS = ("Sun et al., Sec. 2.2 (massive activations at the starting token and the first period or newline) "
                     "and Sec. 4.1 (attention concentrates on the tokens that carry them); "
                     "locuslab/massive-activations:main_llm.py:exp4 (attention visualisation through "
                     "monkey_patch/modify_llama.py:enable_llama_custom_attention)")
DELIMITER_ADAPTED = ("Sun et al. read the activation magnitude and plot one prompt's attention; here the rule reads the "
                     "attention mass m_j a first delimiter receives, mean over the sink layers, heads and windows, "
                     f"against content words' (> {DELIMITER_CUT:g}x); the first delimiter is Sun's (the first '.' or newline), the "
                     "other punctuation is the extra 'delimiter' kind")
POSITION_FOLLOWS = ("Xiao et al., Sec. 3.1, Table 1 (the first four tokens replaced by line breaks keep the perplexity "
                    "of a window cache: the sink is the initial position); Gu et al., Sec. 5; no public code for the "
                    "replacement (mit-han-lab/streaming-llm:streaming_llm/kv_cache.py:StartRecentKVCache keeps the "
                    "initial positions)")
POSITION_ADAPTED = ("attention alpha instead of perplexity; one first token replaced (not four), plus another text in "
                    "front and the original first token moved; a 0.5x cut, and position 0 must be a sink "
                    f"(alpha_0 > {GU_EPS}) for either answer -- without it nothing belongs to the position")


def token_kind(text: str) -> str:
    """Kind of one decoded token other than the first: delimiter, weak or content (rules in the module docstring)."""
    stripped = text.strip(" ")
    if "\n" in text or stripped in DELIMITERS:
        return "delimiter"
    if stripped.lower() in WEAK_WORDS or (stripped and all(c in string.punctuation for c in stripped)) or not stripped:
        return "weak"
    return "content"


def is_sun_delimiter(text: str) -> bool:
    """A period or a newline token: the delimiters Sun et al. name (Sec. 2.2), not commas, colons or ``!?;``."""
    return "\n" in text or text.strip(" ") in SUN_DELIMITERS


def token_kinds(tokenizer, ids: torch.Tensor) -> list[list[str]]:
    """(N, T) ids -> per position its kind; position 0 is always "first" (a BOS, or the text's first word), and the
    first period or newline after it "first delimiter" (Sun et al.'s, where they find the second massive
    activation; a comma before it stays a plain "delimiter")."""
    out = []
    for row in ids:
        texts = [tokenizer.decode([int(i)]) for i in row[1:]]
        kinds = ["first"] + [token_kind(t) for t in texts]
        first = next((i + 1 for i, t in enumerate(texts) if is_sun_delimiter(t)), None)
        if first is not None:
            kinds[first] = "first delimiter"
        out.append(kinds)
    return out


def stacked_mass(stats: AttentionStats, n_layers: int) -> torch.Tensor:
    """m_j of every sequence, layer, head and key that ``stats`` saw: (N, L, H, T), layers 0..n_layers-1."""
    return torch.stack([stats.key_mass(i) for i in range(n_layers)], dim=1)


def over_layers(mass: torch.Tensor, layers: list[int] | None = None) -> torch.Tensor:
    """(N, L, H, T) m_j -> (N, T): the mean over heads and ``layers`` (default: all)."""
    return (mass if layers is None else mass[:, layers]).mean(dim=(1, 2))


@torch.inference_mode()
def layer_mass(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 16, progress: str | None = None) -> torch.Tensor:
    """m_j per sequence, layer, head and key: (N, L, H, T), one forward per batch. alpha_0 = ``[..., 0]``, so Gu et
    al.'s sink rate of the same forwards is ``metrics.sink_rate(mass[..., 0])``. ``progress``: a bar's label (None:
    no bar)."""
    out = []
    for batch in tqdm(list(batches(ids, batch_size)), desc=progress, disable=progress is None, leave=False):
        with AttentionStats(lm) as st:
            lm.model(batch.to(lm.device), use_cache=False, logits_to_keep=1)
        out.append(stacked_mass(st, lm.n_layers))
    return torch.cat(out)


def key_mass(lm: LoadedModel, ids: torch.Tensor, layers: list[int] | None = None, batch_size: int = 16) -> torch.Tensor:
    """m_j per sequence and key, averaged over heads and ``layers`` (default: all): (N, T)."""
    return over_layers(layer_mass(lm, ids, batch_size), layers)


def kind_sums(mass: torch.Tensor, kinds: list[list[str]], skip_last: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Per window n and kind k (in :data:`KINDS` order): S[n, k] = sum of m_j over the window's keys of kind k,
    C[n, k] = how many; each (N, K), float64. The last ``skip_last`` keys are left out: few queries see them, so
    their mass is large by construction (key T-1 is seen only by itself)."""
    keep = mass.shape[1] - skip_last
    sums = torch.zeros(mass.shape[0], len(KINDS), dtype=torch.float64)
    counts = torch.zeros_like(sums)
    for n, row in enumerate(kinds):
        for j in range(keep):
            k = KINDS.index(row[j])
            sums[n, k] += float(mass[n, j])
            counts[n, k] += 1
    return sums, counts


def mass_by_kind(mass: torch.Tensor, kinds: list[list[str]], skip_last: int = 8) -> dict[str, float | None]:
    """Mean m_j over the keys of each kind, every window's keys together: sum_n S[n, k] / sum_n C[n, k]
    (:func:`kind_sums`)."""
    return by_kind_of(*kind_sums(mass, kinds, skip_last))


def by_kind_of(sums: torch.Tensor, counts: torch.Tensor) -> dict[str, float | None]:
    """Kind -> mean m_j of the windows' pooled keys: sum_n S[n, k] / sum_n C[n, k] (None for a kind with no key:
    the mean of no key does not exist)."""
    s, c = sums.sum(0), counts.sum(0)
    return {kind: float(s[k] / c[k]) if c[k] else None for k, kind in enumerate(KINDS)}


def over_content(by_kind: dict[str, float | None], kind: str) -> float | None:
    """A kind's mean m_j over a content word's (:func:`by_kind_of`); None when either kind has no key or the content
    words draw no mass."""
    value, content = by_kind[kind], by_kind["content"]
    return value / content if value is not None and content else None


def secondary_sinks(mass: torch.Tensor, ids: torch.Tensor, tokenizer, skip_last: int = 8, min_count: int = 3,
                    top: int = 6, first: int = 1) -> list[tuple[str, int, float]]:
    """The tokens from position ``first`` on (not among the last ``skip_last`` keys) that draw the most attention:
    (token, occurrences, mean m_j), for tokens seen at least ``min_count`` times, largest mean first."""
    hits: dict[str, list[float]] = {}
    keep = mass.shape[1] - skip_last
    for n in range(mass.shape[0]):
        for j in range(first, keep):
            hits.setdefault(tokenizer.decode([int(ids[n, j])]), []).append(float(mass[n, j]))
    rows = [(t, len(v), sum(v) / len(v)) for t, v in hits.items() if len(v) >= min_count]
    return sorted(rows, key=lambda r: -r[2])[:top]


# mean sink mass m_j (an average attention weight) per token kind; the first delimiter's over a content word's, and
# its spread over the draws of windows (:func:`delimiter_over_draws`)
DELIMITER_QUANTITIES = {**{kind: q.share("attention mass m_j") for kind in KINDS},
                        "first_delimiter_over_content": q.ratio(), "@spread": q.ratio(), "@margin": q.ratio()}


def delimiter_claim(by_kind: dict[str, float | None], model: str) -> Claim:
    """Sun et al. (Section 2): besides the starting token, massive activations -- and with them the attention -- sit
    at the first delimiter ("." or "\\n"). Rule: the first delimiter's mean mass m_j is > :data:`DELIMITER_CUT` (2x) a
    content word's. Not judged (the ratio None) when either kind has no key or the content words draw no mass."""
    ratio = over_content(by_kind, "first delimiter")
    return Claim(id=f"sun2024.first_delimiter_draws_attention.{model}", source=f"{SUN}, Section 2",
                 statement="after the first token, the first delimiter draws more attention than content words",
                 rule=f"mean sink mass m_j of the first delimiter > {DELIMITER_CUT:g}x that of content-word keys (last 8 "
                      f"keys left out)",
                 published=None, measured={**by_kind, "first_delimiter_over_content": ratio},
                 quantities=DELIMITER_QUANTITIES,
                 holds=None if ratio is None else bool(ratio > DELIMITER_CUT),
                 note="no first delimiter or no content word among the scored keys" if ratio is None else "",
                 follows=DELIMITER_FOLLOWS, adapted=DELIMITER_ADAPTED, at_init=False)


def delimiter_over_draws(by_kinds: list[dict[str, float | None]], model: str, draws_of: str) -> Claim:
    """:func:`delimiter_claim` judged on each draw of windows (``by_kinds[0]``: the run's own): it holds or fails
    only when every draw agrees (:func:`sinklib.core.claims.over_draws`)."""
    return over_draws([delimiter_claim(b, model) for b in by_kinds], draws_of,
                      key=lambda c: c.measured["first_delimiter_over_content"])


BOOTSTRAP_DRAWS = pooled.BOOTSTRAP_DRAWS  # resamples of the windows for the pooled interval (delimiter_pooled)


def delimiter_ratio_interval(sums: torch.Tensor, counts: torch.Tensor, seed: int = 0, n_boot: int = BOOTSTRAP_DRAWS,
                             level: float = 0.95) -> tuple[float, float, float]:
    """The first delimiter's m_j over a content word's on the pooled windows, and its percentile bootstrap interval
    over windows: (ratio, low, high). Resample the N windows with replacement ``n_boot`` times (generator seeded with
    ``seed``); each resample's ratio = (sum S[:, fd] / sum C[:, fd]) / (sum S[:, c] / sum C[:, c])."""
    fd, c = KINDS.index("first delimiter"), KINDS.index("content")

    def ratio(s: torch.Tensor, n: torch.Tensor) -> torch.Tensor:  # (..., N, K) -> (...)
        return (s[..., fd].sum(-1) / n[..., fd].sum(-1)) / (s[..., c].sum(-1) / n[..., c].sum(-1))

    point = float(ratio(sums, counts))
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, sums.shape[0], (n_boot, sums.shape[0]), generator=gen)  # (B, N)
    boot = ratio(sums[idx], counts[idx])  # (B,)
    boot = boot[~torch.isnan(boot)]
    if not boot.numel():
        return point, float("nan"), float("nan")
    lo, hi = torch.quantile(boot, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=boot.dtype)).tolist()
    return point, lo, hi


def delimiter_pooled(draws: list[tuple[torch.Tensor, torch.Tensor]], model: str, draws_of: str, seed: int = 0
                     ) -> Claim:
    """Sun et al.'s first-delimiter rule on a pretrained model, judged on every draw's windows pooled: a fixed
    model has no training noise, so what varies between draws is which windows were read. Holds when the pooled
    ratio's 95 % bootstrap interval over windows (:func:`delimiter_ratio_interval`) lies above
    :data:`DELIMITER_CUT`, fails when it lies below, and is unsettled only when it straddles the cut. Each draw's own
    verdict is kept in ``draws``, its ratio in the spread. ``draws``: (S, C) of :func:`kind_sums` per draw."""
    from sinklib.core.claims import against_cut

    sums = torch.cat([s for s, _ in draws])
    counts = torch.cat([c for _, c in draws])
    pooled = delimiter_claim(by_kind_of(sums, counts), model)
    per_draw = [delimiter_claim(by_kind_of(s, c), model) for s, c in draws]
    ratio, lo, hi = delimiter_ratio_interval(sums, counts, seed)
    if pooled.measured["first_delimiter_over_content"] is None or math.isnan(lo):  # no ratio, or no finite resample
        return replace(pooled, draws=tuple(d.holds for d in per_draw), draws_of=draws_of)
    reach = ratio - lo if ratio > DELIMITER_CUT else hi - ratio  # how far the interval reaches toward the cut
    holds, unsettled, margin = against_cut(ratio, DELIMITER_CUT, reach)
    values = [d.measured["first_delimiter_over_content"] for d in per_draw]  # None: a draw with no ratio
    known = [v for v in values if v is not None]  # the pooled ratio exists, so some draw has one
    note = (f"judged on all {sums.shape[0]} windows pooled ({draws_of}): ratio {ratio:.3g}, 95% bootstrap interval "
            f"[{lo:.3g}, {hi:.3g}] over windows ({BOOTSTRAP_DRAWS:,} resamples)"
            + (f" -- it straddles the {DELIMITER_CUT:g}x cut" if unsettled else "")
            + "; per draw " + " / ".join("-" if v is None else f"{v:.3g}" for v in values))
    return replace(pooled, holds=holds, unsettled=unsettled, margin=margin | {"of": "the pooled ratio"},
                   draws=tuple(d.holds for d in per_draw), draws_of=draws_of, note=note,
                   spread={"min": min(known), "max": max(known), "values": values, "interval": [lo, hi]})


@dataclass
class PositionOrToken:
    """alpha (mean over the chosen layers and heads) under four inputs; see :func:`position_or_token`."""

    own: float  # position 0 as the text has it (BOS or first word)
    replaced: float  # position 0 replaced by another token
    moved_first: float  # position 0 of the shifted text (a word from elsewhere)
    moved_original: float  # the original first token, now at position ``shift``
    shift: int
    other_token: str
    layers: list[int]
    windows: torch.Tensor | None = None  # (N, 4): the four alphas above per window, in that order (None: not kept)

    def conditions(self, keep: float = POSITION_KEEP, eps: float = GU_EPS) -> dict[str, bool]:
        """The rule's four answers (:func:`position_rule`): own > eps; replaced, moved_first and moved_original each
        >= ``keep`` x own."""
        return {"sink": self.own > eps, "replaced": self.replaced >= keep * self.own,
                "moved_first": self.moved_first >= keep * self.own,
                "moved_original": self.moved_original >= keep * self.own}

    def verdict(self, keep: float = POSITION_KEEP, eps: float = GU_EPS) -> bool | None:
        """True: the position (0 stays a sink with another token; the moved token loses it); False: the token (the
        moved token keeps it and the replaced position loses it), or no sink at all (own alpha_0 <= eps: nothing
        belongs to the position -- random weights spread attention evenly, and a causal mask alone gives key 0
        more alpha than key ``shift``); None: neither cleanly."""
        return position_rule(self.conditions(keep, eps))

    @property
    def answer(self) -> str:
        """"position", "token", "no sink" or "neither" -- the verdict in words."""
        if not self.own > GU_EPS:
            return "no sink"
        return {True: "position", False: "token", None: "neither"}[self.verdict()]


def position_rule(c: dict[str, bool]) -> bool | None:
    """Xiao et al.'s answer from the four conditions: "sink" (alpha_0 > eps as given), "replaced", "moved_first",
    "moved_original" (each alpha >= 0.5x the own alpha_0). No sink -> False; sink and replaced and moved_first and
    not moved_original -> True (the position); sink and not replaced and moved_original -> False (the token); else
    None (neither cleanly)."""
    if not c["sink"]:
        return False
    if c["replaced"] and c["moved_first"] and not c["moved_original"]:
        return True
    return False if not c["replaced"] and c["moved_original"] else None


@torch.inference_mode()
def position_or_token(lm: LoadedModel, ids: torch.Tensor, layers: list[int], shift: int = 8, other: str = "\n",
                      batch_size: int = 16, mass: torch.Tensor | None = None) -> PositionOrToken:
    """Replace position 0 by ``other``; then put ``shift`` tokens of other windows in front, so the original first
    token (BOS or first word) sits at position ``shift``. alpha_k = mean over queries t >= k of A[t, k] (= m_k of
    :func:`key_mass`), mean over heads, ``layers`` and windows. ``mass``: :func:`key_mass` of ``ids`` on ``layers``
    when already measured (saves a forward); the replaced and the moved windows then run as one stack of 2N
    windows (each window's attention is its own, so stacking changes nothing but the batching)."""
    other_id = lm.tokenizer(other, add_special_tokens=False).input_ids[-1]
    replaced = ids.clone()
    replaced[:, 0] = other_id
    prefix = ids.roll(1, dims=0)[:, 1:shift + 1]  # other windows' tokens (not their position 0)
    moved = torch.cat([prefix, ids], dim=1)[:, : ids.shape[1]]
    runs = [replaced, moved] if mass is not None else [ids, replaced, moved]
    masses = key_mass(lm, torch.cat(runs), layers, batch_size).split(len(ids))  # each (N, T)
    own, replaced_mass, moved_mass = (mass, *masses) if mass is not None else masses
    windows = torch.stack([own[:, 0], replaced_mass[:, 0], moved_mass[:, 0], moved_mass[:, shift]], dim=1)  # (N, 4)
    return PositionOrToken(*windows.mean(0).tolist(), shift=shift, other_token=repr(lm.tokenizer.decode([other_id])),
                           layers=list(layers), windows=windows.float().cpu().clone())


# alpha of the first position (as given, another token there, another text in front) and of the original first token
# moved to position ``shift``; over the draws of windows, the spread of alpha_0 as given (:func:`position_over_draws`)
POSITION_QUANTITIES = {"own": q.share("alpha"), "replaced": q.share("alpha"), "moved_first": q.share("alpha"),
                       "moved_original": q.share("alpha"), "shift": q.identity("position"), "@spread": q.share("alpha")}


def position_claim(result: PositionOrToken, model: str) -> Claim:
    """Xiao et al. (Section 3.1): the sink is the initial position, whatever token sits there. Rule in
    :meth:`PositionOrToken.verdict`."""
    return Claim(id=f"xiao2023.sink_is_the_position.{model}", source=f"{XIAO}, Section 3.1; {GU}, Section 5",
                 statement="the sink belongs to the first position, not to the token that sits there",
                 rule=f"alpha_0 > {GU_EPS} as given, and it keeps >= 0.5x its value with another first token and with "
                      "another text in front, while the original first token moved to a later position keeps < 0.5x "
                      "(reverse, or no sink at position 0: fails)",
                 published=None,
                 measured={"own": result.own, "replaced": result.replaced, "moved_first": result.moved_first,
                           "moved_original": result.moved_original, "shift": int(result.shift),
                           "answer": result.answer},
                 quantities=POSITION_QUANTITIES, holds=result.verdict(), follows=POSITION_FOLLOWS,
                 adapted=POSITION_ADAPTED, at_init=False, note=position_reason(result))


def position_reason(result: PositionOrToken) -> str:
    """The measured reason of a :func:`position_claim` that does not hold (empty when it holds): which of alpha's
    moves decided it -- "the token: the original first token moved to position 8 keeps alpha 0.49 of 0.50, while
    position 0 with another token drops to 0.033 (and 0.028 with another text in front)"."""
    answer = result.answer
    if answer == "position":
        return ""
    if answer == "no sink":
        return f"no sink at position 0: alpha_0 {result.own:.3g} as given, not above {GU_EPS}"
    moves = (f"the original first token moved to position {result.shift} keeps alpha {result.moved_original:.2g} of "
             f"{result.own:.2g}, while position 0 with another token drops to {result.replaced:.2g} (and "
             f"{result.moved_first:.2g} with another text in front)")
    return (f"the token, not the position: {moves}" if answer == "token" else
            f"neither cleanly (0.5x the own alpha is the cut): {moves}")


def position_over_draws(results: list[PositionOrToken], model: str, draws_of: str) -> Claim:
    """:func:`position_claim` judged on each draw of windows (``results[0]``: the run's own)."""
    return over_draws([position_claim(r, model) for r in results], draws_of, key=lambda c: c.measured["own"])


# the pooled claim's spread: each draw's own alpha_0 and every condition's interval (alpha_0's; the others are ratios
# to it)
POSITION_POOLED_QUANTITIES = {"@spread.intervals": q.ratio(), "@spread.intervals.sink": q.share("alpha")}


def position_conditions(windows: torch.Tensor, seed: int = 0, keep: float = POSITION_KEEP,
                        eps: float = GU_EPS) -> list[pooled.Condition]:
    """The rule's four conditions on pooled windows, each with its bootstrap interval over windows
    (:func:`~sinklib.core.pooled.mean_interval`, :func:`~sinklib.core.pooled.ratio_interval`,
    the same resamples for all four): "sink" = mean_n a_own[n] against eps; "replaced", "moved_first",
    "moved_original" = sum_n a_x[n] / sum_n a_own[n] against ``keep``. windows: (N, 4) per-window alphas
    (:attr:`PositionOrToken.windows`)."""
    own = windows[:, 0]
    ratios = [pooled.Condition(name, keep, pooled.ratio_interval(windows[:, i], own, seed), label=label)
              for i, name, label in ((1, "replaced", "alpha_0 with another first token / as given"),
                                     (2, "moved_first", "alpha_0 with another text in front / as given"),
                                     (3, "moved_original", "the moved first token's alpha / alpha_0 as given"))]
    return [pooled.Condition("sink", eps, pooled.mean_interval(own, seed), label="alpha_0 as given"), *ratios]


def position_pooled(results: list[PositionOrToken], model: str, draws_of: str, seed: int = 0) -> Claim:
    """Xiao et al.'s position-or-token rule on a pretrained model, judged on every draw's windows pooled (a fixed
    model has no training noise: the draws differ only in which windows were read). Each of the rule's four
    conditions (:func:`position_conditions`) is settled when its 95 % bootstrap interval over windows lies on one side
    of its cut; the claim holds (the position) or fails (the token, or no sink) when the answer does not depend on an
    open condition, and is unsettled only when it does (:func:`~sinklib.core.pooled.settle`). Each draw's
    own verdict is kept in ``draws``, its alpha_0 in the spread. ``results[0]``: the run's own draw; every result
    must carry its per-window alphas (``windows``), else the draws are judged one by one
    (:func:`position_over_draws`)."""
    if any(r.windows is None for r in results):
        return position_over_draws(results, model, draws_of)
    windows = torch.cat([r.windows for r in results]).double()  # (N, 4), every draw's windows
    mean = windows.mean(0).tolist()
    first = results[0]
    point = PositionOrToken(*mean, shift=first.shift, other_token=first.other_token, layers=first.layers)
    claim = position_claim(point, model)
    claim = replace(claim, quantities={**claim.quantities, **POSITION_POOLED_QUANTITIES})
    return pooled.pooled_claim(claim, position_conditions(windows, seed), position_rule,
                               [position_claim(r, model) for r in results], [r.own for r in results], draws_of,
                               f"{len(windows)} windows", main="sink")
