"""Command line: ``python -m sinklib {models,profile,check-sinks,figures,gallery,scorecard,verify,verify-cache}``.

``profile`` prints Gu et al.'s sink rate and per-layer sink / outlier statistics without a notebook; ``--json`` prints
one JSON object instead. Errors a user can fix are printed as one line (exit status 2): the arguments are checked
before anything loads (:func:`check_args`), and a ``profile`` estimated (after its first layer) to take longer than
:data:`LONG_RUN_S` stops there and asks for ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sinklib.core.errors import InputError, SinklibError
from sinklib.core.paths import OFFLINE_TARGET, REPO
from sinklib.pipeline.publish import require_folder

GU_NUM_SEQS = 100  # Gu et al. average over about 100 sequences
LONG_RUN_S = 30 * 60.0  # a profile estimated to take longer than 30 minutes needs --yes


def _cmd_models(args) -> int:
    from sinklib.models.load import list_models

    rows = list_models()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [("name", "family", "source", "ready", "description")]
    table += [(r["name"], r["family"], r["source"], "yes" if r["installed"] else f"no ({OFFLINE_TARGET})",
               r["description"]) for r in rows]
    widths = [max(len(row[i]) for row in table) + 2 for i in range(4)]  # each column as wide as its longest cell
    for row in table:
        print("".join(cell.ljust(w) for cell, w in zip(row, widths)) + row[4])
    print("Any Hugging Face id (e.g. meta-llama/Llama-2-7b-hf) also works where the hub is reachable.")
    return 0


def _cmd_profile(args) -> int:
    from sinklib.core.analysis import profile_sinks
    from sinklib.core.data import make_inputs
    from sinklib.core.memory import check_input_tokens, check_length
    from sinklib.models.load import load_model
    from sinklib.pipeline.profiles import seed_everything

    seed_everything(args.seed)
    lm = load_model(args.model, device=args.device, dtype="float32")  # Gu et al.'s protocol: float32 attention
    check_length(lm, args.seq_len)  # before any input is made: a length the model cannot take is one line now
    check_input_tokens(args.num_seqs, args.seq_len)
    ids = make_inputs(lm, args.input, args.num_seqs, args.seq_len, args.seed)
    prof = profile_sinks(lm, ids, input_name=args.input, eps=args.eps, batch_size=args.batch_size,
                         progress=not args.json, max_seconds=None if args.yes else LONG_RUN_S)
    if args.json:
        print(json.dumps(prof.to_json()))
        return 0
    print(f"model {lm.name} ({lm.label}), input {args.input}, {args.num_seqs} x {args.seq_len} tokens")
    print(f"sink rate (first token, eps {args.eps}): {100 * prof.sink_rate:.2f}% of "
          f"{lm.n_layers} x {lm.n_heads} heads")
    print(f"{'layer':>5} {'alpha_0':>8} {'DomRatio_1':>11} {'DomRatio_rest':>14} {'max |h|':>10} {'dim':>5} "
          f"{'pos':>4} {'median':>8} {'x median':>9}")
    for i, (a, d1, dr, e) in enumerate(zip(prof.alpha_first_by_layer, prof.dom_ratio_first_by_layer,
                                           prof.dom_ratio_rest_by_layer, prof.extremes)):
        print(f"{i:>5} {a:>8.3f} {d1:>11.1f} {dr:>14.1f} {abs(e.value):>10.1f} {e.dim:>5} {e.position:>4} "
              f"{e.median:>8.3f} {e.ratio:>9.0f}")
    return 0


def _cmd_check_sinks(args) -> int:
    from sinklib.core.data import make_inputs
    from sinklib.core.memory import check_length
    from sinklib.mitigation import learned_sinks
    from sinklib.models.load import load_model
    from sinklib.pipeline.profiles import seed_everything

    seed_everything(args.seed)
    lm = load_model(args.model, device=args.device, dtype=args.dtype, attn_implementation="eager")
    if not learned_sinks.has_learned_sinks(lm.model):
        print(f"{lm.label} ({lm.name}) has no learned sink logits (no attention module with a 'sinks' parameter): "
              f"nothing to check")
        return 0
    window = learned_sinks.shortest_window(lm.model)
    if window is not None and args.seq_len > window:
        raise InputError(f"--seq-len {args.seq_len} is longer than the model's sliding window ({window} keys): "
                         f"alpha_0 is compared where every query sees the first key; use --seq-len {window} or less")
    check_length(lm, args.seq_len)
    ids = make_inputs(lm, "natural", args.num_seqs, args.seq_len, args.seed)
    print("\n".join(learned_sinks.check_model(lm.model, ids.to(lm.device), f"{lm.label} ({lm.name})").lines()))
    return 0


def _cmd_figures(args) -> int:
    from sinklib.pipeline.runner import run_all

    if args.dry_run:  # the plan only: nothing is downloaded or run
        from sinklib.core.errors import InputError
        from sinklib.pipeline.plan import format_plans, plan_run
        from sinklib.pipeline.protocols import route

        plans = plan_run(args.profile, args.model, args.gpu_gb, args.notebooks, args.host_gb)
        try:
            print(route(args.model, [p.notebook for p in plans], args.notebooks is not None)[1] or "", end="\n"
                  if args.model else "")
        except InputError:
            pass  # the plans list the reason
        print(format_plans(plans, args.profile))
        return 0 if all(p.fits for p in plans) else 1

    return run_all(profile=args.profile, model=args.model, device=args.device, seed=args.seed,
                   only=args.notebooks, figures_dir=args.figures_dir, build_dir=args.build_dir, jobs=args.jobs)


def _cmd_gallery(args) -> int:
    from sinklib.pipeline.gallery import build_gallery
    from sinklib.reproduction.figures_folder import notebook_folders

    folder = Path(args.figures_dir)
    if not folder.is_dir() or not notebook_folders(folder):
        raise InputError(f"no notebook results under {folder.resolve()}; check --figures-dir, or run make figures "
                         f"first")
    print(build_gallery(folder))
    return 0


def _cmd_exercises(args) -> int:
    from sinklib.teaching.exercises import write_exercises

    for path in write_exercises():
        print(path)
    return 0


def _cmd_scorecard(args) -> int:
    from sinklib.reproduction import scorecard

    rows = scorecard.collect(args.figures_dir)
    if args.json:
        print(json.dumps(scorecard.to_json(rows), indent=1, default=str))
    else:
        print(scorecard.format_table(rows))
    return 0 if rows else 1


def _cmd_verify(args) -> int:
    from sinklib.reproduction.verify import REFERENCE, verify

    return verify(args.figures_dir, args.reference or REFERENCE, write=args.write, force=args.force)


def _cmd_verify_cache(args) -> int:
    from sinklib.core.paths import cache_dir
    from sinklib.reproduction.cache_check import verify_cache

    cache = Path(args.cache) if args.cache else cache_dir()
    if not cache.is_dir():
        raise InputError(f"no model cache at {cache}; run make figures first, or point --cache (SINKLIB_CACHE) at one")
    return verify_cache(cache)


def _cmd_claims_schema(args) -> int:
    import json

    from sinklib.core.claims_file import json_schema

    print(json.dumps(json_schema(), indent=1, sort_keys=True))
    return 0


# In a checkout, the repository's folders whatever the working directory (run from notebooks/, a relative default
# wrote notebooks/figures); an installed copy writes where it is run.
FIGURES_DIR = str(REPO / "figures") if REPO else "figures"
BUILD_DIR = str(REPO / "build") if REPO else "build"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sinklib", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("models", help="list the model registry")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=_cmd_models)

    pr = sub.add_parser("profile", help="sink rate, alpha, DomRatio and massive activations per layer")
    pr.add_argument("--model", default="smollm2-135m", help="registry name or hub id (default smollm2-135m)")
    pr.add_argument("--input", choices=("natural", "random", "repeated"), default="natural")
    pr.add_argument("--seq-len", type=int, default=64, help="T (default 64, as Gu et al.)")
    pr.add_argument("--num-seqs", type=int, default=GU_NUM_SEQS, help=f"sequences (default {GU_NUM_SEQS})")
    pr.add_argument("--eps", type=float, default=0.3, help="sink threshold on alpha (default 0.3)")
    pr.add_argument("--batch-size", type=int, default=None,
                    help="sequences per forward (default: as many as the memory check admits, at most --num-seqs)")
    pr.add_argument("--device", default="auto")
    pr.add_argument("--seed", type=int, default=0)
    pr.add_argument("--json", action="store_true", help="print one JSON object")
    pr.add_argument("--yes", action="store_true",
                    help=f"run even when the first layer's timing estimates more than {LONG_RUN_S / 60:.0f} minutes "
                         "(without it such a run stops there and says how long it would take)")
    pr.set_defaults(func=_cmd_profile)

    ck = sub.add_parser("check-sinks", help="run a model with learned sink logits (gpt-oss) through every attention "
                                            "kernel here against the formula: one line per kernel")
    ck.add_argument("model", help="registry name or hub id of a model with learned sinks (e.g. openai/gpt-oss-20b)")
    ck.add_argument("--seq-len", type=int, default=32, help="tokens per window (default 32)")
    ck.add_argument("--num-seqs", type=int, default=2, help="Bible windows (default 2)")
    ck.add_argument("--dtype", default="float32", help="the kernels' dtype (default float32; bfloat16 on a GPU)")
    ck.add_argument("--device", default="auto")
    ck.add_argument("--seed", type=int, default=0)
    ck.set_defaults(func=_cmd_check_sinks)

    f = sub.add_parser("figures", help="run every notebook with papermill, then build the gallery")
    f.add_argument("--profile", default="cpu")
    f.add_argument("--model", default="", help="override the profile's model")
    f.add_argument("--device", default="", help="override the profile's device")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--notebooks", nargs="*", default=None, help="stems to run (default: all)")
    f.add_argument("--figures-dir", default=FIGURES_DIR)
    f.add_argument("--build-dir", default=BUILD_DIR)
    f.add_argument("--dry-run", action="store_true",
                   help="print each notebook's models, download sizes, dtype, batch sizes and memory per step; exit 1 "
                        "if a step does not fit (nothing is downloaded or run)")
    f.add_argument("--gpu-gb", type=float, default=80.0, help="GPU memory the gpu profile's plan is checked against")
    f.add_argument("--host-gb", type=float, default=128.0, help="host RAM beside the GPU the plan is checked against")
    f.add_argument("--jobs", type=int, default=None,
                   help="notebooks run at once, each kernel with cores/jobs threads (default: 2 on CPU profiles with "
                        ">= 2 cores, 1 on the gpu profile); 90_scorecard runs after the others")
    f.set_defaults(func=_cmd_figures)

    g = sub.add_parser("gallery", help="rebuild figures/index.html from what is there")
    g.add_argument("--figures-dir", default=FIGURES_DIR)
    g.set_defaults(func=_cmd_gallery)

    e = sub.add_parser("exercises", help="write notebooks/exercises/ from the solutions (stubs where the answers are)")
    e.set_defaults(func=_cmd_exercises)
    s = sub.add_parser("scorecard", help="every notebook's claims in one table: which published claims hold, where")
    s.add_argument("--figures-dir", default=FIGURES_DIR)
    s.add_argument("--json", action="store_true", help="print one JSON object (claims, per-paper counts)")
    s.set_defaults(func=_cmd_scorecard)
    v = sub.add_parser("verify", help="compare this run's claims with data/reference/cpu_profile_claims.json: every "
                                      "verdict that differs and every value beyond its tolerance (exit 1 if any)")
    v.add_argument("--figures-dir", default=FIGURES_DIR)
    v.add_argument("--reference", default=None, help="reference file (default data/reference/cpu_profile_claims.json)")
    v.add_argument("--write", action="store_true", help="write the reference from this run instead (after a clean run)")
    v.add_argument("--force", action="store_true", help="with --write: replace the reference even from a partial or "
                                                        "non-CPU run (make reference FORCE=1)")
    v.set_defaults(func=_cmd_verify)
    vc = sub.add_parser("verify-cache", help="hash every cached build in full against its manifest and check every "
                                             "cached weight finite (exit 1 naming each faulty build)")
    vc.add_argument("--cache", default=None, help="the cache folder (default: SINKLIB_CACHE or data/cache)")
    vc.set_defaults(func=_cmd_verify_cache)
    cs = sub.add_parser("claims-schema", help="print the JSON Schema of a notebook's claims.json (docs/claims.schema.json)")
    cs.set_defaults(func=_cmd_claims_schema)
    return p


def check_args(args) -> None:
    """Every argument checked before a model loads or a notebook runs: sizes, seed, eps and folders; one line each."""
    if getattr(args, "num_seqs", 1) < 1 or getattr(args, "seq_len", 2) < 2:
        raise InputError("--num-seqs must be >= 1 and --seq-len >= 2")
    if hasattr(args, "eps"):  # profile: the library's own checks (it loads torch; the other commands need not)
        from sinklib.core.analysis import check_batch_size, check_eps

        check_eps(args.eps)
        check_batch_size(args.batch_size)
    if hasattr(args, "seed"):
        from sinklib.core.data import check_seed

        check_seed(args.seed, "--seed")
    if getattr(args, "jobs", None) is not None and args.jobs < 1:
        raise InputError(f"--jobs (JOBS=) must be at least 1, got {args.jobs}; leave it out for the default")
    if getattr(args, "notebooks", None) == []:
        raise InputError("--notebooks was given no notebook; name one or more (e.g. --notebooks 00 10), or leave it "
                         "out to run them all")
    for flag in ("figures_dir", "build_dir"):
        if getattr(args, flag, None):
            require_folder(getattr(args, flag), "--" + flag.replace("_", "-"))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_args(args)
        return args.func(args)
    except SinklibError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
