"""Float64 loop references written straight from the papers.

Slow on purpose: explicit Python loops over the query i and the key j, so each line reads
like the paper's formula. Every function is plain (no library code), works in float64
and takes absolute positions where the scheme depends on them, so the tests can shift
them. Shared file: Shaw / BERT / Music Transformer / Transformer-XL first; other helpers
append below.
"""
from __future__ import annotations

import math

import torch


def _softmax(scores: list[float]) -> list[float]:
    m = max(s for s in scores)
    e = [math.exp(s - m) if s != -math.inf else 0.0 for s in scores]
    z = sum(e)
    return [x / z for x in e]


# ---------------------------------------------------------------------------------------
# Shaw, Uszkoreit, Vaswani (2018), eqs. (3)-(5); convention key_minus_query (j - i)
# ---------------------------------------------------------------------------------------
def shaw_clip_ref(j_minus_i: int, k: int) -> int:
    """Paper: clip(x, k) = max(-k, min(k, x)); the table row is clip(j - i) + k."""
    return max(-k, min(k, j_minus_i)) + k


def shaw_attention_ref(q, k, v, rel_key, rel_value, max_relative_position, causal=False,
                       query_positions=None, key_positions=None):
    """z_i = sum_j alpha_ij (v_j + a^V_ij), e_ij = q_i . (k_j + a^K_ij) / sqrt(d).

    q (B, H, Lq, d), k, v (B, H, Lk, d); rel_key / rel_value (2k + 1, d) or None.
    Positions default to 0..Lq-1 and 0..Lk-1; causal hides keys with p_j > p_i.
    """
    q, k, v = q.detach().double(), k.detach().double(), v.detach().double()
    B, H, Lq, d = q.shape
    Lk = k.shape[2]
    qp = list(range(Lq)) if query_positions is None else list(query_positions)
    kp = list(range(Lk)) if key_positions is None else list(key_positions)
    out = torch.zeros(B, H, Lq, d, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                scores = []
                for j in range(Lk):
                    if causal and kp[j] > qp[i]:
                        scores.append(-math.inf)
                        continue
                    key = k[b, h, j].clone()
                    if rel_key is not None:
                        key = key + rel_key[shaw_clip_ref(kp[j] - qp[i], max_relative_position)].detach().double()
                    scores.append(float(q[b, h, i] @ key) / math.sqrt(d))
                alpha = _softmax(scores)
                for j in range(Lk):
                    val = v[b, h, j].clone()
                    if rel_value is not None:
                        val = val + rel_value[shaw_clip_ref(kp[j] - qp[i], max_relative_position)].detach().double()
                    out[b, h, i] += alpha[j] * val
    return out


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
                alpha = _softmax(scores)
                for j in range(Lk):
                    out[b, h, i] += alpha[j] * v[b, h, j]
    return out


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


# ---------------------------------------------------------------------------------------
# Transformer-XL (Dai et al. 2019), section 3.3; convention query_minus_key (i - j).
# A^rel_ij = q_i.W_kE x_j + q_i.W_kR R_{i-j} + u.W_kE x_j + v.W_kR R_{i-j}
# ---------------------------------------------------------------------------------------
def transformer_xl_sinusoid_ref(p: int, d_model: int) -> torch.Tensor:
    """R_p = [sin(p w_0) .. sin(p w_{d/2-1}), cos(p w_0) .. cos(p w_{d/2-1})], w_m = 10000^(-2m/d)."""
    w = [10000.0 ** (-2.0 * m / d_model) for m in range(d_model // 2)]
    return torch.tensor([math.sin(p * x) for x in w] + [math.cos(p * x) for x in w], dtype=torch.float64)


def transformer_xl_terms_ref(q, k, r_by_distance, u, v):
    """The four terms for queries at positions M + i (M = Lk - Lq) and keys at j.

    q (B, H, Lq, d), k (B, H, Lk, d), r_by_distance (H, Lk, d) with row p = W_kR R_p for
    distance p = i - j = 0..Lk-1, u, v (H, d). Returns a dict of (B, H, Lq, Lk) float64,
    NaN where the distance is negative (the key is in the query's future).
    """
    q, k, r, u, v = (t.detach().double() for t in (q, k, r_by_distance, u, v))
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    M = Lk - Lq
    terms = {name: torch.full((B, H, Lq, Lk), float("nan"), dtype=torch.float64) for name in "abcd"}
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                for j in range(Lk):
                    dist = (M + i) - j
                    terms["a"][b, h, i, j] = q[b, h, i] @ k[b, h, j]
                    terms["c"][b, h, i, j] = u[h] @ k[b, h, j]
                    if dist >= 0:
                        terms["b"][b, h, i, j] = q[b, h, i] @ r[h, dist]
                        terms["d"][b, h, i, j] = v[h] @ r[h, dist]
    return terms


def transformer_xl_attention_ref(h, mems, w_q, w_k, w_v, w_r, w_o, u, v, position_shift=0):
    """One Transformer-XL attention sublayer, from the formula, in float64.

    h (B, L, d_model) the segment, mems (B, M, d_model) or None; w_q, w_k, w_v, w_r
    (H * dh, d_model) and w_o (d_model, H * dh) as nn.Linear weights; u, v (H, dh).
    Keys are [mems; h] at absolute positions s + j, queries at s + M + i, s =
    ``position_shift``; key j is visible iff p_i - p_j >= 0. Returns (out (B, L, d_model),
    scaled logits (B, H, L, M + L) with -inf where hidden).
    """
    h = h.detach().double()
    x = h if mems is None else torch.cat([mems.detach().double(), h], dim=1)
    w_q, w_k, w_v, w_r, w_o, u, v = (t.detach().double() for t in (w_q, w_k, w_v, w_r, w_o, u, v))
    B, L, d_model = h.shape
    Lk = x.shape[1]
    M = Lk - L
    H, dh = u.shape
    qp = [position_shift + M + i for i in range(L)]
    kp = [position_shift + j for j in range(Lk)]
    logits = torch.full((B, H, L, Lk), -math.inf, dtype=torch.float64)
    out = torch.zeros(B, L, d_model, dtype=torch.float64)
    for b in range(B):
        heads = torch.zeros(L, H * dh, dtype=torch.float64)
        for hd in range(H):
            sl = slice(hd * dh, (hd + 1) * dh)
            for i in range(L):
                q_i = w_q[sl] @ x[b, M + i]
                scores = []
                for j in range(Lk):
                    dist = qp[i] - kp[j]
                    if dist < 0:
                        scores.append(-math.inf)
                        continue
                    k_j = w_k[sl] @ x[b, j]
                    r_ij = w_r[sl] @ transformer_xl_sinusoid_ref(dist, d_model)
                    a = q_i @ k_j
                    bb = q_i @ r_ij
                    c = u[hd] @ k_j
                    d = v[hd] @ r_ij
                    scores.append(float(a + bb + c + d) / math.sqrt(dh))
                logits[b, hd, i] = torch.tensor(scores, dtype=torch.float64)
                alpha = _softmax(scores)
                for j in range(Lk):
                    heads[i, sl] += alpha[j] * (w_v[sl] @ x[b, j])
        out[b] = heads @ w_o.T
    return out, logits
