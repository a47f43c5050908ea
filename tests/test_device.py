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


# -- one cycle, no false warning: torch 2.10-2.12 warn on every profile -------------------------------------------
CYCLE_WARNING = ("Warning: Profiler clears events at the end of each cycle.Only events from the current cycle "
                 "will be reported.To keep events across cycles, set acc_events=True.")  # torch 2.11's words


def test_every_profile_in_the_library_goes_through_quiet_profile():
    """A profile started anywhere else would show torch 2.10-2.12's cycle warning to a reader."""
    import pathlib
    import re

    package = pathlib.Path(rp.__file__).parent
    direct = [f"{p.relative_to(package)}: {line.strip()}"
              for p in sorted(package.rglob("*.py")) if p.name != "_profiler.py"
              for line in p.read_text().splitlines()
              if re.search(r"\bimport\b.*\bprofile\b(?!_)|profiler\.profile\(", line)]
    assert not direct, direct


def test_quiet_profile_ignores_the_cycle_warning_and_nothing_else(monkeypatch):
    """The false warning (as torch 2.11 words it) is dropped; another warning at the start passes."""
    import warnings

    import torch.profiler

    class Profile:  # warns as torch 2.10-2.12's profile does when it starts
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def __enter__(self):
            warnings.warn(CYCLE_WARNING, UserWarning)
            warnings.warn("Warning: another profiler warning", UserWarning)
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.profiler, "profile", Profile)
    with pytest.warns(UserWarning) as caught:
        with _profiler.quiet_profile(profile_memory=True) as session:
            assert session.kwargs == {"profile_memory": True}
    assert [str(w.message) for w in caught] == ["Warning: another profiler warning"]
    with pytest.raises(ValueError, match="schedule"):
        with _profiler.quiet_profile(schedule=None):
            pass


def test_the_measurements_warn_nothing():
    """With warnings as errors, every profiling measurement runs (on torch 2.11 this failed)."""
    from relpos_core.measure.profile import batched_cpu_profile
    import warnings

    q = torch.randn(1, 2, 8, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rp.measure.measure_peak_memory(lambda: q @ q.transpose(-1, -2)) > 0
        out, backend = rp.measure.detect_sdpa_backend(torch.nn.functional.scaled_dot_product_attention, q, q, q)
        assert backend != "none"
        assert len(batched_cpu_profile([lambda: q * 2])) == 1
