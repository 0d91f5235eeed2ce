"""How far do the stand-ins' numbers (11's upcycled MoE and router, 12's LLaVA-style projector) move under another
kernel setting? Run notebooks at the CPU profile under a setting into a folder of their own (a cache holding only the
base conversions, so every stand-in is built again), then compare their claims with another run's, value by value.

    python benchmarks/cross_setting.py run build/cross/avx512core --notebooks 11 12 --env ONEDNN_MAX_CPU_ISA=AVX512_CORE
    python benchmarks/cross_setting.py run build/cross/aten-avx2 --notebooks 12 --env ATEN_CPU_CAPABILITY=avx2
    python benchmarks/cross_setting.py compare amd-default=figures amd-avx512core=build/cross/avx512core/figures \\
        amd-aten-avx2=build/cross/aten-avx2/figures --describe amd-default="the CPU and its kernels" ... \\
        [--write data/reference/cross_setting_standins.json]

``compare`` prints, per claim, every number (measured, control, spread, margin) that differs between the runs, its
values and spread, and the largest spread of each claim's margin -- what ``kang_rules.MARGINS`` rests on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

BASE_CONVERSIONS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "dinov2-s")  # dequantised / ONNX weights


def run(folder: Path, notebooks: list[str], env: dict[str, str], jobs: int) -> int:
    """The CPU profile of ``notebooks`` under ``env`` into ``folder/figures``, with a cache of its own that links
    the base conversions already made here (nothing trained or stitched is shared)."""
    from sinklib.models.conversion import converted_path

    cache = folder / "cache" / "converted"
    cache.mkdir(parents=True, exist_ok=True)
    for name in BASE_CONVERSIONS:
        link = cache / name
        if converted_path(name).exists() and not link.exists():
            link.symlink_to(converted_path(name), target_is_directory=True)
    cmd = [sys.executable, "-m", "sinklib", "figures", "--profile", "cpu", "--notebooks", *notebooks, "--jobs",
           str(jobs), "--figures-dir", str(folder / "figures"), "--build-dir", str(folder / "build")]
    return subprocess.call(cmd, env={**os.environ, "SINKLIB_CACHE": str(folder / "cache"), **env})


def compare(runs: dict[str, Path], notebooks: set[str] | None = None) -> dict:
    """Per claim found in every run: each number that is not equal in all of them, with its values and spread; per
    claim the spread of its margin's value."""
    from sinklib.reproduction import scorecard, verify

    records = {name: {f"{r.notebook}/{r.id} [{r.model}]": verify.record(r) for r in scorecard.collect(path)
                      if notebooks is None or r.notebook[:2] in notebooks} for name, path in runs.items()}
    names = list(runs)
    keys = sorted(set.intersection(*(set(r) for r in records.values())))
    claims = {}
    for key in keys:
        moved = {}
        for group in verify.GROUPS:
            paths = set.intersection(*(set(records[n][key][group]) for n in names))
            for path in sorted(paths):
                values = {n: records[n][key][group][path]["value"] for n in names}
                if len(set(values.values())) > 1:
                    moved[f"{group}.{path}"] = {"values": values,
                                                "spread": max(values.values()) - min(values.values())}
        claims[key] = {"verdicts": {n: records[n][key]["verdict"] for n in names},
                       "draws": {n: records[n][key]["draws"] for n in names}, "moved": moved}
    return {"settings": names, "claims": claims}


def kang_margins(figures: Path) -> dict[str, dict[str, float]]:
    """Per stand-in seed, the numbers 12's Kang rules cut, from the run's ``12_mllm/headline.json``: "masking" = min
    over the random draws of their NLL increase - the sinks' increase (nats, the digit token's NLL; cut at 0), "var"
    = NLL without VAR - with it (cut at 0), "phi" = the largest image-token phi (cut at tau = 20), "background" = the
    visual sinks' share on background (cut at 0.9; a seed without sinks has none). A run older than the per-seed
    records gives the run's own seed's masking and background numbers only."""
    head = json.loads((figures / "12_mllm" / "headline.json").read_text())
    changes, draws = head["nll_changes_per_seed"], head.get("random_changes_per_seed", {})
    first = str(head["standin_seeds"][0])
    if not draws:  # seed 0's draws are in the headline itself
        draws = {first: [r - head["nll"]["image token"]["as is"] for r in head["random_draws"]["image token"]]}
    background = head.get("background_per_seed") or {first: head["sinks_on_background"]["share on background"]}
    out = {}
    for seed, c in changes.items():
        out[seed] = {"var": -c["VAR"], "phi": c["max_phi"]}
        if seed in draws:
            out[seed]["masking"] = min(draws[seed]) - c["sinks"]
        if background.get(seed) is not None:
            out[seed]["background"] = background[seed]
    return out


def kang_spreads(runs: dict[str, Path]) -> dict:
    """Each seed's cut numbers (:func:`kang_margins`) in every run, their spread across the runs, and the largest spread of each
    over the seeds -- what ``kang_rules.MARGINS["stand-in"]`` must cover."""
    values = {name: kang_margins(path) for name, path in runs.items()}
    seeds = sorted(set.intersection(*(set(v) for v in values.values())), key=int)
    per_seed, largest = {}, {}
    for seed in seeds:
        for kind in ("masking", "var", "phi", "background"):
            got = {n: v[seed][kind] for n, v in values.items() if kind in v[seed]}
            if len(got) < 2:
                continue
            spread = max(got.values()) - min(got.values())
            per_seed.setdefault(seed, {})[kind] = {"values": got, "spread": spread}
            if spread > largest.get(kind, {"spread": -1.0})["spread"]:
                largest[kind] = {"spread": spread, "seed": int(seed)}
    return {"per_seed": per_seed, "largest_spread": largest}


def record(runs: dict[str, Path], describe: dict[str, str], commit: str = "") -> dict:
    """What ``data/reference/cross_setting_standins.json`` holds: per notebook (11, 12) the claims of the runs that
    ran it, every number that moved; 12's cut numbers per seed (:func:`kang_spreads`); how each run was made, and
    ``commit``: the commit the runs were made at (default: this checkout's)."""
    from sinklib.reproduction.environment import environment

    ran = {nb: {n: p for n, p in runs.items() if any((p / d).is_dir() for d in (f"{nb}_moe", f"{nb}_mllm"))}
           for nb in ("11", "12")}
    claims = {nb: compare(r, {nb})["claims"] for nb, r in ran.items() if len(r) > 1}
    moved = {nb: sum(len(c["moved"]) for c in cl.values()) for nb, cl in claims.items()}
    return {"source": "benchmarks/cross_setting.py: the CPU profile, seed 0, every stand-in built anew under each "
                      "setting (a cache of its own holding only the base conversions)",
            "commit": commit or environment().get("commit"), "describe": describe, "ran": {nb: list(r) for nb, r in ran.items()},
            "moved": moved, "kang": kang_spreads(ran["12"]) if len(ran["12"]) > 1 else {}, "claims": claims}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("folder")
    r.add_argument("--notebooks", nargs="+", default=["11", "12"])
    r.add_argument("--env", nargs="*", default=[], help="NAME=VALUE")
    r.add_argument("--jobs", type=int, default=2)
    c = sub.add_parser("compare")
    c.add_argument("runs", nargs="+", help="NAME=FIGURES_DIR")
    c.add_argument("--notebooks", nargs="*", default=["11", "12"])
    c.add_argument("--write", default="")
    c.add_argument("--commit", default="", help="the commit the runs were made at (default: this checkout's)")
    c.add_argument("--describe", nargs="*", default=[], help="NAME=TEXT: the CPU and kernel setting of each run")
    args = parser.parse_args(argv)
    if args.command == "run":
        env = dict(x.split("=", 1) for x in args.env)
        return run(Path(args.folder), args.notebooks, env, args.jobs)
    runs = {n: Path(p) for n, p in (x.split("=", 1) for x in args.runs)}
    for key, c in compare(runs, set(args.notebooks))["claims"].items():
        print(f"{key}: verdicts {c['verdicts']}, draws {c['draws']}")
        for path, m in c["moved"].items():
            print(f"    {path:<60} " + " / ".join(f"{v:.4g}" for v in m["values"].values()) + f"  (±{m['spread']:.4g})")
    with_12 = {n: p for n, p in runs.items() if (p / "12_mllm").is_dir()}
    if "12" in args.notebooks and len(with_12) > 1:
        for seed, kinds in kang_spreads(with_12)["per_seed"].items():
            for kind, m in kinds.items():
                print(f"12 seed {seed} {kind}: " + " / ".join(f"{n} {v:+.4f}" for n, v in m["values"].items())
                      + f"  (spread {m['spread']:.4f})")
    if args.write:
        Path(args.write).write_text(json.dumps(record(runs, dict(x.split("=", 1) for x in args.describe), args.commit), indent=1)
                                    + "\n")
        print("wrote", args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
