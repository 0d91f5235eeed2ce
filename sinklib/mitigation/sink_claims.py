"""The sink claims of ``03_mitigation``, one record per attention variant: the softmax baseline "grows a
first-token sink" (Gu et al., arXiv 2410.10781), every mitigation "removes it" (its own paper: Qiu et al.'s gates,
softpick, sigmoid attention, the off-by-one softmax, gpt-oss's sink logit, Sun et al.'s KV bias; for head-wise
RMSNorm this project's own question).

The rule is :func:`sinklib.mitigation.verdicts.sink_verdict`'s (its cuts: :data:`REMOVES_RULE`, its gates:
:data:`REMOVES_GATES`); each variant's paper and source come from ``data/reference/mitigations.json``
(:func:`claim_source`), what each rule follows and where it is adapted from :data:`FOLLOWS` and :data:`ADAPTED`.
:func:`sink_claim` judges one table; :func:`sink_claim_over_seeds` judges each training seed alone (paired with the
softmax run of the same seed), then :func:`~sinklib.core.claims.over_draws` over the seeds; :func:`control_note`
says what the step-0 control of a claim means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pandas as pd

from sinklib.core import quantities as q
from sinklib.core.claims import OWN_QUESTION, Claim, over_draws
from sinklib.mitigation.comparison import final_table
from sinklib.mitigation.verdicts import RISING, SEED_SHARE_MARGIN, SLOPE_MARGIN, grows_sink, sink_verdict

# What each rule follows (the papers' definitions and, where the authors published code, repo:path:function).
GU_SINK = ("Gu et al. arXiv 2410.10781, the sink metric: alpha_k = mean over queries t >= k of A_tk, Sink_k^eps = "
           "fraction of heads with alpha_k > eps = 0.3; sail-sg/Attention-Sink:eval_sink_open_source.py:"
           "compute_attention_sink")
FOLLOWS = {
    "softmax": GU_SINK + "; the sink is learned in pre-training (Sec. 4, Fig. 4: it emerges after 1k-2k steps)",
    "headwise_rmsnorm": "arXiv 2605.06611 (head-wise RMSNorm after value aggregation, before W_O; gain shared across "
                        "heads): no public code",
    "gated_headwise": "Qiu et al. arXiv 2505.06708, gate after SDPA (G1), Table 4 (head-wise gate "
                      "Y' = Y sigmoid(X W_g)); qiuzh20/gated_attention:modeling_qwen3.py:Qwen3Attention.forward "
                      "(headwise_attn_output_gate)",
    "gated_elementwise": "Qiu et al. arXiv 2505.06708, gate after SDPA (G1), Table 4 (element-wise gate); "
                         "qiuzh20/gated_attention:modeling_qwen3.py:Qwen3Attention.forward "
                         "(elementwise_attn_output_gate)",
    "sigmoid": "Gu et al. arXiv 2410.10781, attention-operation experiments (sigmoid attention without "
               "normalisation, sink rate 0.44%); "
               "sail-sg/Attention-Sink:lit_gpt/model_attn_sim.py (config "
               "configs/attnsim/tinyllama_60m_sim_sigmoid_no_norm.yaml)",
    "softmax_off_by_one": "Miller 2023, blog post 'Attention is off by one' (exp(l_i) / (1 + sum_j exp(l_j))): "
                          "no public code",
    "softpick": "Zuhri et al. arXiv 2504.20966, the softpick function relu(exp(x) - 1) / sum |exp(x) - 1|; "
                "zaydzuhri/softpick-attention:naive_softpick_attn.py:softpick",
    "sink_logit": "gpt-oss model card (learned per-head sink logit in the softmax denominator, column dropped); "
                  "openai/gpt-oss:gpt_oss/torch/model.py:sdpa",
    "kv_bias": "Sun et al. arXiv 2402.17762, explicit attention biases (k', v' per head); Gu et al.'s code "
               "sail-sg/Attention-Sink:lit_gpt/model_kv_bias.py:CausalSelfAttention.forward",
}
ADAPTED = {
    "softmax": "sink rate over (sequence, layer, head) of a 2 x 2-head TinyLM trained here (the paper: pretrained "
               "LMs and 60M LLaMA runs); 'grows' needs sink rate >= 5% and alpha_0 >= 2x uniform (H_T / T) -- the "
               "paper gives no cut for 'has a sink'",
    "removes": "'removes' = sink rate < 2% and alpha_0 <= 1.5x uniform on the weights and on the row-normalised "
               "shares, the strongest head no longer rising (our cuts, the slope's with a cross-machine margin; the "
               "papers compare first-token attention with their softmax baseline at paper scale); judged per "
               "training seed, holds only if all agree",
    "sigmoid": "our sigmoid has a learnable bias initialised at -log T (Gu et al.'s 0.44% is without a bias)",
    "gated_headwise": "the gate is its own Linear (with bias) on the block's normalised input; theirs is an extra "
                      "slice of q_proj",
    "gated_elementwise": "the gate is its own Linear (with bias) on the block's normalised input; theirs is an extra "
                         "slice of q_proj",
    "kv_bias": "v' is initialised at zero (Gu et al.'s code: N(0, 0.02))",
    "headwise_rmsnorm": "gain initialised at 1 (section 6 also tries 0.1)",
}


REMOVES_RULE = ("sink_verdict says 'removes' (sink rate < 2%, alpha_0 and share <= 1.5x uniform); reduces / keeps / "
                "strengthens / shrinks the rows do not hold, whatever the strongest head's slope")
REMOVES_GATES = (f"a possible removal is unsettled when alpha_0 or the row-normalised share lies within its margin of "
                 f"1.5x uniform, or a sink rate (on the weights or the shares) within its margin of 2% -- the larger "
                 f"of 2 pooled seed sd's and the measured cross-machine spread (data/reference/cross_machine_03.json)"
                 f" -- or the strongest head's late slope within {SLOPE_MARGIN} of {RISING} per 100 steps, and cannot "
                 f"be judged when that head is still rising beyond it")
SINK_KEYS = {"first_attention": "first-token attention", "sink_rate": "sink rate", "first_share": "first-token share"}
# What the numbers of a sink claim are: alpha_0, the sink rate and the row-normalised share, each a fraction (the
# spread: per-seed alpha_0 and, under per_seed, every measured number seed by seed); a convergence claim's losses.
_WHICH_CUT = ("an unsettled removal's decisive cut (alpha_0 at 1.5U, the share at 1.5U, the share sink rate at 2%, the "
              "late slope at RISING) can differ between machines when its numbers lie within the margins of two cuts; "
              "the numbers themselves are compared in measured and spread")
SINK_QUANTITIES = {"first_attention": q.share("alpha_0"), "sink_rate": q.share("fraction of heads"),
                   "first_share": q.share("row-normalised share"), "@spread": q.share("alpha_0"),
                   "@spread.per_seed.sink_rate": q.share("fraction of heads"),
                   "@spread.per_seed.first_share": q.Quantity(
                       kind=q.Kind.SHARE, unit="row-normalised share", abs_tol=SEED_SHARE_MARGIN,
                       why="one seed's row-normalised share moved by up to SEED_SHARE_MARGIN across machines "
                           "(data/reference/cross_machine_03.json)"),
                   # which cut decides an unsettled removal (alpha_0's 1.5U, the share's, its rate's 2%, the slope's)
                   # can change with the machine where the numbers sit within the margins of two cuts: the verdict
                   # is compared, the cut it names and that cut's margin are reported apart
                   "@margin.cut": q.Quantity(kind=q.Kind.MARGIN, comparable=False, why=_WHICH_CUT),
                   "@margin.spread": q.Quantity(kind=q.Kind.MARGIN, comparable=False, why=_WHICH_CUT),
                   "@margin.value": q.Quantity(kind=q.Kind.MARGIN, comparable=False, why=_WHICH_CUT)}


# Variants whose paper does not claim that they remove the sink: "removes" is this project's own question there, and
# the record's ``paper`` says so (:data:`sinklib.core.claims.OWN_QUESTION`: not counted as the paper's claim).
OWN_QUESTIONS = {
    "headwise_rmsnorm": "this project's own question, not a claim of arXiv 2605.06611: the paper claims that head-wise "
                        "RMSNorm converges faster and restores statistical parity across positions (the attention "
                        "outputs' variance at position 0 against the later positions'; in its table lower dimension "
                        "disparity, higher effective rank), tested as origin.headwise_rmsnorm_converges_faster, "
                        "origin.headwise_rmsnorm_restores_parity and "
                        "origin.headwise_rmsnorm_lowers_disparity_raises_rank",
}


def claim_source(reference: Mapping, variant: str) -> tuple[str, str]:
    """``(paper, source)`` of ``variant``'s claim: the arXiv id of the paper the claim comes from ("" where there is
    none, e.g. a blog post) and a source that names that paper first -- ``reference["sources"][variant]`` of
    ``data/reference/mitigations.json``; without such an entry, ("", the file's shared ``source``)."""
    own = reference.get("sources", {}).get(variant)
    return (own["paper"], own["source"]) if own else ("", reference["source"])


def sink_measured(table: pd.DataFrame, variant: str) -> dict:
    """The numbers a sink claim records: alpha_0, sink rate and first-token share of ``variant``, the mean over the
    table's seeds (as the notebook's table shows them), with ``over`` saying so ("mean over 2 seeds")."""
    seeds = int(table.loc[variant, ("seeds", "")])
    return {key: float(table.loc[variant, (label, "mean")]) for key, label in SINK_KEYS.items()} | {
        "over": f"mean over {seeds} seeds" if seeds > 1 else "one seed"}


def sink_claim(variant: str, table: pd.DataFrame, uniform: float, runs: Sequence[dict], paper: dict,
               baseline: str = "softmax") -> Claim:
    """One variant's record: the baseline "grows a sink" (:func:`grows_sink`), every other variant "removes it"
    (:meth:`SinkVerdict.removal`: holds, does not, unsettled -- with the margin it came within -- or cannot be
    judged). ``paper`` / ``source``: :func:`claim_source`.

    ``at_init``: False for "grows" (Gu et al.: the sink is learned -- an untrained model has none); None for
    "removes" (the papers predict nothing at initialisation, where there is no sink to remove)."""
    verdict = sink_verdict(variant, table, uniform, runs=runs, baseline=baseline)
    published = paper["variants"].get(variant)
    measured = sink_measured(table, variant)
    arxiv, source = claim_source(paper, variant)
    if variant == baseline:
        return Claim(id=f"mitigation.{variant}_grows_sink", source=source, paper=arxiv,
                     statement="softmax attention trained from scratch grows a first-token sink",
                     rule="sink rate >= 5% and alpha_0 >= 2x uniform attention", published=published,
                     measured=measured, holds=grows_sink(table, baseline, uniform), note=verdict.line,
                     follows=FOLLOWS.get(variant, GU_SINK), adapted=ADAPTED["softmax"], at_init=False,
                     quantities=SINK_QUANTITIES)
    adapted = ADAPTED["removes"] + (f"; {ADAPTED[variant]}" if variant in ADAPTED else "")
    holds, unsettled, margin = verdict.removal()
    statement = f"{variant} removes the first-token sink"
    if variant in OWN_QUESTIONS:  # the method's paper claims something else: asked here, counted as no paper's
        arxiv, source = OWN_QUESTION, f"{OWN_QUESTIONS[variant]}; the method: {source}"
        statement = f"(this project's question) does {variant} remove the first-token sink?"
    return Claim(id=f"mitigation.{variant}_removes_sink", source=source, paper=arxiv,
                 statement=statement, rule=f"{REMOVES_RULE}; {REMOVES_GATES}",
                 published=published, measured=measured, holds=holds, unsettled=unsettled, margin=margin,
                 note=verdict.line, follows=FOLLOWS.get(variant, ""), adapted=adapted, at_init=None,
                 quantities=SINK_QUANTITIES)


def seed_draws(runs: Mapping[str, Sequence[dict]], seeds: Sequence[int]) -> str:
    """``draws_of`` for claims judged over the trained seeds: "3 training seeds (0, 1, 2)"."""
    n = min(len(rs) for rs in runs.values())
    return f"{n} training seeds ({', '.join(str(s) for s in list(seeds)[:n])})"


def control_note(variant: str, init_runs: Mapping[str, Sequence[dict]], uniform: float,
                 baseline: str = "softmax") -> str:
    """What the step-0 control of ``variant``'s claim means. "removes": an untrained softmax has no sink to remove,
    so the rule cannot be judged there (control None). "grows": empty when the control fails as Gu et al. predict
    (the Recorder then has nothing to explain); when it holds, the step-0 numbers, so that the record says why."""
    a0 = [r["checkpoints"][0]["first_attention"] for r in init_runs[baseline]]
    where = (f"the same TinyLM at step 0 (untrained, seeded like each run): {baseline} alpha_0 "
             f"{min(a0):.3f}-{max(a0):.3f} against uniform {uniform:.3f}")
    if variant != baseline:
        return f"an untrained model has no sink to remove, so 'removes' cannot be judged on {where}"
    init_table = final_table({baseline: init_runs[baseline]})
    return "" if not grows_sink(init_table, baseline, uniform) else f"the rule holds on {where}"


def sink_claim_over_seeds(variant: str, runs: Mapping[str, Sequence[dict]], uniform: float, paper: dict,
                          seeds: Sequence[int], baseline: str = "softmax") -> Claim:
    """:func:`sink_claim` judged on each training seed alone (``variant``'s run of seed i against ``baseline``'s
    run of seed i), then :func:`~sinklib.core.claims.over_draws`: holds only if every seed's verdict holds;
    unsettled when the seeds disagree or one is itself unsettled. The note keeps the pooled (mean +- sd over seeds)
    verdict line beside the per-seed outcomes. ``measured`` is the mean over the seeds (:func:`sink_measured`, the
    notebook table's numbers); ``spread`` the per-seed alpha_0 (min, max, values) and, under ``per_seed``, every
    measured number seed by seed; ``margin`` the first unsettled seed's, else the one that came closest to its cut."""
    n = min(len(runs[variant]), len(runs[baseline]))
    per_seed, outcomes = [], []
    for i in range(n):
        one = {baseline: [runs[baseline][i]], variant: [runs[variant][i]]}
        table = final_table(one)
        per_seed.append(sink_claim(variant, table, uniform, one[variant], paper, baseline))
        outcomes.append(sink_verdict(variant, table, uniform, runs=one[variant], baseline=baseline).outcome)
    pooled_table = final_table({k: runs[k][:n] for k in {baseline, variant}})
    pooled = sink_verdict(variant, pooled_table, uniform, runs=runs[variant][:n], baseline=baseline)
    seeds_text = ", ".join(f"seed {s}: {o}" for s, o in zip(seeds, outcomes))
    rule = (f"{REMOVES_RULE if variant != baseline else per_seed[0].rule}, judged on each training seed alone "
            f"(against the {baseline} run of the same seed); "
            f"{'' if variant == baseline else REMOVES_GATES + '; '}holds only if every seed holds")
    note = f"per seed: {seeds_text}; over seeds: {pooled.line}"
    per_seed = [replace(c, note=note, rule=rule) for c in per_seed]
    claim = over_draws(per_seed, seed_draws({variant: runs[variant][:n]}, seeds),
                       key=lambda c: c.measured["first_attention"])
    spread = (claim.spread or {}) | {"per_seed": {k: [c.measured[k] for c in per_seed] for k in SINK_KEYS}}
    return replace(claim, measured=sink_measured(pooled_table, variant), spread=spread,
                   margin=decisive_margin(per_seed))


def decisive_margin(claims: Sequence[Claim]) -> dict | None:
    """The margin a claim judged over draws reports: the first unsettled draw's, else the one whose value came
    closest to its cut (None when no draw rests on a cut)."""
    unsettled = [c.margin for c in claims if c.unsettled and c.margin]
    if unsettled:
        return unsettled[0]
    return min((c.margin for c in claims if c.margin), key=lambda m: abs(m["value"] - m["cut"]), default=None)
