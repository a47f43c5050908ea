"""Run torch.profiler quietly without losing anything else written to stderr."""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

# Kineto writes one "profiler_start" and one "profiler_stop" line straight to file
# descriptor 2 for every profile; raising KINETO_LOG_LEVEL to hide them would hide its
# errors too. So only those two lines are dropped; anything else is passed on.
_KINETO_CHATTER = re.compile(r"^(USDT|STAGE):.*(profiler_start|profiler_stop|Completed Stage: [\w ]+)\s*$")
# A CUDA build of torch on a machine without a GPU (a Colab CPU runtime) has kineto ask the
# driver for its devices on the first profile, and log the failure ("code 35": no driver).
# Where torch sees no GPU that line says nothing new, so it is dropped there too; with a
# GPU present it would be a real error and is passed on.
_NO_GPU_DEVICE_COUNT = re.compile(r"^ERROR:.*\bgpuGetDeviceCount failed with code \d+\s*$")


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
