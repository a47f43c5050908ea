"""Provenance shared by the benchmarks and the lab: which code produced a result."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]  # the checkout, when relpos_core is installed editable


def git_commit() -> str:
    """HEAD of the checkout (``-dirty`` with local changes to tracked files), or
    ``RELPOS_GIT_COMMIT`` when the code runs from a copy of the tree without ``.git``
    (a GPU machine that received the working tree). Take it *before* a long run, so edits
    made while it runs do not count."""
    if os.environ.get("RELPOS_GIT_COMMIT"):
        return os.environ["RELPOS_GIT_COMMIT"] + " (from RELPOS_GIT_COMMIT)"
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return "unknown (not a git checkout)"
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError) as err:  # no git on the machine
        return f"unknown ({type(err).__name__})"


def device_name(device) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (else what platform knows)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels were dispatched to on this machine
    (``torch.backends.cpu.get_cpu_capability()``: "DEFAULT", "AVX2", "AVX512", ...).

    Two CPUs with different capabilities run different kernels (other vector widths,
    other summation orders), so a seeded float32 training run need not give the same
    numbers on both: record it beside every result."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):  # an old torch without it
        return "unknown"


def cpu_flags() -> list[str]:
    """The vector-instruction flags of /proc/cpuinfo that matter for torch's kernels (empty elsewhere)."""
    wanted = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "asimd", "sve")
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                have = set(line.split(":", 1)[1].split())
                return [f for f in wanted if f in have]
    except OSError:
        pass
    return []


def torch_build() -> dict:
    """How this torch was built: version, git revision, debug flag, the BLAS and parallel
    backends it links (what changes float32 results from one installation to the next)."""
    config = torch.__config__.show()
    found = re.search(r"BLAS_INFO=([^,\s]+)", config)
    blas = found.group(1) if found else "unknown"
    return dict(version=torch.__version__, git_version=getattr(torch.version, "git_version", None),
                debug=bool(getattr(torch.version, "debug", False)), blas=blas,
                parallel=torch.__config__.parallel_info().splitlines()[0].strip(),
                mkldnn=bool(torch.backends.mkldnn.is_available()))


def machine(device="cpu", *, commit: str | None = None) -> dict:
    """What every result records about where and from which code it came: device, its
    name, torch and CUDA versions, Python, platform, CPU count, UTC date and git commit
    (``commit`` when taken earlier, at the start of a long run); for the CPU also what
    decides its float32 numbers: the instruction set torch dispatches to
    (``cpu_capability``), the CPU's vector flags, torch's default thread count, the
    torch build (``torch_build``) and the load average when the record was made."""
    device = torch.device(device)
    return dict(device=device.type, device_name=device_name(device), torch=torch.__version__,
                cuda=torch.version.cuda, python=platform.python_version(), platform=platform.platform(),
                cpu_count=os.cpu_count(), cpu_model=device_name("cpu"), cpu_capability=cpu_capability(),
                cpu_flags=cpu_flags(), torch_threads=torch.get_num_threads(), torch_build=torch_build(),
                load_average=load_average(),
                date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                git_commit=git_commit() if commit is None else commit)
