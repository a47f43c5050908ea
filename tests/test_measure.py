"""Measurement: real peak memory, timing, analytic bytes (pinned to the H200 anchors), the guard."""
from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from relpos_core.measure import guard
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


@pytest.mark.parametrize("call, match", [
    (lambda: measure_time(torch.mm, iters=0), "iters"),
    (lambda: measure_time(torch.mm, warmup=-1), "warmup"),
    (lambda: measure_time(3), "fn"),
    (lambda: measure_peak_memory("f"), "fn"),
    (lambda: guard.set_memory_budget(0), "nbytes"),
    (lambda: analytic_bytes("shaw", "fast", "eager", B=1, H=1, Lq=8, Lk=8, d=4, k=2), "form"),
    (lambda: analytic_bytes("rotary", "naive", "eager", B=1, H=1, Lq=8, Lk=8, d=4, k=2), "scheme"),
    (lambda: analytic_bytes("t5", "skew", "eager", B=1, H=1, Lq=8, Lk=8, d=4, k=2), "skew form has no scalar"),
    (lambda: analytic_bytes("shaw", "naive", "eager", B=1, H=1, Lq=0, Lk=8, d=4, k=2), "Lq"),
    (lambda: analytic_bytes("shaw", "naive", "eager", B=1, H=1, Lq=8, Lk=8, d=4, k=2, dtype="fp32"), "dtype"),
    (lambda: analytic_bytes("shaw", "naive", "warp", B=1, H=1, Lq=8, Lk=8, d=4, k=2), "backend"),
])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_cpu_measurement_keeps_real_stderr_and_drops_only_profiler_chatter(capfd):
    def noisy():
        os.write(2, b"a real message on fd 2\n")  # straight to the file descriptor, as kineto writes
        return torch.ones(256, 256)

    assert measure_peak_memory(noisy) == 256 * 256 * 4
    err = capfd.readouterr().err
    assert "a real message on fd 2" in err  # passed on, not swallowed
    assert "profiler_start" not in err and "profiler_stop" not in err


def test_measure_time_counts_the_call():
    import time

    ms = measure_time(time.sleep, 0.02, warmup=0, iters=2)
    assert 18 <= ms < 500  # a 20 ms sleep takes at least ~20 ms, per call, in milliseconds
