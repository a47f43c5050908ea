"""Run torch.profiler quietly without losing anything else written to stderr."""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings

# Kineto writes one "profiler_start" and one "profiler_stop" line straight to file
# descriptor 2 for every profile; raising KINETO_LOG_LEVEL to hide them would hide its
# errors too. So only those two lines are dropped; anything else is passed on.
_KINETO_CHATTER = re.compile(r"^(USDT|STAGE):.*(profiler_start|profiler_stop|Completed Stage: [\w ]+)\s*$")
# A CUDA build of torch on a machine without a GPU (a Colab CPU runtime) has kineto ask the
# driver for its devices on the first profile, and log the failure ("code 35": no driver).
# Where torch sees no GPU that line says nothing new, so it is dropped there too; with a
# GPU present it would be a real error and is passed on.
_NO_GPU_DEVICE_COUNT = re.compile(r"^ERROR:.*\bgpuGetDeviceCount failed with code \d+\s*$")


# torch 2.10 to 2.12 warn on the first profile of a process, whatever its schedule, that "Profiler
# clears events at the end of each cycle" (the check ran after the profiler it tests was created,
# so it always held: pytorch/pytorch#180348, fixed in 2.13 by #180387). Every profile here has no
# schedule, hence one cycle: nothing is cleared, so the warning is false for it and hiding it loses
# nothing. Exactly that message is ignored, and only while a profile starts. (acc_events=True would
# also silence it, but makes the profiler parse every event into FunctionEvents as it stops, which
# the memory counts, reading kineto's events directly, never need.)
_CYCLE_WARNING = r"Warning: Profiler clears events at the end of each cycle\."


def _dropped(line: str, gpu_present: bool) -> bool:
    return bool(_KINETO_CHATTER.match(line)) or (not gpu_present and bool(_NO_GPU_DEVICE_COUNT.match(line)))


def _gpu_present() -> bool:
    import torch

    return torch.cuda.is_available()


@contextlib.contextmanager
def without_profiler_chatter():
    """Capture fd 2 around a profile; re-emit every line except kineto's start/stop chatter
    (and, where torch sees no GPU, the device-count error of a CUDA build)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded interpreters): leave it alone
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode(errors="replace").splitlines()
            gpu_present = _gpu_present()
            kept = [line for line in lines if not _dropped(line, gpu_present)]
            if kept:
                print("\n".join(kept), file=sys.stderr)


@contextlib.contextmanager
def quiet_profile(**kwargs):
    """``torch.profiler.profile(**kwargs)`` for one cycle (no schedule), without its chatter.

    Kineto's start/stop lines are dropped from stderr (``without_profiler_chatter``) and torch
    2.10-2.12's false "clears events at the end of each cycle" warning is ignored as the profile
    starts (see ``_CYCLE_WARNING``); every other line and warning passes. Yields the profile.
    """
    from torch.profiler import profile

    if "schedule" in kwargs:
        raise ValueError("quiet_profile profiles one cycle: a schedule would clear events between cycles")
    with without_profiler_chatter(), contextlib.ExitStack() as stack:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_CYCLE_WARNING, category=UserWarning)
            session = stack.enter_context(profile(**kwargs))  # the warning comes as it starts
        yield session
