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


# Loop references, one (i, j) pair at a time, so each line reads like the formula
# (convention query_minus_key: the offset of pair (i, j) is i - j).


def ref_delta(i: int, j: int, k: int) -> int:
    """Paper eq. (3): the clip-and-shift index delta(i, j) into a table of 2k rows."""
    if i - j <= -k:
        return 0
    if i - j >= k:
        return 2 * k - 1
    return i - j + k


def ref_c2p_p2c(q, k, pos_key, pos_query, rel, span, p2c_index="code"):
    """Paper Algorithm 1, one (b, h, i, j) at a time, in float64.

    q (B, H, Lq, d), k (B, H, Lk, d), pos_key/pos_query (H, 2S, d), rel (Lq, Lk) = i - j.
    c2p[i, j] = q_i . K_r[delta(i, j)]. p2c[i, j] = k_j . Q_r[row] where row is
    delta(j, i) (paper, from -rel) or delta(i, j) (what the released code reads).
    """
    q, k, pos_key, pos_query = (t.double() for t in (q, k, pos_key, pos_query))
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    c2p = torch.zeros(B, H, Lq, Lk, dtype=torch.float64)
    p2c = torch.zeros(B, H, Lq, Lk, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                for j in range(Lk):
                    r = int(rel[i, j])
                    c_row = min(max(r + span, 0), 2 * span - 1)
                    p_row = c_row if p2c_index == "code" else min(max(-r + span, 0), 2 * span - 1)
                    c2p[b, h, i, j] = torch.dot(q[b, h, i], pos_key[h, c_row])
                    p2c[b, h, i, j] = torch.dot(k[b, h, j], pos_query[h, p_row])
    return c2p, p2c


def _lin(x, w, b):
    return x @ w.T + b


def _layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def ref_attention(sd, prefix, hidden, query, rel_emb, rel, span, num_heads, mask=None, share_att_key=True):
    """Disentangled self-attention (paper eq. 4-5) from a state dict, float64.

    A[i, j] = Q_i . K_j + Q_i . K_r[delta(i, j)] + K_j . Q_r[delta(i, j)] (the code's p2c row),
    H_o = softmax(A / sqrt(3 d)) V. hidden (B, Lk, D) keys/values, query (B, Lq, D).
    mask (B, Lq, Lk) bool, True = may attend (masked scores -> a very negative number).
    """
    p = {n: t.double() for n, t in sd.items()}
    hidden, query, rel_emb = hidden.double(), query.double(), rel_emb.double()
    B, Lk, D = hidden.shape
    Lq = query.shape[1]
    d = D // num_heads
    Q = _lin(query, p[prefix + "query_proj.weight"], p[prefix + "query_proj.bias"])
    K = _lin(hidden, p[prefix + "key_proj.weight"], p[prefix + "key_proj.bias"])
    V = _lin(hidden, p[prefix + "value_proj.weight"], p[prefix + "value_proj.bias"])
    kp, qp = ("key_proj", "query_proj") if share_att_key else ("pos_key_proj", "pos_query_proj")
    Kr = _lin(rel_emb, p[prefix + kp + ".weight"], p[prefix + kp + ".bias"])
    Qr = _lin(rel_emb, p[prefix + qp + ".weight"], p[prefix + qp + ".bias"])
    out = torch.zeros(B, Lq, D, dtype=torch.float64)
    for b in range(B):
        for h in range(num_heads):
            s = slice(h * d, (h + 1) * d)
            A = torch.zeros(Lq, Lk, dtype=torch.float64)
            for i in range(Lq):
                for j in range(Lk):
                    row = min(max(int(rel[i, j]) + span, 0), 2 * span - 1)
                    A[i, j] = Q[b, i, s] @ K[b, j, s] + Q[b, i, s] @ Kr[row, s] + K[b, j, s] @ Qr[row, s]
                    if mask is not None and not mask[b, i, j]:
                        A[i, j] = -1e300
            A = A / math.sqrt(d * 3)
            out[b, :, s] = torch.softmax(A, dim=-1) @ V[b, :, s]
    return out


def ref_layer(sd, hidden, query, rel_emb, rel, span, num_heads, eps, mask=None, prefix=""):
    """Post-LN transformer layer around the disentangled attention, float64."""
    p = {n: t.double() for n, t in sd.items()}
    query = query.double()
    ctx = ref_attention(sd, prefix + "attention.self.", hidden, query, rel_emb, rel, span, num_heads, mask)
    x = _layer_norm(
        _lin(ctx, p[prefix + "attention.output.dense.weight"], p[prefix + "attention.output.dense.bias"]) + query,
        p[prefix + "attention.output.LayerNorm.weight"], p[prefix + "attention.output.LayerNorm.bias"], eps,
    )
    h = _lin(x, p[prefix + "intermediate.dense.weight"], p[prefix + "intermediate.dense.bias"])
    h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    y = _lin(h, p[prefix + "output.dense.weight"], p[prefix + "output.dense.bias"]) + x
    return _layer_norm(y, p[prefix + "output.LayerNorm.weight"], p[prefix + "output.LayerNorm.bias"], eps)


def ref_emd(sd, hidden, position_ids, rel_emb, rel, span, num_heads, eps, num_steps=2, mask=None):
    """Enhanced Mask Decoder (paper section 3.2): I_0 = H + P, I_{t+1} = layer(H, query I_t)."""
    P = sd["position_embeddings.weight"].double()[position_ids]
    query = hidden.double() + P
    for _ in range(num_steps):
        query = ref_layer(sd, hidden, query, rel_emb, rel, span, num_heads, eps, mask, prefix="layer.")
    return query
