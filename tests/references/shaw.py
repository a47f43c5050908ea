"""Shaw, Uszkoreit and Vaswani (2018), eqs. (3)-(4): e_ij = q_i . (k_j + a^K_ij) / sqrt(d),
z_i = sum_j p_ij (v_j + a^V_ij), a_ij = table[clip(j - i, -k, k) + k]."""
import math

import torch

from relpos_core.schemes import shaw

from .common import Case, attend, pairwise, rnd, softmax_list


def shaw_clip_ref(j_minus_i: int, k: int) -> int:
    """Paper: clip(x, k) = max(-k, min(k, x)); the table row is clip(j - i) + k (key_minus_query)."""
    return max(-k, min(k, j_minus_i)) + k


def reference(q, k, v, params, qpos, kpos, causal):
    kmax, d = params["k"], q.shape[-1]
    rows = torch.tensor([[shaw_clip_ref(o, kmax) for o in row] for row in pairwise(qpos, kpos)])
    logits = q @ k.transpose(-2, -1)
    if params.get("rel_key") is not None:
        logits = logits + torch.einsum("bhid,ijd->bhij", q, params["rel_key"][rows])
    value_rows = params["rel_value"][rows] if params.get("rel_value") is not None else None
    return attend(logits / math.sqrt(d), v, qpos, kpos, causal, value_rows)


def shaw_attention_ref(q, k, v, rel_key, rel_value, max_relative_position, causal=False,
                       query_positions=None, key_positions=None):
    """``reference`` with the tables as arguments, in float64: q (B, H, Lq, d), k, v (B, H, Lk, d);
    rel_key / rel_value (2k + 1, d) or None. Positions default to 0..Lq-1 and 0..Lk-1; causal hides
    keys with p_j > p_i."""
    q, k, v = (t.detach().double() for t in (q, k, v))
    Lq, Lk = q.shape[2], k.shape[2]
    qpos = torch.arange(Lq) if query_positions is None else torch.as_tensor(list(query_positions))
    kpos = torch.arange(Lk) if key_positions is None else torch.as_tensor(list(key_positions))
    params = dict(k=max_relative_position, rel_key=None if rel_key is None else rel_key.detach().double(),
                  rel_value=None if rel_value is None else rel_value.detach().double())
    return reference(q, k, v, params, qpos, kpos, causal)


def make_params(H, d, k, generator, value=True):
    return dict(k=k, rel_key=rnd(generator, 2 * k + 1, d), rel_value=rnd(generator, 2 * k + 1, d) if value else None)


def term(p):
    return shaw.position_term(rel_key=p["rel_key"], rel_value=p.get("rel_value"), max_relative_position=p["k"])


def params_of(t):
    return dict(k=t.notes["max_relative_position"], rel_key=t.query_vectors[0].table,
                rel_value=None if t.value is None else t.value.table)


CASES = {"shaw": Case(reference, make_params, term, params_of),
         "shaw_key": Case(reference, lambda H, d, k, g: make_params(H, d, k, g, value=False), term, params_of)}


# ---------------------------------------------------------------------------------------
# BERT position_embedding_type="relative_key" / "relative_key_query" (transformers < 5):
# distance_embedding has 2 * max_position_embeddings - 1 rows, indexed by
# i - j + max_position_embeddings - 1 (convention query_minus_key). relative_key adds
# q_i . D[i - j + M - 1] to the logit; relative_key_query also adds k_j . D[i - j + M - 1]
# (Huang et al. 2020, "method 4"); the sum is scaled by 1 / sqrt(d) afterwards. No value
# term. No clipping: |i - j| must stay below max_position_embeddings.
# ---------------------------------------------------------------------------------------
def bert_relative_attention_ref(q, k, v, distance_embedding, max_position_embeddings,
                                position_embedding_type):
    """q, k, v (B, H, L, d); distance_embedding (2M - 1, d). Returns (B, H, Lq, d)."""
    assert position_embedding_type in ("relative_key", "relative_key_query")
    q, k, v, D = q.detach().double(), k.detach().double(), v.detach().double(), distance_embedding.detach().double()
    B, H, Lq, d = q.shape
    Lk = k.shape[2]
    M = max_position_embeddings
    out = torch.zeros(B, H, Lq, d, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                scores = []
                for j in range(Lk):
                    pos = D[i - j + M - 1]
                    s = float(q[b, h, i] @ k[b, h, j]) + float(q[b, h, i] @ pos)
                    if position_embedding_type == "relative_key_query":
                        s += float(k[b, h, j] @ pos)
                    scores.append(s / math.sqrt(d))
                alpha = softmax_list(scores)
                for j in range(Lk):
                    out[b, h, i] += alpha[j] * v[b, h, j]
    return out
