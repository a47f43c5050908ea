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


@contextlib.contextmanager
def without_profiler_chatter():
    """Capture fd 2 around a profile; re-emit every line except kineto's start/stop chatter."""
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
            kept = [line for line in lines if not _KINETO_CHATTER.match(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr)
