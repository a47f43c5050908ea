"""Run the bad-input catalogue (tests/bad_inputs.py), each case in a forked child, and tabulate the outcomes.

    .venv/bin/python tools/bad_inputs.py [--timeout SECONDS]

Outcomes: clear (a ValueError whose message says what is wrong), cryptic (another exception,
or a ValueError that does not say it), silently accepted (the call returned), crashed (the
child died by a signal), hung (over the time limit).
"""
from __future__ import annotations

import argparse
import collections
import os
import pickle
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import warnings  # noqa: E402

from tests.bad_inputs import cases  # noqa: E402


def run_one(call, expect, timeout: float) -> tuple[str, str]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
            result = ("silently accepted", "returned normally")
        except ValueError as e:
            result = ("clear", "") if expect in str(e) else ("cryptic", f"ValueError: {str(e)[:160]}")
        except BaseException as e:  # noqa: BLE001 - every other exception is a finding
            result = ("cryptic", f"{type(e).__name__}: {str(e)[:160]}")
        os.write(write, pickle.dumps(result))
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return "hung", f"over {timeout:.0f} s"
        time.sleep(0.005)
    data = os.read(read, 1 << 16)
    os.close(read)
    if os.WIFSIGNALED(status):
        return "crashed", f"signal {os.WTERMSIG(status)}"
    return pickle.loads(data) if data else ("crashed", f"exit status {os.WEXITSTATUS(status)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
    args = ap.parse_args(argv)
    if not args.timeout > 0:
        ap.error("--timeout must be a number of seconds > 0")
    counts, findings = collections.Counter(), []
    catalogue = cases()
    for cid, call, expect in catalogue:
        outcome, detail = run_one(call, expect, args.timeout)
        counts[outcome] += 1
        if outcome != "clear":
            findings.append(f"- {outcome}: {cid}: {detail}")
    order = ("clear", "cryptic", "silently accepted", "crashed", "hung")
    print("| tried | " + " | ".join(order) + " |")
    print("|---|" + "---|" * len(order))
    print(f"| {len(catalogue)} | " + " | ".join(str(counts[o]) for o in order) + " |")
    print("\n".join(findings))
    return 0 if counts["clear"] == len(catalogue) else 1


if __name__ == "__main__":
    sys.exit(main())
