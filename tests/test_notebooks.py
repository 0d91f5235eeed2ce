"""Smoke runs: every notebook executed by papermill with the smoke profile, then its headline JSON checked."""

import functools
import json
import re
from functools import partial
from pathlib import Path

import pytest

from sinklib.core import claims, claims_file
from sinklib.pipeline import gallery, runner
from tests import browser
from tests.kernel_startup import kernel_env

pytestmark = pytest.mark.notebook
NOTEBOOKS = runner.discover()
WRITES_CLAIMS = {"00_tour", "01_utilization", "02_interpretation", "03_mitigation", "10_llm", "11_moe", "12_mllm", "13_vit"}
# 03, 11 and 12 build something into the cache (training runs, the upcycled MoE and its trained router, the LLaVA-style
# stand-in); the others read only pretrained weights, whose forwards are bit-identical run to run
# (benchmarks/determinism.py: threads, PYTHONHASHSEED, deterministic kernels).
# notebooks whose numbers depend on the threads or the instruction set (bf16 training, 2- and 4-bit KV rounding): run a
# second time under another setting -- two threads a notebook (make figures JOBS=1) and oneDNN capped to an instruction
# set whose bf16 matmul kernel differs from the one this host runs (tests/second_setting.py: AMX ->
# AVX512_CORE_BF16, AVX512_CORE_BF16 -> AVX512_CORE's jit gemm, ...; a cap that is a no-op here would compare nothing)
# -- their verdicts must not change. The builds among them are rebuilt from an empty cache there. 01 (float32
# forwards; its 2- and 4-bit KV ratios judged by paired intervals) gave the same verdicts under such a setting; its
# second run (342 s) was dropped to keep make test within its 15 minutes; so was 11's (219 s): it trains its router in
# float32 on one thread (MKL / ATen, which the oneDNN cap does not touch), so its rebuild ran the same kernels again --
# it gave the same verdicts, every value within its tolerance, in the last make test that ran it (f779400).
VARIES = {"03_mitigation", "12_mllm"}  # the builds trained in bfloat16 autocast: oneDNN's kernels


@functools.cache
def second_setting() -> tuple[dict[str, str], dict, dict]:
    """(environment, this host's bf16 kernel, the kernel under it): probed once per session."""
    from tests.second_setting import second_setting as probe

    return probe(threads=2)


# Estimated seconds of each smoke run and same-seed rebuild (one thread, beside another run): the pool starts the
# longest first. Measured by make test's "sinklib jobs" summary; only the order depends on them.
SMOKE_SECONDS = {"00_tour": 33, "01_utilization": 46, "02_interpretation": 44, "03_mitigation": 25, "10_llm": 259,
                 "11_moe": 83, "12_mllm": 31, "13_vit": 28}
REBUILD_SECONDS = {"03_mitigation": 37, "12_mllm": 245}  # under AVX512_CORE's jit gemm here
BASE_CONVERSIONS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "dinov2-s")  # dequantised / ONNX weights
# What a rebuild loads from the base conversions: made in the shared cache before it starts, so that a fresh clone
# does not convert them twice (the rebuild used to start beside the smoke runs, find none, and convert its own: ~58 s)
REBUILD_NEEDS = {"12_mllm": ("dinov2-s", "smollm2-135m")}


def plan_jobs(tmp_path_factory) -> dict:
    """Every notebook's smoke run but the scorecard's (it reads the others': :func:`executed` runs it after them),
    and the second run of :data:`VARIES` under :func:`second_setting`, from a cache that holds only the base
    conversions."""
    root, again = _folder(tmp_path_factory, "smoke"), _folder(tmp_path_factory, "same_seed")
    planned = {f"smoke:{p.stem}": (SMOKE_SECONDS.get(p.stem, 60), partial(_smoke, p, root, {}))
               for p in NOTEBOOKS if p.stem != "90_scorecard"}
    for p in NOTEBOOKS:
        if p.stem in VARIES:
            planned[f"rebuild:{p.stem}"] = (REBUILD_SECONDS.get(p.stem, 60), partial(_rebuild, p, again))
    return planned


def _folder(tmp_path_factory, name: str):
    """The session's ``name`` folder (the same path for the plan and the fixtures that read its runs)."""
    folder = tmp_path_factory.getbasetemp() / name
    folder.mkdir(exist_ok=True)
    return folder


def _smoke(path, root, env: dict):
    """The smoke run of ``path``, every saved figure linted (:mod:`tests.figure_lint`) into the build folder's
    ``figure-reports/<notebook>/``."""
    lint = kernel_env(root / "ipython", figure_reports=root / "build" / "figure-reports")
    return runner.run_isolated(path, env={**runner.thread_env(1), **lint, **env}, profile="smoke", model="", device="",
                               seed=0, figures_dir=root / "figures", build_dir=root / "build", progress_bar=False)


def _rebuild(path, root):
    """The smoke run of ``path`` again under :func:`second_setting`, into ``root/cache``: the base conversions linked
    in (those already made; a missing one is converted there), nothing else -- so the run builds its trained and
    stitched models anew."""
    from sinklib.models.conversion import build_once, convert_gguf, converted_path
    from sinklib.models.onnx_vit import build_dinov2_small

    for name in REBUILD_NEEDS.get(path.stem, ()):  # made once, in the shared cache (locked: a smoke run making the
        build_once(name, build_dinov2_small) if name == "dinov2-s" else convert_gguf(name)  # same one is waited for)
    cache = root / "cache"
    (cache / "converted").mkdir(parents=True, exist_ok=True)
    for name in BASE_CONVERSIONS:
        link = cache / "converted" / name
        if converted_path(name).exists() and not link.is_symlink():
            try:
                link.symlink_to(converted_path(name), target_is_directory=True)
            except FileExistsError:  # the other rebuild linked it, or converted it there
                pass
    return _smoke(path, root, {"SINKLIB_CACHE": str(cache), **second_setting()[0]})


@pytest.fixture(scope="module")
def executed(jobs, tmp_path_factory):
    """Every notebook's smoke run (smoke profile); map stem -> (result, figures folder)."""
    results = {p.stem: jobs.result(f"smoke:{p.stem}") for p in NOTEBOOKS if p.stem != "90_scorecard"}
    root = _folder(tmp_path_factory, "smoke")
    for p in NOTEBOOKS:
        if p.stem == "90_scorecard":
            results[p.stem] = _smoke(p, root, {})
    return {stem: (res, root / "figures" / stem) for stem, res in results.items()}


FIGURE_FILE = re.compile(r"^fig\d+[a-z]?_[\w.-]+\.(png|pdf|txt|title\.txt)$")
RECORDS = {"claims.json", "headline.json", "takeaways.json"}


def figure_folder_strays(folder: Path) -> list[str]:
    """Files in a notebook's figures folder that are neither a figure (PNG, PDF, caption, title), a record the
    gallery reads, the notebook's HTML page, nor a table the notebook writes (``*.csv`` / ``*.md``)."""
    stem = folder.name
    return sorted(p.name for p in folder.iterdir()
                  if not (FIGURE_FILE.match(p.name) and not p.name.endswith(".layout.txt")) and p.name not in RECORDS
                  and p.name != f"{stem}.html" and p.suffix not in (".csv", ".md"))


def test_figure_folder_strays_names_a_diagnostic_left_among_figures(tmp_path):
    folder = tmp_path / "00_tour"
    folder.mkdir()
    for name in ("fig01_maps.png", "fig01_maps.pdf", "fig01_maps.txt", "fig01_maps.title.txt", "claims.json",
                 "00_tour.html", "final_table.csv", "fig01_maps.layout.txt", "notes.log"):
        (folder / name).write_text("x")
    assert figure_folder_strays(folder) == ["fig01_maps.layout.txt", "notes.log"]


@pytest.mark.parametrize("stem", [p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_writes_figures(executed, stem):
    res, folder = executed[stem]
    assert res.ok, res.message
    pngs = list(folder.glob("*.png"))
    assert pngs and all(p.with_suffix(".txt").exists() and p.with_suffix(".pdf").exists() for p in pngs)
    assert json.loads((folder / "headline.json").read_text())["profile"] == "smoke"
    # plotting.save reports colliding texts, covered data and a panel or style the caption does not explain, into
    # the build folder's figure-reports/NAME (never among the figures)
    reports_dir = folder.parents[1] / "build" / "figure-reports" / stem
    reports = {p.name: p.read_text() for p in reports_dir.glob("*.layout.txt")}
    assert not reports, reports
    assert not figure_folder_strays(folder), figure_folder_strays(folder)
    if stem in WRITES_CLAIMS:  # the verdicts as records
        records = claims_file.load(folder / "claims.json")
        assert records and all(c.model and c.profile == "smoke" and c.rule for c in records)


@pytest.mark.parametrize("stem", sorted(WRITES_CLAIMS))
def test_takeaways_are_rendered_from_the_run(executed, stem):
    """Every "What we saw" paragraph is rendered from the run's results (no hand-typed measured number in any
    markdown cell that says "What we saw"), and the runner kept them beside the figures for the gallery."""
    from sinklib.core import takeaways

    res, folder = executed[stem]
    assert res.ok, res.message
    problems, rendered = takeaways.audit(json.loads((folder.parents[1] / "build" / "notebooks" / f"{stem}.ipynb")
                                                    .read_text()))
    assert not problems and rendered >= 1, (problems, rendered)
    kept = json.loads((folder / "takeaways.json").read_text())["takeaways"]
    assert len(kept) == rendered and all(t["markdown"].startswith("**What we saw") for t in kept)
    # each takeaway sits beside the figures it reads in the gallery: those it names were saved by this run
    assert any(t["figures"] for t in kept), "no takeaway names a figure"
    assert all((folder / f"{name}.png").exists() for t in kept for name in t["figures"])
    # every number carries what it was measured on; a reader citing "takeaway 3" finds one
    assert not [t["markdown"][:120] for t in kept if takeaways.unmeasured(t["markdown"])]
    assert not takeaways.section_problems([t["section"] for t in kept])


@pytest.mark.parametrize("stem", sorted(WRITES_CLAIMS))
def test_every_claim_records_what_it_follows_its_control_and_draws(executed, stem):
    res, folder = executed[stem]
    assert res.ok, res.message
    for c in claims_file.load(folder / "claims.json"):
        assert c.follows, f"{c.id}: no `follows`"
        assert c.draws and c.draws_of, f"{c.id}: no draws recorded"
        assert c.control is not None or c.control_note, f"{c.id}: no random-weight control and no reason"
        assert not c.control_contradicts or c.control_note, f"{c.id} holds on random weights, unexplained"
        assert c.holds is not False or (c.note or "").strip(), f"{c.id}: does NOT hold with no measured reason"


def test_tour_headline_numbers(executed):
    res, folder = executed["00_tour"]
    assert res.ok, res.message
    h = json.loads((folder / "headline.json").read_text())
    rates = h["sink_rate"]
    assert set(rates) == {"natural", "random", "repeated"} and all(0 <= v <= 1 for v in rates.values())
    assert rates["natural"] > 0.5 and rates["random"] > 0.5 and rates["repeated"] < 0.05  # SmolLM2's shape
    assert h["llama_family_shape_holds"] is True
    assert all(len(v) == 30 for v in h["alpha_first_by_layer"].values())
    assert h["massive"]["dim"] == 507 and h["massive"]["position"] == 0 and h["massive"]["value"] > 1000
    # Sun et al.'s 1000x criterion against the authors' median of the whole layer output: SmolLM2 meets it (~14,000x;
    # against its own token's median, the old normalisation, it was ~500-600x)
    assert h["massive"]["sun_criterion_met"] is True
    assert h["dom_ratio_first_peak"] > 4 * h["dom_ratio_rest_at_peak"]
    assert {p.stem for p in Path(folder).glob("*.png")} == {
        "fig01_attention-maps", "fig02_alpha-heatmap", "fig03_sink-rates", "fig04_alpha-by-layer",
        "fig05_massive-activations", "fig06_dom-ratio", "fig07_mass-vs-context"}
    lengths, mass = h["context_lengths"], h["alpha_first_vs_length_sink_layers"]
    assert lengths == sorted(lengths) and len(mass) == len(lengths) and all(m > 0.3 for m in mass)


def test_interpretation_effects_point_the_right_way(executed):
    """On the offline SmolLM2 every link of the chain shows its direction even at smoke size."""
    res, folder = executed["02_interpretation"]
    assert res.ok, res.message
    h = json.loads((folder / "headline.json").read_text())
    assert 507 in h["massive_dims"] and h["massive"]["strict"] is True  # Sun's layer median: 247 and 507
    v = h["variance"]
    assert v["t0_is_max"][0] and v["ratio_t0_to_second_half"][0] > 2  # variance highest at t = 0 in layer 0
    sn = h["super_neurons"]["chain_neuron"]  # the earliest writer of the massive dimension
    assert sn["layer"] == 1 and 507 in sn["write_dims"] and sn["selectivity"] > 10 and sn["write_share"] > 0.5
    d = h["disparity"]
    assert d["onset_layers"] and d["dom_first_peak"] > 4 * d["dom_rest_at_peak"]
    assert d["super_neuron_layer"] == 1 and d["dom_normed_tensor"].startswith("DomRatio(RMSNorm_2(h^1)")
    lock = h["lock_in"]
    assert lock["positive_sink_vs_other"][0] > 0.9 and lock["cos_sink_vs_other"][0] > lock["cos_sink_vs_other"][1]
    so = h["self_only"]
    assert so["alpha_k_after"] > 5 * so["alpha_k_before"] and so["sink_heads_k_after"] > so["sink_heads_k_before"]
    amp = h["amplification"]
    assert max(amp["centered"]) > 2 * amp["centered"][0] and amp["monotone"] == all(
        b >= a - 0.005 for a, b in zip(amp["centered"], amp["centered"][1:]))
    assert amp["scale"][-1] < 2 * amp["scale"][0]  # the plain-scaling control creates no sink
    ppl = h["bias"]["ppl"]
    assert abs(ppl["set to mean, position 0 only"] / ppl["original"] - 1) < 0.1  # the first token: a bias
    assert ppl["set to zero"] > 2 * ppl["original"]
    assert h["bias"]["holds"] == (abs(ppl["set to mean"] / ppl["original"] - 1) < 0.05)  # every site, recorded
    # with Sun's layer median the edited sites are found in every forward; later positions may hold none (issue 28)
    assert h["bias"]["entries_edited"] > 0 and isinstance(h["bias"]["later_site_tokens"], dict)
    vnr, spread = h["bias"]["value_norm_ratio_sink_vs_other"], h["bias"]["sink_term_spread_sink_vs_other"]
    assert vnr[0] < vnr[1] and spread[0] < spread[1]  # sink heads differ from the others on both measures
    assert h["bias"]["holds_implicit_bias"] == all(a >= 0.75 for a in h["bias"]["separation"].values())
    assert h["holds_all"] is False  # the massive-dimension row fails on SmolLM2 (criterion not met)
    rows = {r["id"]: r for r in h["scorecard"]}  # structure and number kept in separate columns, one row a claim
    assert set(rows) == {c.id for c in claims_file.load(folder / "claims.json")}
    dom = rows["origin.dimension_disparity"]
    assert dom["number matches"].startswith(("yes", "no")) and dom["structure holds"] in ("holds", "does NOT hold")


def test_utilization_json_shape_claims(executed):
    res, folder = executed["01_utilization"]
    assert res.ok, res.message
    h = json.loads((folder / "headline.json").read_text())
    post = h["streaming_ppl_after_budget"]
    assert set(post) == {"dense", "window only", "4 sinks + window", "recompute", "4 sinks + window at the recompute positions"}
    assert post["window only"] > 1.5 * post["4 sinks + window"]  # evicting the first tokens hurts, sinks rescue
    sweep = h["sink_sweep"]
    assert list(sweep) == ["0", "1", "2", "4", "8"] and sweep["0"] > sweep["1"]
    assert h["newline_sinks_ppl"] < 1.5 * sweep["4"]
    assert h["decode_cache_mib"]["4 sinks + window"] <= h["decode_cache_mib"]["dense"]
    q = h["kv_quant"]
    assert set(q) >= {"full_precision", "4-bit", "2-bit"}
    assert q["2-bit"]["4 sink tokens kept"] < q["2-bit"]["all tokens quantised"]  # keeping sinks helps at 2 bits
    assert q["2-bit"]["all tokens quantised"] > q["4-bit"]["all tokens quantised"] > 0.9 * q["full_precision"]
    act = h["act"]
    assert act["n_heads"] == sum(len(v) for v in act["heads"].values())
    if act["n_heads"]:
        assert act["ppl"]["ACT"] != act["ppl"]["original"]  # calibration changed the attention it was given
        ratio, low, high = act["ppl_ratio_interval"]  # ppl(ACT) / ppl(original) with its paired interval
        assert ratio == pytest.approx(act["ppl"]["ACT"] / act["ppl"]["original"], rel=1e-6) and low <= ratio <= high
        assert act["helps"] == (high < 1)  # lower only when the interval lies below 1


def test_mitigation_headline(executed):
    """Smoke size cannot grow a sink; check the comparison is complete and its numbers are sane."""
    res, folder = executed["03_mitigation"]
    assert res.ok, res.message
    h = json.loads((folder / "headline.json").read_text())
    assert h["variants"][0] == "softmax" and len(h["variants"]) == 9 and h["seeds"] == [0, 1]
    assert set(h["verdicts"]) == set(h["variants"]) and all(v.startswith(k) for k, v in h["verdicts"].items())
    for variant, row in h["final"].items():
        assert 0 < row["val_loss"] < 6 and 0 <= row["sink_rate"] <= 1 and 0 <= row["first_attention"] <= 1, variant
    assert h["final"]["softmax"]["row_mass"] == pytest.approx(1.0) and h["final"]["sink_logit"]["row_mass"] < 1
    conv = h["rmsnorm_convergence"]
    for m in ("auc", "final"):
        assert conv[m]["diff"] == pytest.approx(conv[m]["candidate"] - conv[m]["baseline"])
    if conv["verdict"] != "no difference":  # a named difference must exceed two seed sd's on both measures
        assert all(abs(conv[m]["diff"]) > 2 * conv[m]["sd"] for m in ("auc", "final"))
    assert len(h["strongest_head_by_variant"]) == 9 and len(h["emergence"]["strongest_head_by_seed"]) == 2
    assert set(h["bible_check"]["final"]) == {"softmax", "headwise_rmsnorm", "headwise_rmsnorm g0=0.1"}
    assert (folder / "final_table.md").read_text().startswith("Setting: bigram_backcopy")


def test_llm_headline(executed):
    res, folder = executed["10_llm"]
    assert res.ok, res.message
    h = json.loads((folder / "headline.json").read_text())
    reports = {r["name"]: r for r in h["reports"]}
    assert list(reports) == ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]
    for r in reports.values():  # every family sinks on natural text, none on a repeated token (Gu et al.'s shape)
        assert r["sink_rate"]["natural"] > 0.3 and r["sink_rate"]["repeated"] < 0.05
        assert r["by_kind"]["first"] > 5 * r["by_kind"]["content"]
    pos = {n: r["position"] for n, r in reports.items()}
    assert pos["smollm2-135m"]["moved_original"] < 0.5 * pos["smollm2-135m"]["own"]  # no BOS: the position
    assert pos["gemma3-270m"]["moved_original"] > 0.5 * pos["gemma3-270m"]["own"]  # BOS: the token carries it
    records = claims_file.load(folder / "claims.json")
    # 4 + the chain's 4 + Xiao's streaming test + Sun's bias test, per model
    assert len(records) == 11 * len(reports) and len({c.model for c in records}) == len(reports)  # + mid-sequence
    assert all(r["chain_numbers"]["super_neuron"] is not None or r["name"] != "smollm2-135m" for r in h["reports"])


def test_moe_headline(executed):
    res, folder = executed["11_moe"]
    assert res.ok, res.message
    h = json.loads((folder / "headline.json").read_text())
    assert "stand-in" in h["label"] and all("stand-in" in c.model for c in claims_file.load(folder / "claims.json"))
    assert h["super_experts"], "the stand-in inherits SmolLM2's massive activation: some expert must carry it"
    p = h["pruning"]
    assert p["super experts pruned"]["max_abs_first"] < 0.2 * p["as is"]["max_abs_first"]  # the massive value goes
    assert p["super experts pruned"]["alpha"] < p["as is"]["alpha"]


def test_scorecard_gathers_every_notebooks_claims(executed):
    res, folder = executed["90_scorecard"]
    assert res.ok, res.message
    h = json.loads((folder / "headline.json").read_text())
    records = [c for stem in WRITES_CLAIMS for c in claims_file.load(executed[stem][1] / "claims.json")]
    assert h["records"] == len(records) and set(h["counts"]) == set(claims.VERDICTS)
    # a claim judged on the same model in two notebooks (00's and 10's on SmolLM2) counts once
    assert h["claims"] < len(records)
    # the counts are the papers' claims; implementation checks and this project's own questions are listed apart
    others = sum(len(ids) for ids in h["not_paper_claims"].values())
    assert sum(h["counts"].values()) == h["paper_claims"] == h["claims"] - others
    assert any("implementation" in kind for kind in h["not_paper_claims"])  # 01's xiao2023.bounded_cache
    assert h["stand_in_claims"] >= 3  # 11_moe's and 12_mllm's, labelled as stand-ins


@pytest.mark.skipif(browser.why_unavailable() is not None, reason=str(browser.why_unavailable()))
def test_gallery_of_every_notebook_in_headless_chromium(executed):
    """The gallery of the smoke run, opened in Chromium: every image decodes, every link resolves, no console error;
    the same for each executed notebook's HTML page. Screenshot: build/gallery-smoke.png, for a person to look at."""
    root = next(iter(executed.values()))[1].parent
    page = gallery.build_gallery(root)
    shot = Path(__file__).resolve().parents[1] / "build" / "gallery-smoke.png"
    report = browser.check_page(page, screenshot=shot)
    assert report.ok, report
    pngs = sum(len(list(folder.glob("*.png"))) for _, folder in executed.values())
    assert report.images == pngs and shot.stat().st_size > 0  # every figure of every notebook is on the page
    for stem, (_, folder) in executed.items():
        executed_page = folder / f"{stem}.html"
        assert executed_page.exists(), f"{stem}: no executed-notebook HTML"
        nb_report = browser.check_page(executed_page)
        assert nb_report.ok and nb_report.images >= len(list(folder.glob("*.png"))), (stem, nb_report)


def test_another_setting_gives_the_same_verdicts(executed, jobs, tmp_path_factory):
    """Every notebook whose numbers depend on threads or the instruction set (:data:`VARIES`), run a second time with
    the same seed under :func:`second_setting` (two threads, oneDNN capped so that its bf16 matmul kernel differs from
    this host's -- asserted from the probe, on whatever CPU runs the test), gives the same verdicts, draws, controls
    and flags, and every value within the tolerance its rule declares (``make verify``'s check; values declared not
    comparable across machines are left apart) -- and the second run rebuilds what the first may have read from the
    cache: its cache holds only the base conversions, so the LLaVA-style stand-in and every training run are built
    again, in a process whose random state differs from the first build's."""
    from sinklib.reproduction import scorecard, verify

    env, here, there = second_setting()
    print(f"second setting {env}: bf16 matmul {here['onednn_bf16_matmul']} here, {there['onednn_bf16_matmul']} there")
    assert here["onednn_bf16_matmul"] and there["onednn_bf16_matmul"] != here["onednn_bf16_matmul"]
    root = _folder(tmp_path_factory, "same_seed")
    cache = root / "cache"

    def records(figures, stem):
        return {f"{r.id} [{r.model}]": verify.record(r) for r in scorecard.collect(figures) if r.notebook == stem}

    for stem in sorted(VARIES):
        again = jobs.result(f"rebuild:{stem}")
        assert again.ok, again.message
        first, second = records(executed[stem][1].parent, stem), records(root / "figures", stem)
        assert first, stem
        diffs = [d for d in verify.compare({"claims": second}, {"claims": first}) if d.fails]
        assert not diffs, f"{stem} under {env}:\n" + "\n".join(d.line() for d in diffs)
    built = sorted(p.name for p in (cache / "converted").iterdir() if not p.is_symlink())
    assert any(b.startswith("llava-standin-") for b in built), built
    assert any((cache / "training").glob("*.json"))
