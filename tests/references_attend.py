"""Float64 references for rp.attend, written from the papers' equations with explicit positions.

One function per scheme: ``reference(q, k, v, params, qpos, kpos, causal)`` returns
(B, H, Lq, d). Every logit is built pair by pair from the formula (no kernel code is
reused), with query i at position qpos[i] and key j at kpos[j]; a query whose causal mask
hides every key gets a zero row (the library's documented rule).
"""
from __future__ import annotations

import math

import torch

from relpos_core.schemes import alibi as alibi_mod
from relpos_core.schemes import deberta as deberta_mod
from relpos_core.schemes import rope as rope_mod
from relpos_core.schemes import t5 as t5_mod


def _attend(logits, v, qpos, kpos, causal, value_rows=None):
    """softmax over keys (masked), then the weighted sum of v (+ value vectors per pair)."""
    if causal:
        visible = kpos[None, :] <= qpos[:, None]  # (Lq, Lk)
        logits = logits.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    empty = torch.isneginf(logits).all(-1, keepdim=True)
    probs = probs.masked_fill(empty, 0.0)
    out = probs @ v
    if value_rows is not None:  # (Lq, Lk, d)
        out = out + torch.einsum("bhij,ijd->bhid", probs, value_rows)
    return out


def _pairwise(qpos, kpos):
    """offsets j - i as a (Lq, Lk) list of Python ints."""
    return [[int(kj) - int(qi) for kj in kpos] for qi in qpos]


def none(q, k, v, params, qpos, kpos, causal):
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return _attend(logits, v, qpos, kpos, causal)


def rope(q, k, v, params, qpos, kpos, causal):
    d = q.shape[-1]
    theta = [10000.0 ** (-2.0 * m / d) for m in range(d // 2)]

    def rotate(x, positions):  # pair m = (m, m + d/2), the rotate-half layout, angle p * theta_m
        out = x.clone()
        for i, p in enumerate(positions.tolist()):
            for m, t in enumerate(theta):
                c, s = math.cos(p * t), math.sin(p * t)
                a, b = x[..., i, m], x[..., i, m + d // 2]
                out[..., i, m], out[..., i, m + d // 2] = a * c - b * s, a * s + b * c
        return out

    qr, kr = rotate(q, qpos), rotate(k, kpos)
    return none(qr, kr, v, params, qpos, kpos, causal)


def t5(q, k, v, params, qpos, kpos, causal):
    table = params["table"]  # (num_buckets, H)
    off = torch.tensor(_pairwise(qpos, kpos))
    buckets = t5_mod.t5_relative_bucket(off, bidirectional=params["bidirectional"], num_buckets=table.shape[0],
                                        max_distance=params["max_distance"])  # (Lq, Lk)
    bias = table[buckets].permute(2, 0, 1)  # (H, Lq, Lk)
    return _attend(q @ k.transpose(-2, -1) + bias, v, qpos, kpos, causal)  # T5: unscaled


def alibi(q, k, v, params, qpos, kpos, causal):
    H = q.shape[1]
    m = alibi_mod.alibi_slopes(H).double()
    dist = -torch.tensor(_pairwise(qpos, kpos), dtype=torch.float64)  # i - j
    bias = -m[:, None, None] * (dist.abs() if params.get("symmetric") else dist)
    return _attend(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias, v, qpos, kpos, causal)


def _clip_rows(off, kmax):
    return [[max(-kmax, min(kmax, o)) + kmax for o in row] for row in off]


def shaw(q, k, v, params, qpos, kpos, causal):
    kmax, d = params["k"], q.shape[-1]
    rows = torch.tensor(_clip_rows(_pairwise(qpos, kpos), kmax))  # (Lq, Lk)
    logits = q @ k.transpose(-2, -1)
    if params.get("rel_key") is not None:
        logits = logits + torch.einsum("bhid,ijd->bhij", q, params["rel_key"][rows])
    value_rows = params["rel_value"][rows] if params.get("rel_value") is not None else None
    return _attend(logits / math.sqrt(d), v, qpos, kpos, causal, value_rows)


shaw_key = shaw


def deberta(q, k, v, params, qpos, kpos, causal):
    S, d = params["att_span"], q.shape[-1]
    rel = -torch.tensor(_pairwise(qpos, kpos))  # i - j
    if params.get("position_buckets", -1) > 0:
        rel = deberta_mod.make_log_bucket_position(rel, params["position_buckets"], params["max_relative_positions"])
    idx = (rel + S).clamp(0, 2 * S - 1)  # (Lq, Lk): the paper's delta(i, j)
    Kr, Qr = params["pos_key"], params["pos_query"]  # (H, 2S, d)
    c2p = torch.einsum("bhid,hijd->bhij", q, Kr[:, idx])
    p2c = torch.einsum("bhjd,hijd->bhij", k, Qr[:, idx])  # the released code: same row as c2p
    logits = (q @ k.transpose(-2, -1) + c2p + p2c) / math.sqrt(3 * d)
    return _attend(logits, v, qpos, kpos, causal)


def transformer_xl(q, k, v, params, qpos, kpos, causal):
    r, u, vb = params["r_k"], params["u"], params["v"]  # r: (H, D, d) rows for distances D - 1 .. 0
    D, d = r.shape[1], q.shape[-1]
    dist = -torch.tensor(_pairwise(qpos, kpos))  # i - j
    row = (D - 1 - dist).clamp(0, D - 1)  # distances beyond the visible range are masked anyway
    a_c = (q + u[None, :, None, :]) @ k.transpose(-2, -1)  # (a) + (c)
    b_d = torch.einsum("bhid,hijd->bhij", q + vb[None, :, None, :], r[:, row])  # (b) + (d)
    return _attend((a_c + b_d) / math.sqrt(d), v, qpos, kpos, causal)


REFERENCES = dict(none=none, rope=rope, t5=t5, alibi=alibi, shaw=shaw, shaw_key=shaw_key, deberta=deberta,
                  transformer_xl=transformer_xl)


def make_params(scheme, H, d, k, generator, dtype=torch.float64):
    """Random parameters and the matching rp term for ``scheme``: (params, term_builder(dtype))."""
    def rnd(*shape, s=0.3):
        return torch.randn(*shape, generator=generator, dtype=torch.float64) * s

    if scheme == "t5":
        p = dict(table=rnd(8, H, s=1.0), bidirectional=True, max_distance=max(k, 3))
        return p, lambda dt: t5_mod.position_term(p["table"].to(dt), max_distance=p["max_distance"])
    if scheme == "alibi":
        p = dict(symmetric=False)
        return p, lambda dt: alibi_mod.position_term(H)
    if scheme in ("shaw", "shaw_key"):
        from relpos_core.schemes import shaw as shaw_mod

        p = dict(k=k, rel_key=rnd(2 * k + 1, d), rel_value=rnd(2 * k + 1, d) if scheme == "shaw" else None)
        return p, lambda dt: shaw_mod.position_term(
            rel_key=p["rel_key"].to(dt), rel_value=None if p["rel_value"] is None else p["rel_value"].to(dt),
            max_relative_position=k)
    if scheme == "deberta":
        p = dict(att_span=k, pos_key=rnd(H, 2 * k, d), pos_query=rnd(H, 2 * k, d))
        return p, lambda dt: deberta_mod.position_term(p["pos_key"].to(dt), p["pos_query"].to(dt), att_span=k)
    if scheme == "transformer_xl":
        from relpos_core.schemes import transformer_xl as txl_mod

        p = dict(r_k=rnd(H, k, d), u=rnd(H, d), v=rnd(H, d))
        return p, lambda dt: txl_mod.position_term(p["r_k"].to(dt), p["u"].to(dt), p["v"].to(dt))
    if scheme == "rope":
        return {}, lambda dt: rope_mod.position_term()
    return {}, lambda dt: None
