"""Every bad input of tests/bad_inputs.py raises a ValueError that names what is wrong, before any work.

``python tools/bad_inputs.py`` runs the same catalogue in forked children (to count crashes and
hangs too) and prints the table quoted in the closing notes.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import relpos_core as rp
from tests.bad_inputs import cases

GROUPS = ("attend[", "attend ", "builder ")


@pytest.mark.parametrize("group", GROUPS)
def test_every_bad_input_gets_a_clear_error(group):
    """One test per group, every case checked (tools/bad_inputs.py runs the attend cases for every path)."""
    problems = []
    for cid, call, expect in cases(every_path=False):
        if not cid.startswith(group):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                call()
            problems.append(f"{cid}: accepted")
        except ValueError as e:
            if expect not in str(e):
                problems.append(f"{cid}: message does not say {expect!r}: {e}")
    assert not problems, "\n".join(problems)


def test_numpy_scalars_are_accepted_like_python_numbers():
    q, k, v = (torch.randn(1, 2, n, 8) for n in (3, 5, 5))
    term = rp.schemes.shaw.position_term(rel_key=torch.randn(5, 8), max_relative_position=np.int64(2))
    a = rp.attend(q, k, v, term, query_offset=np.int32(2), causal=True)
    b = rp.attend(q, k, v, term, query_offset=2, causal=True)
    torch.testing.assert_close(a, b)
    assert rp.terms.PositionTerm("x", "none", scale=np.float32(0.5)).scale == 0.5
    torch.testing.assert_close(rp.attention(q, k, v, scale=np.float64(0.25)), rp.attention(q, k, v, scale=0.25))


@pytest.mark.slow
def test_a_bad_budget_variable_does_not_break_the_import_and_is_named_when_used():
    """One child process (importing torch costs seconds); the parser's other bad values are builder cases."""
    value = "1e400"
    code = ("import torch, relpos_core as rp\n"
            "try:\n    rp.relative_offsets(4)\nexcept ValueError as e:\n    print('ERR', e)\n")
    env = {**os.environ, "RELPOS_MEMORY_BUDGET": value}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ERR RELPOS_MEMORY_BUDGET must be a whole number of bytes"), run.stdout
