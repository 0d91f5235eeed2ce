"""Which settings move the CPU profile's numbers? Each probe runs in a fresh process under one setting and its
outputs are compared with a reference setting's (the 1-thread baseline unless said), bit for bit, as the largest
absolute difference and, for scalars (losses, ratios), as the two values.

Probes (the real offline models at small sizes: about a minute a setting on 2 cores, except oneDNN capped at AVX2,
where PyTorch's bfloat16 matmuls leave oneDNN and the training probes run ~10x slower):
* ``lm``: SmolLM2's logits and layer-2 attention probabilities (eager) on 4 x 64 Bible tokens;
* ``projector``: 4 steps of the LLaVA-style stand-in's projector training (12_mllm's stand-in recipe, seed 0,
  bfloat16 autocast): the projector's weights, every step's loss and the step-0 loss (a forward only);
* ``tinylm``: 40 steps of 03's tiny LM (the CPU profile's setting, softmax attention, bfloat16 autocast): the final
  weights and the validation loss at steps 0 and 40;
* ``moe router``: 40 steps of 11_moe's trained router (:mod:`sinklib.architectures.moe.trained_router`, seed 0, 03's
  harness in bfloat16 autocast): the router weights, the validation loss and the first token's same-set share;
* ``kv``: 01's KV quantisation on SmolLM2 (float32, sdpa) as the CPU profile computes it, on the first
  ``KV_TOKENS`` tokens of its held-out stream instead of 1,024: keys per channel over 32-token groups, 64 tokens a
  step, all tokens quantised vs the first 4 kept; the IntactKV ratio ppl(kept) / ppl(all) at 2 and 4 bits;
* ``vit``: DINOv2-S's last hidden state on two bundled photos.

Settings: the baseline (one thread, as every notebook of ``make figures`` runs), two threads, oneDNN capped at
AVX512-BF16 (``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16``: what an AMX CPU runs when told not to use AMX; a no-op on a
CPU without AMX) and at AVX2, ATen's kernels limited to AVX2 (``ATEN_CPU_CAPABILITY=avx2``), MKL's conditional
numerical reproducibility (``MKL_CBWR=COMPATIBLE``), and the training probes in float32 instead of bfloat16
autocast (``SINKLIB_PROBE_PRECISION=float32``), at one thread (against the baseline: how far bf16 is from float32)
and at two (against float32 at one thread). ``--settings`` also offers ``PYTHONHASHSEED=1`` and
``torch.use_deterministic_algorithms(True)`` (both bit-identical when last measured). Each probe process reports
which kernels it ran: oneDNN's ISA, the implementation of one bfloat16 matmul (``brg_matmul:avx512_core_bf16``,
``...avx512_core_amx`` on an AMX CPU, or none when PyTorch does not hand it to oneDNN) and MKL's CNR mode.

    python benchmarks/determinism.py            # prints the table (also written to build/determinism.json)
    python benchmarks/determinism.py --settings "2 threads" "MKL_CBWR=COMPATIBLE"   # some settings (+ baseline)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE = "baseline (1 thread)"
FLOAT32 = "float32 training (1 thread)"
TWO_THREADS = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
F32 = {"SINKLIB_PROBE_PRECISION": "float32"}
# setting -> (environment on top of BASE_ENV, the setting it is compared with)
SETTINGS: dict[str, tuple[dict[str, str], str]] = {
    BASELINE: ({}, BASELINE),
    "2 threads": (TWO_THREADS, BASELINE),
    "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16": ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, BASELINE),
    "ONEDNN_MAX_CPU_ISA=AVX2": ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, BASELINE),
    "ATEN_CPU_CAPABILITY=avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, BASELINE),
    "MKL_CBWR=COMPATIBLE": ({"MKL_CBWR": "COMPATIBLE"}, BASELINE),
    FLOAT32: (F32, BASELINE),
    "float32 training, 2 threads": ({**F32, **TWO_THREADS}, FLOAT32),
}
OPTIONAL: dict[str, tuple[dict[str, str], str]] = {
    "PYTHONHASHSEED=1 (vs 0)": ({"PYTHONHASHSEED": "1"}, BASELINE),
    "deterministic algorithms": ({"SINKLIB_DETERMINISTIC": "1"}, BASELINE),
}
BASE_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "HF_HUB_OFFLINE": "1"}
TRAIN_STEPS = 40  # tinylm and moe router
KV_TOKENS = 512  # 01's CPU profile quantises the first 1,024 tokens of its 2,048-token held-out stream
KV_STREAM = 2048  # the CPU profile's stream_tokens (the stream's first tokens depend on its length only via the draw)


def kernels() -> dict[str, str]:
    """Which kernels this process runs: oneDNN's ISA and the implementations of one bfloat16 matmul and one float32
    convolution (oneDNN's verbose output), MKL's CNR mode and processor line (MKL's verbose output), ATen's CPU
    capability. The verbose lines are written by C code to fd 1, so fd 1 is pointed at a file meanwhile."""
    import torch

    a, b = torch.randn(64, 64).bfloat16(), torch.randn(64, 64).bfloat16()
    x, w = torch.randn(1, 3, 16, 16), torch.randn(8, 3, 4, 4)
    sys.stdout.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(1)
        os.dup2(tmp.fileno(), 1)
        try:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                torch.nn.functional.conv2d(x, w, stride=4)
                torch.nn.functional.linear(a, b)
            with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
                torch.nn.functional.linear(a.float(), b.float())
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")

    def find(pattern: str, default: str = "none") -> str:
        m = re.search(pattern, text, re.M)
        return m.group(1).strip() if m else default

    return {"onednn_isa": find(r"onednn_verbose,.*,info,cpu,isa:(.*)$"),
            "bf16_matmul": find(r"onednn_verbose,.*,exec,cpu,matmul,([^,]+),", "not oneDNN"),
            "f32_conv": find(r"onednn_verbose,.*,exec,cpu,convolution,([^,]+),", "not oneDNN"),
            "mkl_cnr": find(r"MKL_VERBOSE SGEMM.* CNR:(\S+)"),
            "mkl_cpu": find(r"MKL_VERBOSE oneMKL.*? for (.*?), Lnx"),
            "aten_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": str(torch.get_num_threads())}


def probes(out: Path) -> None:
    """Run every probe in this process and save the outputs to ``out``: {"tensors": named tensors, "scalars": named
    floats, "seconds": per probe, "kernels": :func:`kernels`}."""
    from dataclasses import replace

    import torch

    if os.environ.get("SINKLIB_DETERMINISTIC"):
        torch.use_deterministic_algorithms(True)
    precision = os.environ.get("SINKLIB_PROBE_PRECISION")  # None: each recipe's own (bf16 autocast)
    from sinklib.architectures.moe import trained_router
    from sinklib.core import images
    from sinklib.core.data import text_windows
    from sinklib.core.evaluation import ppl_ratio_interval
    from sinklib.mitigation import training
    from sinklib.mitigation.protocol import TRAIN_CPU
    from sinklib.models import stitch
    from sinklib.models.conversion import converted_path
    from sinklib.models.load import load_model
    from sinklib.utilization import streaming
    from sinklib.utilization.kvquant import QuantizedKVCache

    # trained runs (and their weights) go to a folder of this process, not to data/cache/training
    runs = out.parent / f"runs-{out.stem}"
    runs.mkdir(parents=True, exist_ok=True)
    for f in runs.iterdir():
        f.unlink()
    training.run_paths = lambda cfg: (runs / f"{cfg.key()}.json", runs / f"{cfg.key()}.pt")

    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, float] = {}
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        seconds[name] = round(time.perf_counter() - clock, 1)
        clock = time.perf_counter()

    lm = load_model("smollm2-135m", device="cpu", dtype=torch.float32, attn_implementation="eager")
    ids = text_windows(lm.tokenizer, 4, 64, 0)  # (4, 64)
    with torch.no_grad():
        out_lm = lm.model(ids, output_attentions=True)
    tensors["lm logits"], tensors["lm attention (layer 2)"] = out_lm.logits, out_lm.attentions[2]
    del lm, out_lm
    lap("lm")

    # 01's section 4 (CPU profile: float32, sdpa, the held-out stream of seed 0), on its first KV_TOKENS tokens
    lm = load_model("smollm2-135m", device="cpu", dtype=torch.float32)
    stream = text_windows(lm.tokenizer, 1, KV_STREAM, 0, split="heldout")[0]
    q_tokens = stream[:KV_TOKENS]
    with torch.no_grad():
        for bits in (2, 4):
            nll = {keep: streaming.stream_nll(lm, q_tokens, QuantizedKVCache.for_model(lm.model, bits, 32, keep,
                                                                                      key_axis="channel"),
                                              64, progress=False)
                   for keep in (0, 4)}
            tensors[f"kv {bits}-bit NLL, 4 kept"] = nll[4]
            scalars[f"kv {bits}-bit ratio kept/all"] = ppl_ratio_interval(nll[0], nll[4])[0]
    del lm
    lap("kv")

    # first: loading DINOv2-S converts it once (locked against make figures) if no process has yet
    vit = load_model("dinov2-s", device="cpu", dtype=torch.float32)
    pixels = images.to_pixels([p.image for p in images.photos(["astronaut", "coffee"])], size=224)
    with torch.no_grad():
        tensors["vit last hidden"] = vit.model(pixels).last_hidden_state
    del vit
    lap("vit")

    config = replace(stitch.StitchConfig(), steps=4)
    if precision:
        config = replace(config, precision=precision)
    torch.manual_seed(config.seed)
    model, tokenizer = stitch.assemble(converted_path("dinov2-s"), converted_path("smollm2-135m"), config.image_size)
    losses = stitch.train_projector(model, tokenizer, config, log=lambda *_: None)
    tensors["projector (4 steps)"] = torch.cat([p.detach().flatten() for p in
                                                model.model.multi_modal_projector.parameters()])
    tensors["projector losses (4 steps)"] = torch.tensor(losses, dtype=torch.float64)
    scalars["projector step-0 loss"] = losses[0]  # the untrained projector's forward: no update yet
    scalars["projector step-3 loss"] = losses[-1]
    del model
    lap("projector")

    cfg = replace(TRAIN_CPU, steps=TRAIN_STEPS, eval_every=TRAIN_STEPS)
    if precision:
        cfg = replace(cfg, precision=precision)
    run = training.train(cfg, progress=False)  # seeds itself from cfg.seed
    tensors[f"tinylm ({TRAIN_STEPS} steps) weights"] = torch.cat(
        [p.detach().flatten() for p in training.load_trained(cfg).parameters()])
    scalars["tinylm step-0 val loss"] = run["checkpoints"][0]["val_loss"]
    scalars[f"tinylm step-{TRAIN_STEPS} val loss"] = run["checkpoints"][-1]["val_loss"]
    lap("tinylm")

    moe = trained_router.moe_config(replace(TRAIN_CPU, steps=TRAIN_STEPS, eval_every=TRAIN_STEPS), seed=0)
    if precision:
        moe = replace(moe, precision=precision)
    measured = trained_router.measure(moe, n_seqs=32)
    router = training.load_trained(moe)
    tensors[f"moe router ({TRAIN_STEPS} steps) weights"] = torch.cat(
        [p.detach().flatten() for name, p in router.named_parameters() if ".router." in name])
    tensors["moe same-set share, first token"] = torch.tensor(measured.same_set_first, dtype=torch.float64)
    scalars[f"moe step-{TRAIN_STEPS} val loss"] = measured.val_loss
    lap("moe router")

    torch.save({"tensors": tensors, "scalars": scalars, "seconds": seconds, "kernels": kernels()}, out)


def compare(ref: dict, other: dict) -> dict[str, dict]:
    """Per probe: identical (bit for bit), max |diff| and, for scalars, both values."""
    import torch

    rows = {}
    for probe, a in ref["tensors"].items():
        b = other["tensors"][probe]
        same = a.shape == b.shape and torch.equal(a, b)
        diff = float((b.double() - a.double()).abs().max()) if a.shape == b.shape else float("nan")
        rows[probe] = {"identical": same, "max_abs_diff": diff}
    for probe, a in ref["scalars"].items():
        b = other["scalars"][probe]
        rows[probe] = {"identical": a == b, "max_abs_diff": abs(b - a), "value": b, "reference_value": a}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    every = {**SETTINGS, **OPTIONAL}
    parser.add_argument("--settings", nargs="+", choices=list(every), default=list(SETTINGS),
                        help="settings to run (each one's reference is added)")
    args = parser.parse_args()
    chosen = [BASELINE] + [s for s in args.settings if s != BASELINE]
    chosen += [every[s][1] for s in chosen if every[s][1] not in chosen]
    chosen = [s for s in every if s in chosen]  # in the table's order

    root = Path(__file__).resolve().parents[1]
    work = root / "build" / "determinism"
    work.mkdir(parents=True, exist_ok=True)
    outputs, seconds = {}, {}
    total = time.perf_counter()
    for i, name in enumerate(chosen):
        target = work / f"{i}.pt"
        env = {**os.environ, **BASE_ENV, **every[name][0]}
        for key in ("ONEDNN_VERBOSE", "DNNL_VERBOSE", "MKL_VERBOSE"):
            env.pop(key, None)  # the probe reads the verbose output itself
        start = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--probe", str(target)], env=env, check=True, cwd=root)
        seconds[name] = round(time.perf_counter() - start, 1)
        outputs[name] = target
        print(f"ran {name} in {seconds[name]:.0f} s", flush=True)

    import torch

    loaded = {name: torch.load(path) for name, path in outputs.items()}
    print(f"\nall settings: {time.perf_counter() - total:.0f} s\n")
    print(f"{'setting':<38}{'s':>5}  {'probe s (lm/kv/vit/proj/tiny/moe)':<36}{'threads':>7}  {'oneDNN bf16 matmul':<28}"
          f"{'f32 conv':<17}{'MKL CNR':<12}{'ATen':<8}oneDNN ISA")
    for name, out in loaded.items():
        k, s = out["kernels"], out["seconds"]
        probe_s = "/".join(f"{v:.0f}" for v in s.values())
        print(f"{name:<38}{seconds[name]:>5.0f}  {probe_s:<36}{k['threads']:>7}  {k['bf16_matmul']:<28}"
              f"{k['f32_conv']:<17}{k['mkl_cnr']:<12}{k['aten_capability']:<8}{k['onednn_isa']}")
    print(f"MKL on this CPU: {loaded[BASELINE]['kernels']['mkl_cpu']}")

    table = {}
    print(f"\n{'setting':<38}{'vs':<10}{'probe':<36}{'identical':>10}{'max |diff|':>12}  value (reference)")
    for name, out in loaded.items():
        ref_name = every[name][1]
        rows = compare(loaded[ref_name], out)
        table[name] = {"vs": ref_name, "env": every[name][0], "seconds": seconds[name],
                       "probe_seconds": out["seconds"], "kernels": out["kernels"], "probes": rows}
        if name == BASELINE:
            continue
        vs = "baseline" if ref_name == BASELINE else "float32"
        for probe, row in rows.items():
            value = f"{row['value']:.6f} ({row['reference_value']:.6f})" if "value" in row else ""
            print(f"{name:<38}{vs:<10}{probe:<36}{str(row['identical']):>10}{row['max_abs_diff']:>12.3g}  {value}")
    print("\nbaseline values: " + ", ".join(f"{k} {v:.6f}" for k, v in loaded[BASELINE]["scalars"].items()))
    (root / "build" / "determinism.json").write_text(json.dumps(
        {"kv_tokens": KV_TOKENS, "train_steps": TRAIN_STEPS, "seconds": seconds, "table": table}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        probes(Path(sys.argv[2]))
    else:
        main()
