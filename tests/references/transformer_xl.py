"""Dai et al. (2019), eq. (4): (a) q.k + (b) q.r_{i-j} + (c) u.k + (d) v.r_{i-j}, scaled by 1/sqrt(d);
rows r for distances D - 1 .. 0 (heads first here)."""
import math

import torch

from relpos_core.schemes import transformer_xl

from .common import Case, attend, pairwise, rnd


def reference(q, k, v, params, qpos, kpos, causal):
    r, u, vb = params["r_k"], params["u"], params["v"]  # r: (H, D, d) rows for distances D - 1 .. 0
    D, d = r.shape[1], q.shape[-1]
    dist = -torch.tensor(pairwise(qpos, kpos))  # i - j
    row = (D - 1 - dist).clamp(0, D - 1)  # distances beyond the visible range are masked anyway
    a_c = (q + u[None, :, None, :]) @ k.transpose(-2, -1)  # (a) + (c)
    b_d = torch.einsum("bhid,hijd->bhij", q + vb[None, :, None, :], r[:, row])  # (b) + (d)
    return attend((a_c + b_d) / math.sqrt(d), v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return dict(r_k=rnd(generator, H, max(k, 40), d), u=rnd(generator, H, d), v=rnd(generator, H, d))


def term(p):
    return transformer_xl.position_term(p["r_k"], p["u"], p["v"], layout="HDd")


def params_of(t):
    piece = t.query_vectors[0]
    return dict(r_k=piece.table, u=t.content_shift, v=piece.shift)


CASES = {"transformer_xl": Case(reference, make_params, term, params_of)}
