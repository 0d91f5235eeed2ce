"""The second setting of make test's same-seed check moves oneDNN's bf16 kernel on whatever CPU runs it."""

from __future__ import annotations

from tests.second_setting import another_isa, second_setting


def test_another_isa_steps_down_from_each_kernel():
    assert another_isa("brg_matmul:avx10_1_512_amx") == "AVX512_CORE_BF16"
    assert another_isa("brg_matmul:avx512_core_amx") == "AVX512_CORE_BF16"
    assert another_isa("brg_matmul:avx512_core_bf16") == "AVX512_CORE"
    assert another_isa("gemm:jit:bf16") == "AVX2"
    assert another_isa("ATen (not oneDNN)") is None and another_isa(None) is None


def test_the_second_setting_runs_another_bf16_kernel_on_this_host():
    """ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 was the second setting everywhere: on an AMD host with avx512_bf16 it is
    a no-op, so the same-seed check compared one kernel with itself there."""
    env, here, there = second_setting(threads=2)
    print(f"bf16 matmul here: {here}; under {env}: {there}")
    assert here["onednn_bf16_matmul"] and there["onednn_bf16_matmul"]
    assert there["onednn_bf16_matmul"] != here["onednn_bf16_matmul"]
    assert env["OMP_NUM_THREADS"] == "2" and env["ONEDNN_MAX_CPU_ISA"] == another_isa(
        here["onednn_bf16_matmul"])


def test_thread_pools_in_another_load_order_are_not_a_difference():
    from sinklib.reproduction.environment import environment_differences

    def env(pools: str) -> dict:
        return {"environment": {"thread_pools": pools}}

    a, b = "openblas 0.3.31 (SkylakeX) x2; openmp libgomp x2", "openmp libgomp x2; openblas 0.3.31 (SkylakeX) x2"
    assert not [d for d in environment_differences(env(a), env(b)) if d.field == "thread_pools"]
    moved = environment_differences(env(a), env("openmp libgomp x2; openblas 0.3.31 (Haswell) x2"))
    assert [d.field for d in moved if d.field == "thread_pools"] == ["thread_pools"]
