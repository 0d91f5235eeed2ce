"""Which settings move the CPU profile's numbers? Each probe runs in a fresh process under one setting and its
outputs are compared with the baseline's, bit for bit and as the largest absolute difference.

Probes (the real offline models, small sizes so the whole table takes a few minutes):
* ``lm``: SmolLM2's logits and layer-2 attention probabilities (eager) on 4 x 64 Bible tokens;
* ``projector``: 4 steps of the LLaVA-style stand-in's projector training (12_mllm's stand-in recipe, seed 0);
* ``tinylm``: 40 steps of 03's tiny LM (the CPU profile's setting, softmax attention);
* ``vit``: DINOv2-S's last hidden state on two bundled photos.

Settings: the baseline (one thread, as every notebook of ``make figures`` runs), two threads, another
PYTHONHASHSEED, ``torch.use_deterministic_algorithms(True)``, MKL's conditional numerical reproducibility
(``MKL_CBWR=COMPATIBLE``), and ATen's kernels limited to AVX2 (``ATEN_CPU_CAPABILITY=avx2``, what a CPU without
AVX-512 runs) -- the last two stand in for "another machine of this kind with another instruction set".

    python benchmarks/determinism.py            # prints the table (also written to build/determinism.json)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SETTINGS: dict[str, dict[str, str]] = {
    "baseline (1 thread)": {},
    "2 threads": {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
    "PYTHONHASHSEED=1 (vs 0)": {"PYTHONHASHSEED": "1"},
    "deterministic algorithms": {"SINKLIB_DETERMINISTIC": "1"},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
}
BASE_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "HF_HUB_OFFLINE": "1"}


def probes(out: Path) -> None:
    """Run every probe in this process and save the outputs to ``out`` (a torch file of named tensors)."""
    from dataclasses import replace

    import torch

    if os.environ.get("SINKLIB_DETERMINISTIC"):
        torch.use_deterministic_algorithms(True)
    from sinklib.core import images
    from sinklib.core.data import text_windows
    from sinklib.mitigation import training
    from sinklib.models import stitch
    from sinklib.models.conversion import converted_path
    from sinklib.models.load import load_model
    from sinklib.pipeline.profiles import _TRAIN_CPU

    result: dict[str, torch.Tensor] = {}
    lm = load_model("smollm2-135m", device="cpu", dtype=torch.float32, attn_implementation="eager")
    ids = torch.tensor(text_windows(lm.tokenizer, 4, 64, 0))
    with torch.no_grad():
        out_lm = lm.model(ids, output_attentions=True)
    result["lm logits"], result["lm attention (layer 2)"] = out_lm.logits, out_lm.attentions[2]

    config = replace(stitch.StitchConfig(), steps=4)
    torch.manual_seed(config.seed)
    model, tokenizer = stitch.assemble(converted_path("dinov2-s"), converted_path("smollm2-135m"), config.image_size)
    stitch.train_projector(model, tokenizer, config, log=lambda *_: None)
    result["projector (4 steps)"] = torch.cat([p.detach().flatten() for p in
                                                model.model.multi_modal_projector.parameters()])
    vit = load_model("dinov2-s", device="cpu", dtype=torch.float32)
    pixels = images.to_pixels([p.image for p in images.photos(["astronaut", "coffee"])], size=224)
    with torch.no_grad():
        result["vit last hidden"] = vit.model(pixels).last_hidden_state

    cfg = replace(_TRAIN_CPU, steps=40, eval_every=40)
    run = training.train(cfg, use_cache=False, progress=False)  # seeds itself from cfg.seed
    result["tinylm (40 steps) val loss"] = torch.tensor([c["val_loss"] for c in run["checkpoints"]], dtype=torch.float64)
    torch.save(result, out)


def main() -> None:
    root = Path(__file__).resolve().parents[1]
    work = root / "build" / "determinism"
    work.mkdir(parents=True, exist_ok=True)
    outputs, seconds = {}, {}
    for name, extra in SETTINGS.items():
        target = work / f"{len(outputs)}.pt"
        env = {**os.environ, **BASE_ENV, **extra}
        start = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--probe", str(target)], env=env, check=True, cwd=root)
        seconds[name] = time.perf_counter() - start
        outputs[name] = target
        print(f"ran {name} in {seconds[name]:.0f} s", flush=True)

    import torch

    base = torch.load(outputs["baseline (1 thread)"])
    table = {}
    print(f"\n{'setting':<28}{'probe':<30}{'identical':>10}{'max |diff|':>14}")
    for name, path in outputs.items():
        other = torch.load(path)
        for probe, ref in base.items():
            diff = float((other[probe].double() - ref.double()).abs().max())
            same = torch.equal(other[probe], ref)
            table.setdefault(name, {})[probe] = {"identical": same, "max_abs_diff": diff}
            print(f"{name:<28}{probe:<30}{str(same):>10}{diff:>14.3g}")
    (root / "build" / "determinism.json").write_text(json.dumps({"seconds": seconds, "table": table}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        probes(Path(sys.argv[2]))
    else:
        main()
