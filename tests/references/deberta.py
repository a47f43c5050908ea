"""He et al. (2021), eqs. (2)-(4): (q.k + q.K_r[delta(i, j)] + k.Q_r[delta(i, j)]) / sqrt(3d), delta(i, j) =
clamp(i - j + S, 0, 2S - 1) (the released code's p2c row; the paper's delta(j, i) is p2c_index="paper")."""
import math

import torch

from relpos_core.schemes import deberta

from .common import Case, attend, pairwise, rnd


def reference(q, k, v, params, qpos, kpos, causal):
    S, d = params["att_span"], q.shape[-1]
    rel = -torch.tensor(pairwise(qpos, kpos))  # i - j
    if params.get("position_buckets", -1) > 0:
        rel = deberta.make_log_bucket_position(rel, params["position_buckets"], params["max_relative_positions"])
    idx = (rel + S).clamp(0, 2 * S - 1)  # (Lq, Lk): the paper's delta(i, j)
    Kr, Qr = params["pos_key"], params["pos_query"]  # (H, 2S, d)
    c2p = torch.einsum("bhid,hijd->bhij", q, Kr[:, idx])
    p2c = torch.einsum("bhjd,hijd->bhij", k, Qr[:, idx])  # the released code: same row as c2p
    logits = (q @ k.transpose(-2, -1) + c2p + p2c) / math.sqrt(3 * d)
    return attend(logits, v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return dict(att_span=k, pos_key=rnd(generator, H, 2 * k, d), pos_query=rnd(generator, H, 2 * k, d))


def term(p):
    return deberta.position_term(p["pos_key"], p["pos_query"], att_span=p["att_span"])


CASES = {"deberta": Case(reference, make_params, term), "deberta_emd": Case(reference, make_params, term)}
