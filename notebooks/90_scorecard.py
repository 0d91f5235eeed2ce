# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 90 · The reproduction scorecard
#
# Every notebook records each published claim it tests as a record: what the paper claims and where, the published
# and measured values, the model and profile, the rule that decided it, and the verdict -- holds, does not hold,
# unsettled, or cannot be judged here (with the reason). This notebook gathers every `claims.json` that `make figures` wrote into
# one table and two figures. Nothing is filtered: a claim that failed stays in, with its numbers. The column "on"
# says what a claim was measured on: a **pretrained** model (offline, the language models are 4-bit GGUF checkpoints
# dequantised to float32; DINOv2-S comes from an ONNX graph), a **stand-in** built here (the upcycled MoE, the
# LLaVA-style model), or small models **trained here** (03); "needs GPU" marks claims only the GPU profile's models
# can judge (e.g. high-norm tokens, which small ViTs do not have). The same table is `python -m sinklib scorecard`.
#
# **Counting words**, the same everywhere (the gallery too): a **claim** is one statement of a paper; a **test** is
# one claim judged on one model; a **record** is one entry of a notebook's `claims.json` -- a test judged in two
# notebooks is two records and one test.

# %% tags=["parameters"]
profile = "cpu"  # the profile the other notebooks ran with (only recorded here)
model = ""  # unused: the scorecard reads what the notebooks measured
device = ""
seed = 0
out_dir = "../figures/90_scorecard"
figures_dir = "../figures"  # where the other notebooks' claims.json are (make figures passes its own)

# %%
import pandas as pd

from sinklib.core import plotting
from sinklib.pipeline import notebook
from sinklib.reproduction import scorecard, scorecard_plots

nb = notebook.start("90_scorecard", profile, model, device, seed, out_dir, families=None, label="scorecard")
fig_dir = nb.fig_dir
rows = scorecard.collect(figures_dir)
summary = scorecard.to_json(rows)
n_claims = len({scorecard.base_id(c["id"]) for c in summary["claims"]})
print(f"{len(summary['claims'])} tests of {n_claims} claims ({len(rows)} records from "
      f"{len({r.notebook for r in rows})} notebooks; a test judged in two notebooks counts once); the papers' tests: "
      f"{summary['counts']}")

# %% [markdown]
# ## Every claim
# Besides the verdict, each row says how far to trust it: **draws** -- the verdict of each draw where the evidence
# depends on a random one (random tokens, sampled windows, a stand-in's training, trained seeds); a claim holds or
# fails when every draw that can be judged agrees (a draw that cannot be judged is reported beside), else it is
# **unsettled** -- as is a value that sits within its measured cross-machine spread of the cut that decides it.
# **control** -- the same rule on randomly initialised
# weights of the same configuration, beside what the paper predicts there: an effect that training makes (a sink,
# a massive activation) must fail on random weights, or the rule cannot tell a trained model from noise -- such a
# claim is counted as "cannot be judged here", whatever its note. A claim judged on the same model in two notebooks
# is one row ("also judged in"). **Not a paper's claim** -- an implementation check (the sink cache stays bounded:
# the code does what StreamingLLM prescribes) or this project's own question (does head-wise RMSNorm remove the sink?
# its paper claims faster convergence and parity across positions): listed, never counted per paper or in the verdict
# counts.
# **follows** -- the paper's definition the rule transcribes, and where the authors' code is.

# %%
pd.set_option("display.max_colwidth", 80)
table = pd.DataFrame([{
    "verdict": r.verdict, "notebook": r.notebook, "claim": r.statement, "paper": r.paper, "model": r.model,
    "on": r.kind + (", needs GPU" if r.needs_gpu else ""), "draws": r.draws_text, "random-weight control":
    r.control_text, "follows": r.follows + (f" (adapted: {r.adapted})" if r.adapted else ""),
    "reason / caveat": r.reason, "also judged in": ", ".join(r.also_in),
} for r in scorecard.distinct(rows)])
table

# %%
contradicting = summary["controls_contradicting"]
print(f"claims whose rule holds on random weights where the paper says training makes the effect: "
      f"{len(contradicting)}" + "".join(f"\n  {c}" for c in contradicting))
# implementation checks and this project's own questions are listed, never counted as a paper's claim
print(f"{summary['paper_claims']} of the {len(summary['claims'])} tests are of papers' claims; not counted as "
      f"a paper's:" + "".join(f"\n  {kind}: {', '.join(ids)}" for kind, ids in summary["not_paper_claims"].items()))

# %% [markdown]
# ## Like with like: the run's ratios against the paper's
# A number measured here on a 135M model and Bible text cannot be divided by the paper's on Llama-2 and PG19: the
# two differ by model and data before any claim is tested. What can be compared is a *ratio within one run* -- two
# quantities measured on the same model, the same text or training (window-only perplexity over sinks + window;
# a gated variant's first-token attention over its own softmax baseline) -- against the paper's ratio of the same
# two quantities from its own table. Each row shows both as bars from 1 (where the two quantities are equal): the
# paper's open, the run's filled and coloured by the claim's verdict, its end marker saying whether it was measured
# on a pretrained model, a stand-in or a model trained here. The side of 1 is the direction, which is what the
# verdicts' cuts read; the lengths differ by scale (a 135M model on Bible text against the paper's), so a long gap
# between the two is not a disagreement. A claim with no such pair of numbers on both sides is left out of the figure and counted in its
# caption, as is a ratio that is zero or infinite on either side (a log axis cannot show it).

# %%
like = scorecard.like_for_like(rows)
ratios, not_finite = like["ratios"], like["not_finite"]
left_out = "".join(f" {n['id']} · {n['label']}: {n['why']}." for n in not_finite)
split = scorecard.by_paper_and_kind(rows)
repeated = [e for e in summary["by_paper"] if e["distinct"] < e["tested"]]
with plotting.style():
    fig = scorecard_plots.within_run_ratios(ratios)
    plotting.save(fig, fig_dir / "fig01_measured_vs_published",
                  f"{len(ratios)} like-for-like ratios from {len({r['id'] for r in ratios})} of the "
                  f"{len(summary['claims'])} tests, one row each, named by paper, the two quantities and the model, "
                  f"grouped by quantity: each ratio as a bar from 1 (log scale) -- the paper's from its own table "
                  f"(upper, open, diamond) and this run's (lower, filled; both numbers from the same model and the "
                  f"same text or training; colour: the claim's verdict; end marker: circle a pretrained model, "
                  f"square a stand-in, triangle a model trained here). The side of 1 is the direction the verdicts "
                  f"read; the lengths differ by scale; dotted: 1, the two quantities equal. {len(like['without'])} "
                  f"tests have no like-for-like ratio and "
                  f"are left out; "
                  f"{len(not_finite)} ratios are left out for a zero or infinite value on either side." + left_out)
    fig = scorecard_plots.by_paper(split)
    plotting.save(fig, fig_dir / "fig02_by_paper",
                  f"{summary['paper_claims']} tests from {len(summary['by_paper'])} papers (implementation "
                  f"checks and this project's own questions left out), one bar per paper and what the tests were "
                  f"measured on (hatched: stand-in // or trained here ..): how many hold, do not hold, are unsettled "
                  f"or cannot be judged here. "
                  + (" ".join(f"{e['paper']}: {e['tested']} tests of {e['distinct']} claims (the same claims judged "
                              f"on several models)." for e in repeated)))
pd.DataFrame(summary["by_paper"])

# %%
nb.headline |= {"counts": summary["counts"], "by_paper": summary["by_paper"], "claims": len(summary["claims"]),
                "paper_claims": summary["paper_claims"], "not_paper_claims": summary["not_paper_claims"],
                "records": len(rows),
                "stand_in_claims": sum(r.kind == "stand-in" for r in rows),
                "needs_gpu": [r.id for r in rows if r.needs_gpu], "controls_contradicting": contradicting,
                "unsettled": summary["unsettled"],
                "like_for_like": {"ratios": len(ratios), "claims": len({r["id"] for r in ratios}),
                                  "without": len(like["without"]), "not_finite": len(not_finite)}}
nb.close()
