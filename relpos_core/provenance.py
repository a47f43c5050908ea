"""Provenance shared by the benchmarks and the lab: which code produced a result."""
from __future__ import annotations

import datetime as _dt
import os
import platform
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


def machine(device="cpu", *, commit: str | None = None) -> dict:
    """What every result records about where and from which code it came: device, its
    name, torch and CUDA versions, Python, platform, CPU count, UTC date and git commit
    (``commit`` when taken earlier, at the start of a long run)."""
    device = torch.device(device)
    return dict(device=device.type, device_name=device_name(device), torch=torch.__version__,
                cuda=torch.version.cuda, python=platform.python_version(), platform=platform.platform(),
                cpu_count=os.cpu_count(), date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                git_commit=git_commit() if commit is None else commit)
