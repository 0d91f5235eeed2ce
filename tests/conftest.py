import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(max(1, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def tiny():
    from sinklib.models.load import load_model

    return load_model("tiny-llama-random", device="cpu", seed=0)


@pytest.fixture(scope="session")
def smollm2():
    from sinklib.models.load import load_model

    return load_model("smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def tiny_gemma3():
    """Builds a tiny random Gemma-3 (a sliding-window layer, then a full one; logit soft-capping), seeded, eval mode."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    def build(sliding_window: int, softcap: float) -> Gemma3ForCausalLM:
        config = Gemma3TextConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, sliding_window=sliding_window,
            layer_types=["sliding_attention", "full_attention"], attn_logit_softcapping=softcap,
        )
        torch.manual_seed(0)
        return Gemma3ForCausalLM(config).eval()

    return build


@pytest.fixture(scope="session")
def two_kernels():
    """``run({key: call}, **env)``: each call (a papermill run) two at a time, one thread per kernel, as make figures
    runs them; ``env`` is set for the kernels, which inherit the environment. Returns {key: what the call returned}."""
    from concurrent.futures import ThreadPoolExecutor

    def run(calls: dict, **env: str) -> dict:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **env}.items():
                mp.setenv(k, v)
            with ThreadPoolExecutor(2) as pool:
                futures = {key: pool.submit(call) for key, call in calls.items()}
                return {key: f.result() for key, f in futures.items()}

    return run
