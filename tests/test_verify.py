"""make verify: a run compared with the committed reference, claim by claim -- the whole record, each value with the
tolerance of what it is, and the environment differences that could explain a change."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from sinklib.core import quantities as q
from sinklib.reproduction import environment, verify


def notes_of(run: dict, reference: dict) -> list[str]:
    """Where ``run``'s environment differs from the reference's, one line each."""
    return [d.text for d in environment.environment_differences(run, reference)]


KV_ID = "intactkv.keep_sinks_full_precision"


def _claim(verdict="holds", measured=None, draws=(True, True), kind="pretrained", claim_id="xiao2023.bounded_cache",
           control=None, control_measured=None, at_init=None, spread=None, margin=None, note="", unsettled=None,
           quantities=None):
    """One reference record, made by :func:`verify.record` from a scorecard-like row."""
    row = SimpleNamespace(quantities=quantities or {},
        notebook="01_utilization", id=claim_id, model="m", profile="cpu", kind=kind, verdict=verdict, reason=note,
        measured=measured if measured is not None else {"natural": 0.74, "ppl.dense": 23.8}, draws=tuple(draws),
        control=control, control_measured=control_measured, at_init=at_init, spread=spread, margin=margin,
        unsettled=verdict == "unsettled" if unsettled is None else unsettled)
    return verify.record(row)


def _run(env=None, **claims):
    return {"schema": verify.SCHEMA, "environment": env or {"torch": "2.14.1"}, "claims": claims}


def _env(**changes):
    """An environment as :func:`environment.environment` records it, with ``changes``."""
    env = {"python": "3.11.7", "torch": "2.14.1", "transformers": "5.23.0", "lock_sha256": "abc", "machine": "x86_64",
           "cpu_model": "AMD EPYC", "cpu_vendor": "AuthenticAMD", "cpu_capability": "AVX512",
           "cpu_flags": ["avx512_bf16", "avx512f", "avx512_vnni", "avx2", "fma"],
           "onednn_isa": "Intel AVX-512 with Intel DL Boost and bfloat16 support",
           "onednn_bf16_matmul": "brg_matmul:avx512_core_bf16",
           "kernel_variables": dict.fromkeys(environment.KERNEL_VARIABLES), "torch_threads": 2,
           "notebook_threads": {"03_mitigation": {"MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}}, "commit": "a1"}
    return env | changes


def test_flatten_keeps_every_number_with_its_path_and_type():
    assert list(q.flatten({"a": 1, "b": {"c": [2.5, True, "x", None]}, "d": 3.0})) == [
        ("a", 1), ("b.c.0", 2.5), ("b.c.3", None), ("d", 3.0)]
    assert list(q.flatten(0.5)) == [("value", 0.5)]
    assert isinstance(dict(q.flatten({"a": 1}))["a"], int)


def test_the_same_run_reproduces():
    ref = _run(a=_claim(), b=_claim("does NOT hold", control=False, control_measured={"x": 0.1}))
    text, ok = verify.report(ref, ref)
    assert ok and "reproduced: all 2 verdicts" in text


def test_another_verdict_is_reported_even_with_equal_values():
    ref, new = _run(a=_claim("holds")), _run(a=_claim("cannot be judged here"))
    diffs = verify.compare(new, ref)
    assert [d.what for d in diffs] == ["verdict"]
    text, ok = verify.report(new, ref)
    assert not ok and "holds in the reference, cannot be judged here here" in text


def test_values_are_checked_against_the_stated_tolerance():
    ref = _run(a=_claim(measured={"x": 100.0}))
    inside = _run(a=_claim(measured={"x": 100.0 + 0.9e-2}))  # 9e-5 relative < 1e-4
    outside = _run(a=_claim(measured={"x": 100.0 + 2e-2}))  # 2e-4 relative
    assert verify.compare(inside, ref) == []
    diffs = verify.compare(outside, ref)
    assert [d.what for d in diffs] == ["value"] and "measured: x 100.02 vs 100" in diffs[0].detail
    trained = _run(a=_claim(measured={"x": 100.0}, kind="trained here"))
    assert verify.compare(_run(a=_claim(measured={"x": 108.0}, kind="trained here")), trained) == []  # 8% < 10%


def test_a_control_that_flips_to_holding_on_random_weights_is_reported():
    ref = _run(a=_claim(control=False, control_measured={"rate": 0.1}, at_init=False))
    new = _run(a=_claim(control=True, control_measured={"rate": 0.1}, at_init=False))
    diffs = verify.compare(new, ref)
    assert [d.what for d in diffs] == ["control"]
    assert "fails in the reference, holds here" in diffs[0].detail
    assert "cannot tell training from noise" in diffs[0].detail
    text, ok = verify.report(new, ref)
    assert not ok and "CONTROL" in text
    # not run -> run but undecided is a change of the control too, and its values are new
    undecided = _run(a=_claim(control=None, control_measured={"rate": 0.1}))
    diffs = verify.compare(undecided, _run(a=_claim()))
    assert [d.what for d in diffs] == ["control", "value"] and "not run in the reference, cannot be judged here" \
        in diffs[0].detail and "control_measured: rate 0.1 (not in the reference)" in diffs[1].detail


def test_control_measured_spread_and_margin_moves_beyond_tolerance_are_reported():
    def claim(control_rate, spread_max, margin_value):
        return _claim(control=False, control_measured={"rate": control_rate},
                      spread={"min": 0.5, "max": spread_max, "values": [0.5, spread_max]},
                      margin={"value": margin_value, "cut": 0.3, "spread": 0.01})

    ref = _run(a=claim(0.2, 0.6, 0.5))
    assert verify.compare(_run(a=claim(0.2 + 1e-6, 0.6 + 1e-6, 0.5)), ref) == []  # within 1e-4
    diffs = verify.compare(_run(a=claim(0.25, 0.7, 0.55)), ref)
    assert [d.what for d in diffs] == ["value"] * 3
    details = " | ".join(d.detail for d in diffs)
    assert "control_measured: rate 0.25 vs 0.2" in details
    assert "spread: max 0.7 vs 0.6" in details and "values.1 0.7 vs 0.6" in details
    assert "margin: value 0.55 vs 0.5" in details


def test_unsettled_and_note_flags_are_compared_but_not_note_text():
    ref = _run(a=_claim(note="1 of 2 draws: ppl 23.8"))
    assert verify.compare(_run(a=_claim(note="1 of 2 draws: ppl 23.9")), ref) == []  # the numbers are in measured
    noisy = _run(a=_claim(note="holds on random weights too: this rule cannot tell training from noise"))
    assert [d.what for d in verify.compare(noisy, ref)] == ["flags"]
    assert [d.what for d in verify.compare(_run(a=_claim(unsettled=True)), ref)] == ["unsettled"]


KV = q.Quantity(kind=q.Kind.RATIO, rel_tol=0.08, why="2-bit rounding: Intel AMX moved 0.946 -> 0.905")


def test_a_quantity_declared_with_its_own_tolerance_is_checked_with_it_and_nothing_is_guessed_from_words():
    kv = _claim(claim_id=KV_ID, measured={"2-bit": [0.9458, 0.8952]}, quantities={"2-bit": KV})
    assert kv["measured"]["2-bit.0"] == {"value": 0.9458, "quantity": "ratio", "unit": "", "rel_tol": 0.08,
                                         "abs_tol": 0.0}
    moved = {"2-bit": [0.9458 * 1.05, 0.8952]}  # 5%: 2-bit rounding of a 1e-5 float difference
    assert verify.compare(_run(a=_claim(claim_id=KV_ID, measured=moved, quantities={"2-bit": KV})), _run(a=kv)) == []
    # the same claim id and key without the declaration: a float32 forward's value, 1e-4 -- the words "intactkv",
    # "2-bit" no longer pick a tolerance
    plain = _run(a=_claim(claim_id=KV_ID, measured={"2-bit": [0.9458, 0.8952]}))
    moved_plain = _run(a=_claim(claim_id=KV_ID, measured=moved))
    assert [d.what for d in verify.compare(moved_plain, plain)] == ["value"]
    assert plain["claims"]["a"]["measured"]["2-bit.0"]["quantity"] == "value"


def test_a_float_named_like_an_index_is_not_compared_exactly():
    """dom_ratio_after_super_neuron printed the same digits on two CPUs and failed an exact check: "neuron" in its key
    made it an identity."""
    measured = {"dom_ratio_after_super_neuron": 83.21, "dom_share_after_super_neuron": 0.6512, "layer": 2}
    declared = {"dom_ratio_after_super_neuron": q.ratio(), "dom_share_after_super_neuron": q.share(),
                "layer": q.identity("layer")}
    ref = _run(a=_claim(measured=measured, quantities=declared))
    entries = ref["claims"]["a"]["measured"]
    assert entries["dom_ratio_after_super_neuron"]["quantity"] == "ratio"
    assert entries["dom_ratio_after_super_neuron"]["rel_tol"] > 0 and entries["layer"]["rel_tol"] == 0
    near = {**measured, "dom_ratio_after_super_neuron": 83.21 * (1 + 5e-5), "dom_share_after_super_neuron": 0.65121}
    assert verify.compare(_run(a=_claim(measured=near, quantities=declared)), ref) == []
    undeclared = _run(a=_claim(measured=measured))  # no word makes a float an identity any more
    assert undeclared["claims"]["a"]["measured"]["dom_ratio_after_super_neuron"]["quantity"] == "value"
    with pytest.raises(ValueError, match="takes no tolerance"):
        q.Quantity(kind=q.Kind.IDENTITY, rel_tol=0.1, why="x")  # an identity takes no tolerance either
    from sinklib.core.claims import Claim, check_schema

    with pytest.raises(ValueError, match="a float is never an identity"):
        check_schema(Claim(id="a.b", statement="s", source="s", rule="r", published=None, follows="f", holds=True,
                           measured={"dom_ratio_after_super_neuron": 83.21},
                           quantities={"dom_ratio_after_super_neuron": q.identity("neuron")}))


def test_identities_must_match_exactly_whatever_the_kind():
    declared = {"layer": q.identity("layer"), "loss": q.loss()}
    ref = _run(a=_claim(kind="trained here", measured={"layer": 3, "loss": 2.0}, quantities=declared))
    diffs = verify.compare(_run(a=_claim(kind="trained here", measured={"layer": 4, "loss": 2.03},
                                         quantities=declared)), ref)
    assert len(diffs) == 1 and "layer 4 vs 3 layer (exact: an identity)" in diffs[0].detail
    assert "loss" not in diffs[0].detail.split("(exact")[1]
    # an undeclared int is a count: on a trained model it moves within its tolerance
    counts = _run(a=_claim(kind="trained here", measured={"tokens": 30}))
    assert verify.compare(_run(a=_claim(kind="trained here", measured={"tokens": 31})), counts) == []


def test_a_quantity_declared_not_comparable_is_reported_apart_and_never_fails():
    declared = {"nll": q.Quantity(kind=q.Kind.LOSS, comparable=False, why="moved 0.466 -> 0.621 with the kernel"),
                "other": q.loss()}
    ref = _run(a=_claim(kind="stand-in", measured={"nll": 0.466, "other": 1.0}, quantities=declared))
    here = _run(a=_claim(kind="stand-in", measured={"nll": 0.621, "other": 1.0}, quantities=declared))
    diffs = verify.compare(here, ref)
    assert [d.what for d in diffs] == ["apart"] and "0.621 vs 0.466" in diffs[0].detail and "kernel" in diffs[0].detail
    text, ok = verify.report(here, ref)
    assert ok and "not compared" in text and "reproduced" in text
    flipped = _run(a=_claim("does NOT hold", kind="stand-in", measured={"nll": 0.621, "other": 1.0},
                            quantities=declared))
    assert not verify.report(flipped, ref)[1]  # its verdict is still compared


def test_draw_outcomes_missing_and_new_claims_are_reported():
    ref = _run(a=_claim(draws=(True, True, True)), b=_claim())
    new = _run(a=_claim(draws=(True, False, True)), c=_claim(verdict="cannot be judged here"))
    diffs = verify.compare(new, ref)
    assert sorted(d.what for d in diffs) == ["draws", "missing", "new"]
    assert [d.detail for d in diffs if d.what == "new"] == ["not in the reference (here: cannot be judged here)"]


def test_nan_equals_nan_and_inf_must_match():
    ref = _run(a=_claim(measured={"x": float("nan"), "y": float("inf")}))
    assert verify.compare(_run(a=_claim(measured={"x": float("nan"), "y": float("inf")})), ref) == []
    assert len(verify.compare(_run(a=_claim(measured={"x": 1.0, "y": 1e300})), ref)) == 1


def test_environment_notes_name_cpu_flags_isa_variables_and_threads_with_both_values():
    ref = _env()
    here = _env(cpu_flags=["amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx512_vnni", "avx2", "fma"],
                onednn_isa="Intel AVX-512 with Intel DL Boost, bfloat16 and AMX", onednn_bf16_matmul="brg_matmul:avx512_core_amx",
                kernel_variables=dict.fromkeys(environment.KERNEL_VARIABLES) | {"MKL_CBWR": "COMPATIBLE"}, torch_threads=4,
                notebook_threads={"03_mitigation": {"MKL_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}})
    notes = notes_of({"environment": here}, {"environment": ref})
    text = "\n".join(notes)
    assert "cpu flags differ: amx_bf16, amx_tile here, not in the reference" in text
    assert "onednn_isa: Intel AVX-512 with Intel DL Boost, bfloat16 and AMX here, Intel AVX-512 with Intel DL Boost " \
           "and bfloat16 support in the reference" in text
    assert "onednn_bf16_matmul: brg_matmul:avx512_core_amx here, brg_matmul:avx512_core_bf16 in the reference" in text
    assert "MKL_CBWR: COMPATIBLE here, unset in the reference" in text
    assert "torch_threads: 4 here, 2 in the reference" in text
    assert "threads of 03_mitigation: MKL_NUM_THREADS=2, OMP_NUM_THREADS=2 here, MKL_NUM_THREADS=1, OMP_NUM_THREADS=1 " \
           "in the reference" in text
    assert notes_of({"environment": ref}, {"environment": ref}) == []
    # a oneDNN field one side could not read (oneDNN printed its header earlier in that process) is not a difference
    assert notes_of({"environment": _env(onednn_isa=None)}, {"environment": ref}) == []


def test_the_report_names_the_environment_first_and_the_setting_that_most_plausibly_moved_each_kind():
    ref = _run(_env(), **{"03_mitigation/m.sink [TinyLM]": _claim(kind="trained here", measured={"rate": 0.5}),
                          "00_tour/g.shape [SmolLM2]": _claim(measured={"rate": 0.5})})
    new = _run(_env(cpu_flags=["amx_bf16", "avx512_bf16", "avx512f", "avx512_vnni", "avx2", "fma"]),
               **{"03_mitigation/m.sink [TinyLM]": _claim(kind="trained here", measured={"rate": 0.6}),
                  "00_tour/g.shape [SmolLM2]": _claim(measured={"rate": 0.6})})
    text, ok = verify.report(new, ref)
    lines = text.splitlines()
    env_line = next(i for i, x in enumerate(lines) if x.startswith("environment: cpu flags differ: amx_bf16 here"))
    cause = next(i for i, x in enumerate(lines) if x.startswith("likely cause: trained here claims (03_mitigation)"))
    first_diff = next(i for i, x in enumerate(lines) if x.startswith("VALUE"))
    assert not ok and env_line < cause < first_diff
    assert "most plausibly the oneDNN ISA -- cpu flags differ: amx_bf16 here, not in the reference" in lines[cause]
    assert "bf16 training runs move with the oneDNN ISA" in lines[cause]
    # a pretrained forward does not run oneDNN's bf16 kernels: no setting that moves it differs
    assert any(x.startswith("likely cause: pretrained claims (00_tour) changed with no setting") for x in lines)
    threads = _run(_env(torch_threads=1), **new["claims"])
    assert any("most plausibly the threads -- torch_threads: 1 here, 2 in the reference" in x
               for x in verify.report(threads, ref)[0].splitlines())


def test_cpu_info_reads_model_vendor_and_the_flags_that_move_numbers(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                       "flags\t\t: fpu sse avx2 fma avx512f avx512_bf16 amx_tile amx_bf16 amx_int8\n\n"
                       "processor\t: 1\nvendor_id\t: other\n")
    assert environment.cpu_info(cpuinfo) == {
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_vendor": "GenuineIntel",
        "cpu_flags": ["amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512f", "avx2", "fma"]}
    assert environment.cpu_info(tmp_path / "absent") == {"cpu_model": None, "cpu_vendor": None, "cpu_flags": []}


def test_the_onednn_isa_is_parsed_from_its_verbose_lines():
    text = ("onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71)\n"
            "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost and bfloat16 support\n"
            "onednn_verbose,v1,primitive,exec,cpu,reorder,jit_direct_copy:uni,undef,src:f32::blocked:ab::f0 dst:f32,,,\n"
            "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_bf16,undef,src:bf16::blocked:ab::f0 "
            "wei:bf16::blocked:ba::f0 dst:bf16::blocked:ab::f0,attr-scratchpad:user,,32x48:48x32,18.9\n")
    assert environment.parse_onednn_verbose(text) == {
        "onednn_isa": "Intel AVX-512 with Intel DL Boost and bfloat16 support",
        "onednn_bf16_matmul": "brg_matmul:avx512_core_bf16"}
    header_only = "\n".join(text.splitlines()[:3])  # torch ran its bf16 matmul in ATen
    assert environment.parse_onednn_verbose(header_only)["onednn_bf16_matmul"] == "ATen (not oneDNN)"
    assert environment.parse_onednn_verbose("") == {"onednn_isa": None, "onednn_bf16_matmul": None}


def test_environment_records_cpu_isa_variables_and_threads(tmp_path, monkeypatch):
    from sinklib.pipeline.executed import write_takeaways

    executed = tmp_path / "03_x.ipynb"
    executed.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    (tmp_path / "figures" / "03_x").mkdir(parents=True)
    write_takeaways(executed, tmp_path / "figures" / "03_x" / "takeaways.json")  # what the runner records
    env = environment.environment(tmp_path / "figures")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert env["notebook_threads"] == {"03_x": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": None,
                                                "ONEDNN_MAX_CPU_ISA": None, "ATEN_CPU_CAPABILITY": None,
                                                "MKL_CBWR": "COMPATIBLE"}}
    assert env["kernel_variables"]["MKL_CBWR"] == "COMPATIBLE" and env["kernel_variables"]["ONEDNN_MAX_CPU_ISA"] is None
    assert isinstance(env["torch_threads"], int) and env["torch_threads"] >= 1
    assert set(env["cpu_flags"]) <= set(environment.CPU_FLAGS)
    assert {"cpu_model", "cpu_vendor", "onednn_isa", "onednn_bf16_matmul"} <= env.keys()


def test_write_then_verify_a_figures_folder(tmp_path, capsys):
    from sinklib.core.claims import Claim
    from sinklib.core.claims_file import Recorder

    folder = tmp_path / "figures" / "00_tour"

    def record(holds: bool) -> None:
        rec = Recorder("00_tour", "SmolLM2", "cpu")
        rec.add(Claim(id="x.rate", statement="s", source="Gu et al., arXiv 2410.10781", rule="r", published=0.9,
                      measured={"natural": 0.5, "layer": 2}, holds=holds, follows="Eq. 1",
                      quantities={"natural": q.share(), "layer": q.identity("layer")}), show=False)
        rec.write(folder)

    record(True)
    ref = tmp_path / "ref.json"
    assert verify.verify(tmp_path / "figures", ref, write=True) == 0
    stored = json.loads(ref.read_text())
    assert stored["schema"] == verify.SCHEMA
    assert stored["claims"]["00_tour/x.rate [SmolLM2]"]["measured"] == {
        "natural": {"value": 0.5, "quantity": "share", "unit": "fraction", "rel_tol": 1e-4, "abs_tol": 1e-9},
        "layer": {"value": 2.0, "quantity": "identity", "unit": "layer", "rel_tol": 0.0, "abs_tol": 0.0}}
    assert verify.verify(tmp_path / "figures", ref) == 0
    record(False)
    assert verify.verify(tmp_path / "figures", ref) == 1
    assert "VERDICT" in capsys.readouterr().out


def test_a_reference_of_the_old_schema_is_a_one_line_error_that_says_to_regenerate(tmp_path):
    from sinklib.core.claims import Claim
    from sinklib.core.claims_file import Recorder
    from sinklib.core.errors import InputError

    rec = Recorder("00_tour", "SmolLM2", "cpu")
    rec.add(Claim(id="x.rate", statement="s", source="s", rule="r", published=None, measured=0.5, holds=True,
                  follows="Eq. 1"), show=False)
    rec.write(tmp_path / "figures" / "00_tour")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": 1, "environment": {}, "claims": {"00_tour/x.rate [SmolLM2]": {
        "verdict": "holds", "values": {"value": 0.5}, "draws": [True], "kind": "pretrained", "rel_tol": 1e-4}}}))
    with pytest.raises(InputError) as err:
        verify.verify(tmp_path / "figures", old)
    message = str(err.value)
    assert "\n" not in message and "schema 1" in message and "regenerate" in message and "make reference" in message


def test_no_claims_is_a_one_line_error(tmp_path):
    from sinklib.core.errors import InputError

    with pytest.raises(InputError, match="make figures"):
        verify.verify(tmp_path, tmp_path / "ref.json")


def test_trained_values_are_checked_with_the_spread_measured_across_machines():
    """A trained TinyLM's alpha_0 moved by up to 0.026 between machines, its validation loss by < 1 %, a verdict's
    margin (the late slope) by 0.022: each quantity its own tolerance; a pretrained forward stays at 1e-4."""
    declared = {"first_attention": q.share(), "val_loss": q.loss()}
    assert q.declared(declared, "margin", "value", 0.1).kind == q.Kind.MARGIN
    tiny = {"first_attention": 0.0017, "val_loss": 3.1501}
    ref = _run(a=_claim(kind="trained here", measured=tiny, margin={"value": -0.0018, "cut": 0.03, "spread": 0.022},
                        quantities=declared))
    other_machine = {"first_attention": 0.0236, "val_loss": 3.1514}  # softpick seed 0 on the Intel/AMX host
    run = _run(a=_claim(kind="trained here", measured=other_machine,
                        margin={"value": 0.0092, "cut": 0.03, "spread": 0.022}, quantities=declared))
    assert verify.compare(run, ref) == []
    far = _run(a=_claim(kind="trained here", measured={"first_attention": 0.09, "val_loss": 3.30},
                        margin={"value": -0.0018, "cut": 0.03, "spread": 0.022}, quantities=declared))
    assert [d.what for d in verify.compare(far, ref)] == ["value"]
    assert "first_attention" in verify.compare(far, ref)[0].detail and "val_loss" in verify.compare(far, ref)[0].detail
    pretrained = _run(a=_claim(measured=tiny))
    assert [d.what for d in verify.compare(_run(a=_claim(measured=other_machine)), pretrained)] == ["value"]


def test_a_notebook_run_under_another_instruction_set_is_named_as_such():
    """The runner records each kernel's ISA variables: a notebook run with oneDNN capped (while verify itself runs
    without the variable) is reported as an ISA difference of that notebook, not as threads."""
    base = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ONEDNN_MAX_CPU_ISA": None, "ATEN_CPU_CAPABILITY": None,
            "MKL_CBWR": None}
    ref = _run(env={"notebook_threads": {"03_mitigation": base}})
    run = _run(env={"notebook_threads": {"03_mitigation": base | {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16",
                                                                 "OMP_NUM_THREADS": "2"}}})
    fields = {d.field: d.text for d in environment.environment_differences(run, ref)}
    assert fields["ONEDNN_MAX_CPU_ISA"] == "ONEDNN_MAX_CPU_ISA of 03_mitigation: AVX512_CORE_BF16 here, unset in the reference"
    assert fields["notebook_threads"].startswith("threads of 03_mitigation: OMP_NUM_THREADS=2 here")


def test_a_margin_value_is_checked_within_its_own_stated_spread():
    """A verdict's number moves across machines by up to the spread its margin states (03: a seed's share by 0.068):
    its value is reproduced within that spread, not the kind's default (0.03 for a model trained here)."""
    def run(value):
        return _run(a=_claim(kind="trained here", margin={"value": value, "cut": 0.111, "spread": 0.068}))

    assert verify.compare(run(0.068 - 0.060), run(0.068)) == []
    assert [d.what for d in verify.compare(run(0.068 - 0.070), run(0.068))] == ["value"]
    small = _run(a=_claim(kind="trained here", margin={"value": 0.05, "cut": 0.03, "spread": 0.01}))
    moved = _run(a=_claim(kind="trained here", margin={"value": 0.075, "cut": 0.03, "spread": 0.01}))
    assert verify.compare(moved, small) == []  # the kind's 0.03 is larger than the stated 0.01


def test_a_wildcard_declaration_names_measured_values_only():
    declared = {"*": q.loss("ppl")}
    assert q.declared(declared, "measured", "dense", 1.0).kind == q.Kind.LOSS
    assert q.declared(declared, "margin", "value", 1.0).kind == q.Kind.MARGIN
    assert q.declared(declared, "spread", "min", 1.0).kind == q.Kind.VALUE
