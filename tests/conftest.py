import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(max(1, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def tiny():
    from sinklib.models import load_model

    return load_model("tiny-llama-random", device="cpu", seed=0)


@pytest.fixture(scope="session")
def smollm2():
    from sinklib.models import load_model

    return load_model("smollm2-135m", device="cpu")
