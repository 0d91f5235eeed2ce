"""What arXiv 2605.06611 claims of head-wise RMSNorm besides faster convergence: it *stabilizes value aggregation
outputs* and *restores statistical parity across positions* -- the first position's attention outputs no longer stand
apart from the others' -- and with it the first token's dimension disparity falls (DomRatio 82.67 -> 33.74 at 152M,
20B OpenWebText tokens, 4 seeds) and the representations' effective rank rises (343.7 -> 446.0). Whether it removes
the first-token sink is not the paper's claim: 03 asks it as this project's own question
(:func:`sinklib.mitigation.sink_claims.sink_claim`).

Three numbers per trained run (:func:`measure_parity`, on the run's final weights), each read where the paper reads it:

* the direct measure the abstract names -- the **variance ratio** of the attention outputs, what enters W_O (for
  head-wise RMSNorm: after its norm): the per-dimension variance over a batch at position 0 over its mean at the
  later positions (:func:`position_variance_ratio`; parity = 1), on random-token sequences, judged in the first
  layer -- where the paper measures the variance discrepancy (early layers, before any sink) -- and recorded in each;
* the first token's **DomRatio after the second layer's input RMSNorm** -- where the paper reads Llama-2-7B's 263:
  the first layer's output as the next attention reads it -- on the run's validation batch
  (:func:`first_token_dom_ratio_by_layer`), recorded after every layer's norm;
* the **effective rank of the last layer's states** on the same batch (the run's final checkpoint).

Two claims, each titled by what it tests: :data:`PARITY_ID`, the abstract's parity, judged on the variance ratio
alone (:func:`parity_claim_over_seeds`); :data:`TABLE_ID`, the table's two numbers, DomRatio down and effective rank
up (:func:`table_claim_over_seeds`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import replace

import torch

from sinklib.core import metrics
from sinklib.core import quantities as q
from sinklib.core.claims import Claim, over_draws
from sinklib.core.errors import InputError
from sinklib.mitigation import training
from sinklib.mitigation.sink_claims import claim_source
from sinklib.mitigation.training_data import BBC_VOCAB, make_batch
from sinklib.mitigation.variant_lm import TinyConfig, TinyLM

PARITY_ID = "origin.headwise_rmsnorm_restores_parity"  # the abstract's claim, on its direct measure
TABLE_ID = "origin.headwise_rmsnorm_lowers_disparity_raises_rank"  # the pre-training table's two numbers
LAYER = 0  # the layer judged: its attention outputs' variance ratio, and its output's DomRatio after the next norm
RANDOM_SEQS = 256  # random-token sequences of the variance ratio (its v_t: a variance over this many draws)
RANDOM_SEED = 1234  # their generator's seed: the same sequences for every variant and training seed (paired)

PARITY_FOLLOWS = ("arXiv 2605.06611, the head-wise RMSNorm experiment (abstract: head-wise RMSNorm 'stabilizes value "
                  "aggregation outputs', and 'restoring statistical parity across positions significantly "
                  "accelerates convergence'; pre-training table: dimension disparity 82.67 -> 33.74, effective rank "
                  "343.7 -> 446.0 against softmax; DomRatio(h) = max_j |h_j| / mean_j |h_j| of the first token, read "
                  "in Llama-2-7B after the RMSNorm at the second layer, about 263; variance discrepancy: the "
                  "per-dimension variance over a batch of the head output o_t is largest at t = 0): no public code")
PARITY_ADAPTED = ("a TinyLM trained here for a few hundred steps, measured on its final weights. Variance ratio: "
                  f"{RANDOM_SEQS} sequences of random tokens of the training alphabet without a BOS (with the BOS "
                  "every training sequence starts with, position 0's outputs are identical across a batch and their "
                  "variance is 0 in any model), judged in the first layer, whose position 0 reads an ordinary token "
                  "embedding (a later layer's reads a state the BOS-trained model never formed from an ordinary "
                  "token), and recorded in every layer; DomRatio of the first token after the second layer's input "
                  "RMSNorm (its gain included) on the run's validation batch -- where the paper reads Llama-2-7B's, "
                  "the first block's output as the next attention reads it (the final norm in a one-layer model); "
                  "its table names no layer. Effective rank of the last block's residual states over the validation "
                  "batch's tokens (centred; the run's final checkpoint): the table gives one rank per model, and the "
                  "last layer's states are the representation the model hands its output head. Judged by direction "
                  "in each training seed (paired with softmax of the same seed), not by the paper's sizes")
PARITY_ADAPTED_CHECKPOINT = ("runs without parity measures (hand-built): DomRatio and effective rank read from the "
                             "run's final checkpoint -- the DomRatio there is the first token's raw residual state "
                             "averaged over the layers, not where the paper reads it -- and the variance ratio not "
                             "measured; measure the runs with with_parity first")

# What each number is (:mod:`sinklib.core.quantities`): ``measured`` holds [softmax, head-wise RMSNorm] per quantity.
PARITY_QUANTITIES = {
    "variance_ratio": q.ratio(),  # v_0 / mean_{t>=1} v_t of the first layer's attention outputs (parity: 1)
    "variance_ratio_by_layer": q.ratio(),  # the same in every layer, (L,) per variant
    "layer": q.identity("layer"),  # the layer judged (0-based)
    "@spread": q.ratio(),  # each seed's variance ratio, head-wise RMSNorm over softmax
}
TABLE_QUANTITIES = {
    "dom_ratio": q.ratio(),  # the first token's DomRatio = max_j |x_j| / mean_j |x_j| after the second layer's norm
    "dom_ratio_by_layer": q.ratio(),  # the same after the norm reading each layer's output, (L,) per variant
    "layer": q.identity("layer"),  # the layer whose output's DomRatio is judged (0-based)
    "effective_rank": q.value("effective rank"),  # exp of the entropy of the normalised singular values
    "@spread": q.ratio(),  # each seed's DomRatio, head-wise RMSNorm over softmax
}


# --------------------------------------------------------------------------------------------- the measures
def variance_ratio(v: torch.Tensor) -> torch.Tensor:
    """r = v_0 / mean_{t>=1} v_t of per-position variances v (..., T) -> (...): 1 is parity across positions, > 1
    the first position's outputs vary more than the later ones'."""
    if v.shape[-1] < 2:
        raise ValueError("variance_ratio needs at least 2 positions")
    return v[..., 0] / v[..., 1:].mean(-1)


def position_variance_ratio(o: torch.Tensor) -> float:
    """The variance ratio of attention outputs o (N, T, *feat) -- e.g. (N, T, H, hd), what enters W_O:

    v_t = mean_f Var_n[o_{n,t,f}]  (T,): population variance over the N sequences
    (:func:`sinklib.core.metrics.position_variance`), mean over the features f;
    r = v_0 / mean_{t>=1} v_t  (a float; :func:`variance_ratio`).

    Under a causal mask position 0 attends to itself only, so softmax's o_0 is its own value vector while o_t mixes
    t + 1 values: r is large. Head-wise RMSNorm, o_hat = o / RMS(o) * g, puts every position's output on the same
    scale: r toward 1 is the parity across positions the paper claims."""
    return float(variance_ratio(metrics.position_variance(o)))


class _Moments:
    """Per-position variance over sequences met in chunks (Chan et al.'s parallel update: exact, no E[x^2] - E[x]^2
    cancellation): :meth:`add` (n, T, F) chunks; :meth:`variance` -> (T,), v_t = mean_f Var_n[x_{n,t,f}]."""

    def __init__(self):
        self.n, self.mean, self.m2 = 0, None, None

    def add(self, x: torch.Tensor) -> None:
        x = x.detach().double().cpu().flatten(2)  # (n, T, F)
        n, mean = x.shape[0], x.mean(0)
        m2 = (x - mean).pow(2).sum(0)  # (T, F)
        if self.mean is None:
            self.n, self.mean, self.m2 = n, mean, m2
            return
        total = self.n + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta.pow(2) * (self.n * n / total)
        self.n = total

    def variance(self) -> torch.Tensor:
        if self.n < 2:
            raise ValueError("a position variance needs at least 2 sequences")
        return (self.m2 / self.n).mean(-1).float()  # (T,)


@contextmanager
def _captured(model: TinyLM, attention: bool, normed: bool):
    """Forward hooks on ``model``: ``out["attention"][l]`` each block's attention output o (B, T, H, hd) as it enters
    W_O (after the head-wise norm or gate a variant applies), and ``out["normed"][l]`` the first token's state after
    the RMSNorm that reads h^l (B, d): block l + 1's input norm, the final norm for the last layer."""
    out = {"attention": {}, "normed": {}}
    handles = []
    blocks = list(model.blocks)
    readers = [b.norm1 for b in blocks[1:]] + [model.norm]  # entry l reads h^l
    for layer, block in enumerate(blocks):
        if attention:
            handles.append(block.attn.register_forward_hook(
                lambda m, a, o, layer=layer: out["attention"].__setitem__(layer, o[0].detach().transpose(1, 2))))
        if normed:
            handles.append(readers[layer].register_forward_hook(
                lambda m, a, o, layer=layer: out["normed"].__setitem__(layer, o[:, 0].detach().float())))
    try:
        yield out
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def attention_variance_ratio(model: TinyLM, ids: torch.Tensor, chunk: int = 32) -> list[float]:
    """Per layer (L,), the variance ratio (:func:`position_variance_ratio`) of the attention outputs o^l (N, T, H, hd)
    that enter W_O, over the sequences of ``ids`` (N, T), in chunks of ``chunk`` sequences."""
    moments = [_Moments() for _ in model.blocks]
    was = model.training
    model.eval()
    with _captured(model, attention=True, normed=False) as out:
        for part in ids.split(chunk):
            model(part)
            for layer, m in enumerate(moments):
                m.add(out["attention"][layer])
    model.train(was)
    return [float(variance_ratio(m.variance())) for m in moments]


@torch.no_grad()
def first_token_dom_ratio_by_layer(model: TinyLM, ids: torch.Tensor) -> list[float]:
    """Per layer l (L,), the first token's DomRatio(x) = max_j |x_j| / mean_j |x_j| of x = RMSNorm(h^l) * g, the
    state after the norm that reads layer l's output (block l + 1's input norm; the final norm for the last layer),
    mean over the sequences of ``ids`` (N, T). Entry :data:`LAYER` (0) is what the second layer's attention
    reads: where the paper reads Llama-2-7B's DomRatio."""
    was = model.training
    model.eval()
    with _captured(model, attention=False, normed=True) as out:
        model(ids)
    model.train(was)
    return [float(metrics.dom_ratio(out["normed"][layer]).mean()) for layer in range(len(model.blocks))]


def random_tokens(cfg: training.TrainConfig, n: int = RANDOM_SEQS, seed: int = RANDOM_SEED) -> torch.Tensor:
    """(n, cfg.seq_len) tokens drawn uniformly from the run's training alphabet (bigram-backcopy's 64 tokens, or the
    256 bytes), without a BOS, so that position 0 varies across the batch."""
    vocab = BBC_VOCAB if cfg.data == "bigram_backcopy" else 256
    return torch.randint(0, vocab, (n, cfg.seq_len), generator=torch.Generator().manual_seed(seed))


def run_config(run: dict) -> training.TrainConfig:
    """The :class:`~sinklib.mitigation.training.TrainConfig` of a run of :func:`~sinklib.mitigation.training.train`,
    rebuilt from its ``config``; an :class:`InputError` when it does not give the run's cache key back."""
    fields = dict(run["config"])
    model = dict(fields.pop("model"))
    model["options"] = tuple(tuple(o) for o in model.get("options", ()))
    cfg = training.TrainConfig(model=TinyConfig(**model), **fields)
    if "key" in run and cfg.key() != run["key"]:
        raise InputError(f"the run {run['key']}'s config rebuilds as {cfg.key()}: cannot find its weights")
    return cfg


@torch.no_grad()
def measure_parity(run: dict, device: str = "cpu", n_random: int = RANDOM_SEQS, at_init: bool = False) -> dict:
    """The parity measures of one trained run, on its final cached weights (:func:`~sinklib.mitigation.training.
    load_trained`): ``variance_ratio_by_layer`` (L,) on :func:`random_tokens` and ``variance_ratio``, its entry
    :data:`LAYER`; ``dom_ratio_by_layer`` (L,) and ``dom_ratio`` (its entry :data:`LAYER`) on the run's validation
    batch (the one every checkpoint was evaluated on); ``effective_rank`` from the final checkpoint (the last block's
    states over the same batch)."""
    cfg = run_config(run)
    if at_init:  # the control: the weights this run's training started from (its seed, before step 1)
        torch.manual_seed(cfg.seed)
        model = TinyLM(cfg.model).to(device)
    else:
        model = training.load_trained(cfg, device)
    val = make_batch(cfg, "heldout", cfg.eval_seqs, torch.Generator().manual_seed(1234)).to(device)
    dom = first_token_dom_ratio_by_layer(model, val)
    ratio = attention_variance_ratio(model, random_tokens(cfg, n_random).to(device), chunk=max(2, cfg.eval_seqs))
    return {"variance_ratio": ratio[LAYER], "variance_ratio_by_layer": ratio, "dom_ratio": dom[LAYER],
            "dom_ratio_by_layer": dom, "layer": LAYER,
            "effective_rank": run["checkpoints"][0 if at_init else -1]["effective_rank"],
            "step": run["checkpoints"][0 if at_init else -1]["step"]}


def with_parity(runs: Sequence[dict], device: str = "cpu", n_random: int = RANDOM_SEQS,
                at_init: bool = False) -> list[dict]:
    """Each run with its :func:`measure_parity` under ``"parity"`` (a new dict; the cached run is not changed);
    ``at_init``: measured on the weights its training started from (the control; effective rank from the step-0
    checkpoint)."""
    return [r | {"parity": measure_parity(r, device, n_random, at_init)} for r in runs]


# --------------------------------------------------------------------------------------------- the claims
def _numbers(run: dict) -> dict:
    """A run's parity numbers: its :func:`measure_parity` (``run["parity"]``), else -- a hand-built run -- its final
    checkpoint's DomRatio (mean over the layers' raw states) and effective rank, and no variance ratio."""
    if "parity" in run:
        return run["parity"]
    last = run["checkpoints"][-1]
    return {"dom_ratio": last["dom_ratio_first"], "effective_rank": last["effective_rank"]}


def _gap(r: float) -> float:
    """|ln r|: how far a variance ratio lies from parity (1); infinite for 0 or an undefined ratio."""
    return abs(math.log(r)) if r > 0 and math.isfinite(r) else math.inf


def _layers(ratios: Sequence[float]) -> str:
    return ", ".join(f"{r:.2f}" for r in ratios)


def _id(base: str, setting: str) -> str:
    return base + (f".{setting.replace(' ', '_')}" if setting else "")


def parity_one_seed(candidate: dict, baseline: dict, paper: dict, setting: str = "") -> Claim:
    """One seed of the abstract's claim, judged on its direct measure: head-wise RMSNorm restores parity when the first
    layer's attention outputs lie nearer parity than softmax's of the same seed -- |ln r| smaller, r = v_0 /
    mean_{t>=1} v_t (:func:`position_variance_ratio` of o (N, T, H, hd), what enters W_O, on random tokens); the
    other way it does not (the note gives every layer's ratio). ``candidate`` / ``baseline``: runs of
    :func:`sinklib.mitigation.training.train` measured by :func:`with_parity`; a run without ``"parity"``
    (hand-built) cannot be judged. ``setting``: appended to the id (the Bible check's runs)."""
    c, b = _numbers(candidate), _numbers(baseline)
    arxiv, source = claim_source(paper, "headwise_rmsnorm")
    fields = dict(id=_id(PARITY_ID, setting), source=source, paper=arxiv,
                  statement="head-wise RMSNorm brings the first position's attention outputs (what enters W_O) to "
                            "parity with the later positions': their variance over a batch at position 0 over its "
                            "mean at positions >= 1 lies nearer 1 than softmax's, in the first layer",
                  rule="in each training seed against softmax of the same seed: |ln variance ratio| smaller in the "
                       "first layer (every layer's recorded) holds, larger does not hold; seeds that disagree: "
                       "unsettled",
                  published="statistical parity across positions restored (abstract; no number published)",
                  follows=PARITY_FOLLOWS, adapted=PARITY_ADAPTED, at_init=True, quantities=PARITY_QUANTITIES)
    if "variance_ratio" not in c or "variance_ratio" not in b:
        return Claim(**fields, measured={}, holds=None,
                     note="the attention outputs were not measured: measure the runs with parity.with_parity")
    holds = _gap(c["variance_ratio"]) < _gap(b["variance_ratio"])
    layers = (f"attention-output variance ratio v_0 / mean v_t>0 in layer {c['layer'] + 1} "
              f"{b['variance_ratio']:.2f} -> {c['variance_ratio']:.2f} (every layer: "
              f"{_layers(b['variance_ratio_by_layer'])} -> {_layers(c['variance_ratio_by_layer'])})")
    return Claim(**fields, measured={"variance_ratio": [b["variance_ratio"], c["variance_ratio"]],
                                     "variance_ratio_by_layer": [list(b["variance_ratio_by_layer"]),
                                                                 list(c["variance_ratio_by_layer"])],
                                     "layer": int(c["layer"])},
                 holds=holds, note="" if holds else f"farther from parity than softmax: {layers}")


def table_one_seed(candidate: dict, baseline: dict, paper: dict, setting: str = "") -> Claim:
    """One seed of the paper's pre-training table: head-wise RMSNorm lowers the first token's DomRatio (after the
    second layer's input norm, :func:`first_token_dom_ratio_by_layer`) **and** raises the last layer's effective rank
    against softmax of the same seed; either the other way does not hold, and the note says which half failed."""
    c, b = _numbers(candidate), _numbers(baseline)
    direct = "layer" in c and "layer" in b
    at = f" after the RMSNorm that reads layer {c['layer'] + 1}'s output" if direct else ""
    parts = {"disparity": (c["dom_ratio"] < b["dom_ratio"],
                           f"first-token DomRatio{at} {b['dom_ratio']:.2f} -> {c['dom_ratio']:.2f}"),
             "rank": (c["effective_rank"] > b["effective_rank"],
                      f"effective rank {b['effective_rank']:.1f} -> {c['effective_rank']:.1f}")}
    measured = {"dom_ratio": [b["dom_ratio"], c["dom_ratio"]],
                "effective_rank": [b["effective_rank"], c["effective_rank"]]}
    if direct:
        measured |= {"dom_ratio_by_layer": [list(b["dom_ratio_by_layer"]), list(c["dom_ratio_by_layer"])],
                     "layer": int(c["layer"])}
    holds = all(ok for ok, _ in parts.values())
    note = "" if holds else "; ".join(f"the {name} half {'holds' if ok else 'does not'}: {text}"
                                      for name, (ok, text) in parts.items())
    arxiv, source = claim_source(paper, "headwise_rmsnorm")
    published = paper["variants"].get("headwise_rmsnorm", {})
    base = paper["variants"].get("softmax", {})
    return Claim(id=_id(TABLE_ID, setting), source=source, paper=arxiv,
                 statement="head-wise RMSNorm lowers the first token's dimension disparity (DomRatio after the second "
                           "layer's input RMSNorm) and raises the effective rank of the last layer's states against "
                           "softmax -- the two numbers of the paper's pre-training table",
                 rule="in each training seed against softmax of the same seed: DomRatio lower and effective rank "
                      "higher (holds); either the other way does not hold; seeds that disagree: unsettled",
                 published={"dom_ratio": [base.get("dom_ratio"), published.get("dom_ratio")],
                            "effective_rank": [base.get("effective_rank"), published.get("effective_rank")]},
                 measured=measured, holds=holds, note=note, follows=PARITY_FOLLOWS,
                 adapted=PARITY_ADAPTED if direct else f"{PARITY_ADAPTED}; {PARITY_ADAPTED_CHECKPOINT}",
                 at_init=None, quantities=TABLE_QUANTITIES)


# The parity claim's control (``at_init=True``): the same comparison on the weights each run's training started from
# (:func:`with_parity` ``at_init``). Measured on the CPU profile: head-wise RMSNorm's first-layer ratio is 1.1-1.6 there
# against softmax's ~17 -- its norm sets each head output's RMS to 1 at every position by construction, so the parity
# is the architecture's, which is what the paper claims of it; a control that holds says so, it does not void the claim.
PARITY_CONTROL_NOTE = ("on the untrained weights of the same seeds (step 0) head-wise RMSNorm's outputs are near "
                       "parity too: its norm sets every head output's RMS to 1 at every position by construction, "
                       "so the "
                       "parity is the architecture's -- what the paper claims of it -- not something training makes")


def control_notes(claim: Claim) -> str:
    """The control note the notebook attaches to ``claim`` (:data:`PARITY_CONTROL_NOTE` for the parity claim when its
    control holds; else "", letting :func:`~sinklib.core.claims.with_control` say what the control gave)."""
    return PARITY_CONTROL_NOTE if claim.id.startswith(PARITY_ID) else ""


def _mean(values: Sequence):
    """The element-wise mean of equally shaped numbers or nested lists."""
    if isinstance(values[0], list):
        return [_mean([v[i] for v in values]) for i in range(len(values[0]))]
    return sum(values) / len(values)


def _over_seeds(one, candidate: Sequence[dict], baseline: Sequence[dict], paper: dict, seeds: Sequence[int],
                setting: str, key) -> Claim:
    """``one`` (:func:`parity_one_seed` / :func:`table_one_seed`) on each training seed (candidate seed i against
    baseline seed i), then :func:`~sinklib.core.claims.over_draws`; ``measured``: [softmax, head-wise RMSNorm] per
    quantity, means over the seeds (the ``_by_layer`` ones per layer; ``layer``: the layer judged)."""
    n = min(len(candidate), len(baseline))
    per_seed = [one(candidate[i], baseline[i], paper, setting) for i in range(n)]
    if len({tuple(c.measured) for c in per_seed}) > 1:
        raise InputError("some runs carry parity measures and some do not: measure every run with parity.with_parity")
    judged = per_seed[0].measured != {}
    claim = over_draws(per_seed, f"{n} training seeds ({', '.join(str(s) for s in list(seeds)[:n])})",
                       key=key if judged else None)
    mean = {k: v if k == "layer" else _mean([c.measured[k] for c in per_seed])
            for k, v in per_seed[0].measured.items()}
    return replace(claim, measured=mean | {"over": f"mean over {n} seeds" if n > 1 else "one seed"},
                   control_note="control not run: parity compares two trained models; at step 0 neither has been "
                                "trained, so there is nothing to restore")


def parity_claim_over_seeds(candidate: Sequence[dict], baseline: Sequence[dict], paper: dict,
                            seeds: Sequence[int], setting: str = "") -> Claim:
    """:func:`parity_one_seed` over the training seeds; ``spread``: each seed's variance ratio, head-wise RMSNorm over
    softmax."""
    return _over_seeds(parity_one_seed, candidate, baseline, paper, seeds, setting,
                       lambda c: c.measured["variance_ratio"][1] / c.measured["variance_ratio"][0])


def table_claim_over_seeds(candidate: Sequence[dict], baseline: Sequence[dict], paper: dict,
                           seeds: Sequence[int], setting: str = "") -> Claim:
    """:func:`table_one_seed` over the training seeds; ``spread``: each seed's DomRatio, head-wise RMSNorm over
    softmax."""
    return _over_seeds(table_one_seed, candidate, baseline, paper, seeds, setting,
                       lambda c: c.measured["dom_ratio"][1] / c.measured["dom_ratio"][0])
