"""Press, Smith and Lewis (2022): q . k / sqrt(d) - m_h (i - j), slopes from the paper's get_slopes
(checked against BLOOM in tests/test_alibi.py); symmetric: - m_h |i - j|."""
import torch

from relpos_core.schemes import alibi

from .common import Case, attend, content, pairwise


def reference(q, k, v, params, qpos, kpos, causal):
    H = q.shape[1]
    m = alibi.alibi_slopes(H).double()
    dist = -torch.tensor(pairwise(qpos, kpos), dtype=torch.float64)  # i - j
    bias = -m[:, None, None] * (dist.abs() if params.get("symmetric") else dist)
    return attend(content(q, k) + bias, v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return dict(symmetric=False, H=H)


def term(p):
    return alibi.position_term(p["H"], symmetric=p["symmetric"])


def params_of(t):
    return dict(symmetric=t.notes["symmetric"], H=t.scalars[0].num_heads)


CASES = {"alibi": Case(reference, make_params, term, params_of)}
