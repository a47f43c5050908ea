"""The device a chapter measures on (rp.measure.device), and a clean stderr on any torch build."""
from __future__ import annotations

import os
import sys

import pytest
import torch

import relpos_core as rp
from relpos_core.measure import _profiler

device = rp.measure.device


def test_pick_on_this_machine_names_what_ran():
    choice = device.pick()
    if torch.cuda.is_available():
        assert choice.is_cuda and choice.dtype in (torch.bfloat16, torch.float16)
        assert choice.name in choice.sentence and "CUDA" in choice.sentence
    else:
        assert choice.device == torch.device("cpu") and choice.dtype == torch.float32
        assert choice.capability is None and "CPU" in choice.sentence and "float32" in choice.sentence
        assert ("CUDA build" in choice.sentence) == bool(torch.version.cuda)


def test_pick_refuses_bad_devices():
    with pytest.raises(ValueError, match="device must be"):
        device.pick("tpu")
    with pytest.raises(ValueError, match="device must be"):
        device.pick("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="is_available"):
            device.pick("cuda")


@pytest.mark.parametrize("capability, dtype", [((7, 5), torch.float16), ((8, 0), torch.bfloat16),
                                               ((9, 0), torch.bfloat16), ((7, 0), torch.float16)])
def test_gpu_dtype_by_compute_capability(monkeypatch, capability, dtype):
    """bfloat16 from sm80 on; below it float16, which the fused kernels and Triton take (a T4 is sm75)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Test GPU")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: capability >= (8, 0))
    choice = device.pick()
    assert choice.device == torch.device("cuda", 0) and choice.dtype == dtype
    assert f"sm{capability[0]}{capability[1]}" in choice.sentence and "Test GPU" in choice.sentence
    fused, why = device.flex_compiles("cuda", choice.dtype)
    assert fused, why
    bf16_fused, why = device.flex_compiles("cuda", torch.bfloat16)
    assert bf16_fused == (capability >= (8, 0))
    if not bf16_fused:
        assert "unfused" in why and "float16" in why


def test_flex_compiles_on_cpu_and_sdpa_labels():
    assert device.flex_compiles("cpu", torch.float32)[0]
    assert device.sdpa_fused("flash") == (True, "fused (flash)")
    assert device.sdpa_fused("cudnn")[0] and device.sdpa_fused("efficient")[0]
    fused, label = device.sdpa_fused("math")
    assert not fused and "unfused" in label
    assert not device.sdpa_fused("none")[0]


def _through_filter(text: str) -> str:
    """What without_profiler_chatter passes on when ``text`` reaches file descriptor 2 inside it."""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    try:
        with _profiler.without_profiler_chatter():
            os.write(2, text.encode())
        sys.stderr.flush()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    with os.fdopen(read) as f:
        return f.read()


DEVICE_COUNT = "ERROR:2026-12-01 16:21:04 12212:12212 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\n"


def test_profiler_filter_drops_the_device_count_line_where_no_gpu_is(monkeypatch, capsys):
    """A CUDA build of torch without a GPU (Colab's CPU runtime) logs this on the first profile."""
    monkeypatch.setattr(_profiler, "_gpu_present", lambda: False)
    chatter = "USDT:2026-12-01 16:20:46 11787:11787 SyncActivityProfilerHandler.cpp:39] profiler_start\n"
    with capsys.disabled():
        passed = _through_filter(chatter + DEVICE_COUNT + "a real error\n")
    assert "gpuGetDeviceCount" not in passed and "profiler_start" not in passed
    assert "a real error" in passed  # anything else is passed on


def test_profiler_filter_keeps_the_device_count_line_with_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(_profiler, "_gpu_present", lambda: True)
    with capsys.disabled():
        assert "gpuGetDeviceCount failed with code 35" in _through_filter(DEVICE_COUNT)
