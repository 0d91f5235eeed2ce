"""The fake CUDA device (tests.fake_cuda): it raises where real CUDA raises, and with it the GPU path's
first-run failures show on a CPU machine (issue: the GPU path, proven before a GPU)."""

from __future__ import annotations

import pytest
import torch

from tests.fake_cuda import FakeCudaError, FakeCudaTensor, fake_cuda


def test_tensors_and_modules_move_and_say_cuda():
    real = torch.cuda.is_available()  # a GPU host runs the suite too: the fake must leave its answer as it was
    with fake_cuda():
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        x = torch.randn(3, 4).to("cuda")
        assert isinstance(x, FakeCudaTensor) and x.device == torch.device("cuda", 0) and x.is_cuda
        lin = torch.nn.Linear(4, 2).cuda()
        assert lin.weight.device.type == "cuda" and isinstance(lin.weight, torch.nn.Parameter)
        y = lin(x)
        assert y.device.type == "cuda" and (y * 2 + 1).device.type == "cuda"
        assert torch.zeros(5, device="cuda").device.type == "cuda"
        assert (x * torch.tensor(2.0)).device.type == "cuda"  # a 0-dim CPU scalar mixes, as on CUDA
        assert x[torch.tensor([0, 2])].device.type == "cuda"  # a CUDA tensor takes CPU indices
        back = x.cpu()
        assert type(back) is torch.Tensor and back.numpy().shape == (3, 4)
        lin(x).sum().backward()
        assert lin.weight.grad.device.type == "cuda"  # gradients stay on the device
    assert torch.cuda.is_available() == real  # undone on exit


def test_it_raises_where_cuda_raises():
    with fake_cuda():
        x = torch.randn(3, 4).cuda()
        lin = torch.nn.Linear(4, 2).cuda()
        with pytest.raises(FakeCudaError, match="same device"):
            lin(torch.randn(3, 4))  # CPU input into a CUDA model
        with pytest.raises(FakeCudaError, match="same device"):
            x + torch.randn(3, 4)
        mask = torch.tensor([True, False, True]).cuda()
        cpu = torch.randn(3)
        with pytest.raises(FakeCudaError, match="indices should be"):
            cpu[mask]  # a CPU capture indexed by a mask built from CUDA input ids
        with pytest.raises(FakeCudaError, match="indices should be"):
            cpu[mask] = 0.0
        with pytest.raises(FakeCudaError, match="numpy"):
            x.numpy()


def test_cpu_values_written_through_an_index_raise_as_on_cuda():
    """CUDA's index_put checks its values' device (12_mllm crashed there on an H200); copies through a view do not."""
    with fake_cuda():
        x = torch.zeros(2, 5).cuda()
        mask = torch.tensor([True, False, True, False, True])
        writes = {"bool mask": lambda: x.__setitem__((slice(None), mask), torch.ones(2, 3)),
                  "CUDA mask": lambda: x.__setitem__((slice(None), mask.cuda()), torch.ones(2, 3)),
                  "list": lambda: x.__setitem__([0, 1], torch.ones(2, 5)),
                  "index_put_": lambda: x.index_put_((torch.tensor([0]),), torch.ones(1, 5)),
                  "masked_scatter_": lambda: x.masked_scatter_(mask.cuda().expand(2, 5), torch.ones(10)),
                  "index_copy_": lambda: x.index_copy_(1, torch.tensor([0]).cuda(), torch.ones(2, 1)),
                  "scatter_": lambda: x.scatter_(1, torch.tensor([[0], [1]]).cuda(), torch.ones(2, 1))}
        for write in writes.values():
            with pytest.raises(FakeCudaError, match="same device"):
                write()
        x[:, mask] = torch.ones(2, 3).cuda()  # values on the device
        x[:, mask] = torch.tensor(2.0)  # a 0-dim CPU scalar
        x[0:1] = torch.full((1, 5), 3.0)  # basic indexing: a host-to-device copy into a view
        x[1].copy_(torch.full((5,), 4.0))
        assert x.device.type == "cuda" and x.cpu().tolist() == [[3.0] * 5, [4.0] * 5]
        host = torch.zeros(5)
        host[0] = x[0, 0]  # a device-to-host copy into a view: CUDA performs it
        host[1:3] = x[0, :2]
        with pytest.raises(FakeCudaError, match="same device"):
            host[mask] = x[0, :3]  # CUDA values through an index into a CPU tensor
        assert host.tolist() == [3.0, 3.0, 3.0, 0.0, 0.0]


def test_two_devices_do_not_mix():
    with fake_cuda(devices=2):
        a, b = torch.ones(2).to("cuda:0"), torch.ones(2).to("cuda:1")
        assert b.device == torch.device("cuda", 1) and torch.cuda.device_count() == 2
        with pytest.raises(FakeCudaError, match="cuda:0 and cuda:1"):
            a + b
        assert (a + b.to("cuda:0")).device.index == 0


def test_mllm_profile_runs_on_cuda():
    """Issue item 1: the image mask was built from input ids on the GPU and indexed the CPU captures."""
    from sinklib.architectures.mllm import visual_sinks as vs
    from sinklib.models import tiny_random

    with fake_cuda():
        lm, inputs = tiny_random.loaded("llava")
        lm.model.to("cuda")
        prof = vs.profile_mllm(lm.model, {k: v.to("cuda") for k, v in inputs.items()})
        assert prof.image.device.type == "cpu" and prof.phi.shape[-1] == int(prof.image.sum())


def test_the_cpu_profile_stays_on_the_cpu_in_float32_where_a_gpu_exists(tmp_path):
    """Issue item 1: 'auto' took the GPU (and bfloat16) on any machine that has one, not the numbers of the README."""
    from sinklib.models.load import load_model
    from sinklib.pipeline import profiles

    with fake_cuda():
        run = profiles.resolve("cpu", notebook="10_llm", out_dir=tmp_path)
        lm = load_model("dinov2-s", device=run.device, dtype=run.dtype)
        assert lm.device.type == "cpu" and next(lm.model.parameters()).dtype == torch.float32
        assert not isinstance(next(lm.model.parameters()), FakeCudaTensor)


def test_models_deep_copy_and_cuda_only_kernels_run():
    """copy.deepcopy of a model on the device (02's interventions copy it), and kernels CUDA has but the CPU lacks
    (transformers' MoE blocks count tokens per expert with histc on integers there)."""
    import copy

    with fake_cuda():
        lin = torch.nn.Linear(3, 2).cuda()
        twin = copy.deepcopy(lin)
        assert twin.weight.device.type == "cuda" and isinstance(twin.weight, torch.nn.Parameter)
        assert torch.equal(twin.weight.cpu(), lin.weight.cpu()) and twin.weight is not lin.weight
        counts = torch.histc(torch.tensor([0, 1, 1, 3]).int().cuda(), bins=4, min=0, max=3)
        assert counts.device.type == "cuda" and counts.tolist() == [1, 2, 0, 1]


def test_one_kernel_can_run_an_offline_profile_then_the_gpu_one(monkeypatch, tmp_path):
    """Issue item 8: make lab exported HF_HUB_OFFLINE=1 to every kernel, and an offline profile's switch stayed on
    for a gpu run in the same kernel. huggingface_hub reads the switch once at import, so both are set."""
    import subprocess

    from huggingface_hub import constants

    from sinklib.pipeline import profiles

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv(profiles.OFFLINE_MARK, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    profiles.resolve("cpu", out_dir=str(tmp_path / "a"))
    assert constants.HF_HUB_OFFLINE and profiles.os.environ["HF_HUB_OFFLINE"] == "1"
    profiles.resolve("gpu", out_dir=str(tmp_path / "b"))
    assert not constants.HF_HUB_OFFLINE and "HF_HUB_OFFLINE" not in profiles.os.environ
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the user's own choice stays
    profiles.resolve("gpu", out_dir=str(tmp_path / "c"))
    assert profiles.os.environ["HF_HUB_OFFLINE"] == "1"
    from sinklib.core.paths import ROOT

    lab = subprocess.run(["make", "-n", "lab"], capture_output=True, text=True, cwd=ROOT).stdout
    assert "env -u HF_HUB_OFFLINE" in lab


def test_an_optimizer_steps_and_a_model_moves_between_fake_devices():
    """AdamW's graph-capture check asks torch.accelerator for the current stream; Module.to compares tensor types
    across devices -- neither may reach for the real driver or count as mixing devices."""
    with fake_cuda(2):
        net = torch.nn.Linear(3, 2).to("cuda:0")
        net.to("cuda:1")
        assert net.weight.device == torch.device("cuda:1")
        opt = torch.optim.AdamW(net.parameters(), lr=0.1, foreach=False)
        net(torch.ones(1, 3, device="cuda:1")).sum().backward()
        opt.step()


def test_weights_trained_on_a_gpu_are_cached_as_plain_cpu_tensors(tmp_path, monkeypatch):
    """03 trains on the GPU and reads the weights back later (``torch.load(weights_only=True)``): the cache holds CPU
    tensors, not the device's (under the fake device a tensor subclass, which weights_only refuses)."""
    from sinklib.mitigation import training
    from sinklib.mitigation.variant_lm import TinyConfig

    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    cfg = training.TrainConfig(model=TinyConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=16), steps=2,
                               batch_size=4, seq_len=16, eval_every=2, eval_seqs=4, data="bigram_backcopy",
                               precision="bf16", micro_batch=2)
    with fake_cuda(1):
        training.train(cfg, progress=False, device="cuda")
    net = training.load_trained(cfg)
    assert all(type(p) is torch.nn.Parameter and p.device.type == "cpu" for p in net.parameters())


def test_shapes_of_fake_cuda_tensors_stay_torch_sizes():
    """transformers' Idefics3 calls ``x.shape[1:].numel()``: a shape must stay a ``torch.Size``, not a tuple."""
    with fake_cuda(1):
        x = torch.zeros(2, 3, 4, device="cuda")
        assert type(x.shape) is torch.Size and x.shape[1:].numel() == 12 and type(x.size()) is torch.Size
