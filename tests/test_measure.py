"""Measurement: real peak memory, timing, analytic bytes (pinned to the H200 anchors), the guard."""
from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from relpos_core.kernels import gather, naive
from relpos_core.measure import analytic, guard
from relpos_core.measure.analytic import analytic_bytes
from relpos_core.measure.guard import MemoryBudgetError, memory_budget
from relpos_core.measure.memory import measure_peak_memory
from relpos_core.measure.timing import measure_time

MiB, GiB = 2**20, 2**30


def test_cpu_peak_is_measured_not_assumed():
    n = 256 * 1024  # 1 MiB of fp32

    def two_alive_then_one():
        a = torch.ones(n)  # 1 MiB
        b = torch.ones(2 * n)  # 2 MiB, a still alive: 3 MiB live
        del a
        c = torch.ones(n)  # back to 3 MiB
        return b.sum() + c.sum()

    peak = measure_peak_memory(two_alive_then_one)
    assert 3 * MiB <= peak < 3 * MiB + 64 * 1024
    assert measure_peak_memory(lambda: None) == 0


def test_cpu_naive_shaw_measured_agrees_with_analytic():
    L, d, k = 128, 32, 8
    q, rk = torch.randn(1, 1, L, d), torch.randn(2 * k + 1, d)
    index = gather.shaw_gather_index(L, max_relative_position=k)  # shared by layers: built outside the call
    for mod, path in ((naive, "naive"), (gather, "gather")):
        measured = measure_peak_memory(mod.shaw_key_logits, q, rk, max_relative_position=k, index=index)
        want = analytic_bytes(path, "shaw", 1, 1, L, L, d, k, torch.float32)
        assert 0.5 * want <= measured <= 2.5 * want, (path, measured, want)
        own_index = measure_peak_memory(mod.shaw_key_logits, q, rk, max_relative_position=k)
        assert own_index - measured == L * L * analytic.SHAW_INDEX_BYTES_PER_PAIR  # the index it built


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA allocator stats need a GPU")
def test_cuda_naive_shaw_measured_within_10_percent_of_analytic():
    L, d, k = 2048, 64, 64
    q, rk = torch.randn(1, 1, L, d, device="cuda"), torch.randn(2 * k + 1, d, device="cuda")
    with memory_budget(None):
        index = gather.shaw_gather_index(L, max_relative_position=k, device="cuda")
        for mod, path in ((naive, "naive"), (gather, "gather")):
            mod.shaw_key_logits(q, rk, max_relative_position=k, index=index)  # warm-up: cuBLAS workspace
            measured = measure_peak_memory(mod.shaw_key_logits, q, rk, max_relative_position=k, index=index)
            want = analytic_bytes(path, "shaw", 1, 1, L, L, d, k, torch.float32)
            assert abs(measured - want) <= 0.10 * want, (path, measured, want)


def test_analytic_bytes_reproduce_the_anchor_figures():
    """H200 anchors (measured): naive Shaw 4160 MiB vs gather 66 MiB (L=4096, one head, d=64, k=64,
    fp32), 1040 vs 17 MiB at L=2048; the seed: a 16-head fp32 bias at L=16384 is about 17 GB.
    The int64 [L, L] gather index is shared by layers and built outside the call, as there."""
    for L, naive_mib, gather_mib in ((4096, 4160, 66), (2048, 1040, 17)):
        n = analytic_bytes("naive", "shaw", 1, 1, L, L, 64, 64, torch.float32)
        g = analytic_bytes("gather", "shaw", 1, 1, L, L, 64, 64, torch.float32)
        assert round(n / MiB) == naive_mib and round(g / MiB) == gather_mib
    dense = analytic_bytes("sdpa_bias", "t5", 1, 16, 16384, 16384, 64, 128, torch.float32)
    assert 16 * GiB <= dense < 16.1 * GiB and round(16 * GiB / 1e9) == 17
    assert analytic_bytes("flex", "alibi", 1, 16, 16384, 16384, 64, 1, torch.float32) == 64
    for path, scheme in analytic.SUPPORTED:
        assert analytic_bytes(path, scheme, 1, 2, 8, 8, 4, 2, torch.bfloat16) >= 0


def test_guard_raises_before_allocating_with_the_numbers():
    q, rk = torch.randn(1, 1, 4096, 64), torch.randn(129, 64)

    def attempt():
        with pytest.raises(MemoryBudgetError) as info:
            naive.shaw_key_logits(q, rk, max_relative_position=64)
        return info.value

    with memory_budget(GiB):
        peak = measure_peak_memory(attempt)
        err = attempt()
    assert peak < MiB  # nothing large was allocated
    msg = str(err)
    assert "naive Shaw would materialise 4.0 GiB for [4096, 4096, 64] fp32" in msg
    gather_bytes = analytic_bytes("gather", "shaw", 1, 1, 4096, 4096, 64, 64, torch.float32)
    assert "use the gather path" in msg and f"({guard.format_bytes(gather_bytes)})" in msg
    assert isinstance(err, ValueError)


def test_budget_is_configurable_and_restored():
    before = guard.get_memory_budget()
    with memory_budget(123):
        assert guard.get_memory_budget() == 123
        with memory_budget(None):
            guard.check_memory(10**15, what="x", shape=(1,), dtype=torch.float32)  # no limit: no error
    assert guard.get_memory_budget() == before
    prev = guard.set_memory_budget(1000)
    try:
        with pytest.raises(MemoryBudgetError, match="1000 B"):
            guard.check_memory(2000, what="dense bias", shape=(2, 10, 25), dtype=torch.float32)
    finally:
        guard.set_memory_budget(prev)


def test_measure_time_is_positive():
    ms = measure_time(torch.mm, torch.randn(64, 64), torch.randn(64, 64), warmup=1, iters=3)
    assert ms > 0


@pytest.mark.parametrize("call, match", [
    (lambda: measure_time(torch.mm, iters=0), "iters"),
    (lambda: measure_time(torch.mm, warmup=-1), "warmup"),
    (lambda: measure_time(3), "fn"),
    (lambda: measure_peak_memory("f"), "fn"),
    (lambda: guard.set_memory_budget(0), "nbytes"),
    (lambda: analytic_bytes("fast", "shaw", 1, 1, 8, 8, 4, 2), "path"),
    (lambda: analytic_bytes("naive", "rotary", 1, 1, 8, 8, 4, 2), "scheme"),
    (lambda: analytic_bytes("skew", "t5", 1, 1, 8, 8, 4, 2), "no implementation"),
    (lambda: analytic_bytes("naive", "shaw", 1, 1, 0, 8, 4, 2), "Lq"),
    (lambda: analytic_bytes("naive", "shaw", 1, 1, 8, 8, 4, 2, dtype="fp32"), "dtype"),
])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_cpu_measurement_keeps_real_stderr_and_drops_only_profiler_chatter():
    code = (
        "import os, torch\n"
        "from relpos_core.measure import measure_peak_memory\n"
        "def noisy():\n"
        "    os.write(2, b'a real message on fd 2\\n')\n"
        "    return torch.ones(256, 256)\n"
        "print(measure_peak_memory(noisy))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == str(256 * 256 * 4)
    assert "a real message on fd 2" in run.stderr  # passed on, not swallowed
    assert "profiler_start" not in run.stderr and "profiler_stop" not in run.stderr
