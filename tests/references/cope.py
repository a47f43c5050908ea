"""Golovneva et al. (2024), eqs. 3-5 and the paper's code: g_ij = sigmoid(q_i . k_j / sqrt(d)) for visible keys,
p_ij = sum over visible keys t with kpos_j <= kpos_t <= qpos_i of g_it, clamped at npos - 1, and
logit_ij = q_i . k_j / sqrt(d) + (p - floor p) q_i . e[ceil p] + (1 - p + floor p) q_i . e[floor p]: pair by pair."""
import math

import torch

from relpos_core.schemes import cope

from .common import Case, attend, content, rnd


def reference(q, k, v, params, qpos, kpos, causal):
    e = params["table"]  # (npos, d)
    npos, d = e.shape
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    extra = torch.zeros(B, H, Lq, Lk, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                qi = q[b, h, i]
                for j in range(Lk):
                    if kpos[j] > qpos[i]:
                        continue  # masked: its position is never read
                    p = sum(torch.sigmoid(qi @ k[b, h, t] / math.sqrt(d)) for t in range(Lk)
                            if kpos[j] <= kpos[t] <= qpos[i])  # j itself is visible: at least one term
                    p = torch.clamp(p, max=npos - 1)
                    lo, hi = math.floor(p.item()), math.ceil(p.item())
                    w = p - lo
                    extra[b, h, i, j] = w * (qi @ e[hi]) + (1 - w) * (qi @ e[lo])
    return attend(content(q, k) + extra, v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return dict(table=rnd(generator, max(k, 1), d, s=0.5))


def term(p):
    return cope.position_term(p["table"])


def params_of(t):
    return dict(table=t.pieces[0].table)


CASES = {"cope": Case(reference, make_params, term, params_of)}
