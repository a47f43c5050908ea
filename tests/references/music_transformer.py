"""Huang et al. (2018): S^rel_ij = q_i . E_r[(j - i) + K], one embedding per distance -K .. K
(distances beyond K share the end rows); logits (q k^T + S^rel) / sqrt(d)."""
import math

import torch

from relpos_core.schemes import music_transformer

from .common import Case, attend, pairwise, rnd


def reference(q, k, v, params, qpos, kpos, causal):
    E, d = params["rel_emb"], q.shape[-1]
    K = (E.shape[0] - 1) // 2
    rows = torch.tensor([[max(-K, min(K, o)) + K for o in row] for row in pairwise(qpos, kpos)])
    s_rel = torch.einsum("bhid,ijd->bhij", q, E[rows])
    return attend((q @ k.transpose(-2, -1) + s_rel) / math.sqrt(d), v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return dict(rel_emb=rnd(generator, 2 * k + 1, d))


def term(p):
    return music_transformer.position_term(p["rel_emb"])


def params_of(t):
    return dict(rel_emb=t.query_vectors[0].table)


CASES = {"music_transformer": Case(reference, make_params, term, params_of)}
