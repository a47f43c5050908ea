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


# ---------------------------------------------------------------------------------------
# Music Transformer (Huang et al. 2018): S^rel_ij = q_i . E_{j - i}; key_minus_query.
# ---------------------------------------------------------------------------------------
def music_relative_logits_ref(q, rel_emb, positions=None):
    """q (..., L, d); rel_emb (2L - 1, d) or (L, d) with row r = distance r - (L - 1).

    Entry (i, j) = q_i . E[(p_j - p_i) + L - 1]; NaN where that row does not exist
    (j > i for an L-row table).
    """
    q, E = q.detach().double(), rel_emb.detach().double()
    *lead, L, d = q.shape
    qf = q.reshape(-1, L, d)
    p = list(range(L)) if positions is None else list(positions)
    out = torch.full((qf.shape[0], L, L), float("nan"), dtype=torch.float64)
    for n in range(qf.shape[0]):
        for i in range(L):
            for j in range(L):
                row = (p[j] - p[i]) + L - 1
                if 0 <= row < E.shape[0]:
                    out[n, i, j] = qf[n, i] @ E[row]
    return out.reshape(*lead, L, L)
