"""Shaw, Uszkoreit and Vaswani (2018), eqs. (3)-(4): e_ij = q_i . (k_j + a^K_ij) / sqrt(d),
z_i = sum_j p_ij (v_j + a^V_ij), a_ij = table[clip(j - i, -k, k) + k]."""
import math

import torch

from relpos_core.schemes import shaw

from .common import Case, attend, pairwise, rnd


def reference(q, k, v, params, qpos, kpos, causal):
    kmax, d = params["k"], q.shape[-1]
    rows = torch.tensor([[max(-kmax, min(kmax, o)) + kmax for o in row] for row in pairwise(qpos, kpos)])
    logits = q @ k.transpose(-2, -1)
    if params.get("rel_key") is not None:
        logits = logits + torch.einsum("bhid,ijd->bhij", q, params["rel_key"][rows])
    value_rows = params["rel_value"][rows] if params.get("rel_value") is not None else None
    return attend(logits / math.sqrt(d), v, qpos, kpos, causal, value_rows)


def make_params(H, d, k, generator, value=True):
    return dict(k=k, rel_key=rnd(generator, 2 * k + 1, d), rel_value=rnd(generator, 2 * k + 1, d) if value else None)


def term(p):
    return shaw.position_term(rel_key=p["rel_key"], rel_value=p.get("rel_value"), max_relative_position=p["k"])


def params_of(t):
    return dict(k=t.notes["max_relative_position"], rel_key=t.query_vectors[0].table,
                rel_value=None if t.value is None else t.value.table)


CASES = {"shaw": Case(reference, make_params, term, params_of),
         "shaw_key": Case(reference, lambda H, d, k, g: make_params(H, d, k, g, value=False), term, params_of)}
