"""Dai et al. (2019), eq. (4): (a) q.k + (b) q.r_{i-j} + (c) u.k + (d) v.r_{i-j}, scaled by 1/sqrt(d);
rows r for distances D - 1 .. 0 (heads first here)."""
import math

import torch

from relpos_core.schemes import transformer_xl

from .common import Case, attend, pairwise, rnd, softmax_list


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
                alpha = softmax_list(scores)
                for j in range(Lk):
                    heads[i, sl] += alpha[j] * (w_v[sl] @ x[b, j])
        out[b] = heads @ w_o.T
    return out, logits
