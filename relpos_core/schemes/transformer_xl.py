"""Transformer-XL: four relative terms, two global biases, and segment memory.

Paper: Zihang Dai, Zhilin Yang, Yiming Yang, Jaime Carbonell, Quoc V. Le, Ruslan
Salakhutdinov, "Transformer-XL: Attentive Language Models Beyond a Fixed-Length
Context", ACL 2019. Book: "Transformer-XL: four relative terms and a
segment memory" (chapters/04_transformer_xl.ipynb).

Sign convention: ``query_minus_key``. The pair (i, j) uses the sinusoid R_{i-j}; a key
*before* the query has a positive distance. With M cached states in front of a segment
of L queries, query i sits at position M + i and key j at position j, so the distance is
M + i - j >= 0 for every key the causal mask lets through. The logit is

    A_ij = q_i . k_j            (a) content to content
         + q_i . r_{i-j}        (b) content-dependent position
         + u   . k_j            (c) global content bias
         + v   . r_{i-j}        (d) global position bias

with q_i = W_q x_i, k_j = W_kE x_j, r_{i-j} = W_kR R_{i-j} (a separate projection of the
fixed sinusoid), and learned u, v per head. (a) + (c) is (q_i + u) . k_j and (b) + (d)
is (q_i + v) . r_{i-j}. The paper's code computes (b) and (d) against the Lk relative rows
(distances Lk-1 .. 0) and moves them into place with ``_rel_shift``, a reshape that is
now ``relpos_core.kernels.skew.rel_shift``; the reference here indexes row Lk - 1 - (i - j)
directly, the equations as written.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor
from relpos_core.budget import check_memory
from relpos_core.offsets import relative_offsets
from relpos_core.schemes.declaration import Distance, Lab, PositionModule, Scheme
from relpos_core.terms import PositionTerm, QueryVectors, RowIndex, example_tensor

__all__ = [
    "TransformerXLConfig",
    "RelPartialLearnableAttention",
    "run_segments",
    "sinusoidal_relative_encoding",
    "transformer_xl_causal_mask",
    "transformer_xl_terms",
    "position_term",
    "TransformerXLOptions",
    "TransformerXLPosition",
    "SCHEME",
]


def sinusoidal_relative_encoding(
    key_len: int,
    d_model: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """R for distances key_len - 1 down to 0, as in the paper's code: (key_len, d_model).

    Sign convention: ``query_minus_key``: row r is R at distance i - j = key_len - 1 - r
    (so the last row is distance 0). R_p = [sin(p w_0), ..., sin(p w_{d/2-1}),
    cos(p w_0), ..., cos(p w_{d/2-1})] with w_m = 10000^(-2m / d_model); d_model even.
    Computed in float64, then cast to ``dtype``.
    """
    key_len = check_positive_int("key_len", key_len)
    d_model = check_positive_int("d_model", d_model)
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be an even integer >= 2 (sin and cos halves), got {d_model}")
    check_choice("dtype", dtype, (torch.float16, torch.bfloat16, torch.float32, torch.float64))
    pos_seq = torch.arange(key_len - 1, -1, -1.0, dtype=torch.float64, device=device)  # (Lk,) Lk-1 .. 0
    two_m = torch.arange(0.0, d_model, 2.0, dtype=torch.float64, device=device)  # (d/2,) 0, 2, 4, ...
    inv_freq = 1.0 / (10000 ** (two_m / d_model))  # (d/2,) w_m
    sinusoid = torch.outer(pos_seq, inv_freq)  # (Lk, d/2)
    return torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1).to(dtype)  # (Lk, d_model)


def transformer_xl_causal_mask(query_len: int, key_len: int, *, device=None) -> torch.Tensor:
    """True where key j is visible to query i: j <= i + (key_len - query_len).

    Sign convention: ``query_minus_key``: visible iff the distance i - j (with the queries
    at the end of the keys) is >= 0. Returns a (query_len, key_len) bool tensor.
    """
    query_len = check_positive_int("query_len", query_len)
    key_len = check_positive_int("key_len", key_len)
    if query_len > key_len:
        raise ValueError(f"query_len must be <= key_len = {key_len}, got {query_len}")
    dist = relative_offsets(query_len, key_len, convention="query_minus_key",
                            query_offset=key_len - query_len, device=device)  # (Lq, Lk), i - j
    return dist >= 0


def _relative_table(r_k, H: int, Lk: int, d: int, r_layout: str) -> torch.Tensor:
    """Return r_k as (H, Lk, d) from (Lk, H, d) or (H, Lk, d)."""
    check_tensor("r_k", r_k, ndim=3, floating=True, shape={2: d})
    lhd, hld = tuple(r_k.shape) == (Lk, H, d), tuple(r_k.shape) == (H, Lk, d)
    if r_layout == "auto":
        if lhd and hld:
            raise ValueError(
                f"r_k layout is ambiguous when key_len == num_heads == {H}: pass r_layout='LHd' or 'HLd'"
            )
        if not (lhd or hld):
            raise ValueError(
                f"r_k must have shape (key_len, num_heads, d) = {(Lk, H, d)} or (num_heads, key_len, d) = "
                f"{(H, Lk, d)}, got {tuple(r_k.shape)}"
            )
        r_layout = "LHd" if lhd else "HLd"
    want = (Lk, H, d) if r_layout == "LHd" else (H, Lk, d)
    if tuple(r_k.shape) != want:
        raise ValueError(f"r_k must have shape {want} for r_layout={r_layout!r}, got {tuple(r_k.shape)}")
    return r_k.transpose(0, 1) if r_layout == "LHd" else r_k  # (H, Lk, d)


def transformer_xl_terms(
    q: torch.Tensor,
    k: torch.Tensor,
    r_k: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    *,
    r_layout: str = "auto",
) -> dict[str, torch.Tensor]:
    """The four unscaled terms (a)-(d), each (B, H, Lq, Lk), already shifted into place.

    Sign convention: ``query_minus_key``: entry (i, j) of (b) and (d) uses the relative
    row for distance (Lk - Lq) + i - j, valid for j <= i + (Lk - Lq) (junk elsewhere,
    removed by ``transformer_xl_causal_mask``). (a) and (c) are valid everywhere.

    q: (B, H, Lq, d), the last Lq positions; k: (B, H, Lk, d) content keys W_kE x_j;
    r_k: the projected relative rows W_kR R for distances Lk-1 .. 0, shaped (Lk, H, d)
    (the paper's layout) or (H, Lk, d) (``r_layout`` says which when Lk == H);
    u, v: (H, d) the global content and position biases.
    """
    check_tensor("q", q, ndim=4, floating=True)
    B, H, Lq, d = q.shape
    check_tensor("k", k, ndim=4, floating=True, dtype=q.dtype, shape={0: B, 1: H, 3: d})
    Lk = k.shape[2]
    if Lq > Lk:
        raise ValueError(f"q must have query_len <= key_len = {Lk} (queries are the last keys), got {Lq}")
    check_choice("r_layout", r_layout, ("auto", "LHd", "HLd"))
    r = _relative_table(r_k, H, Lk, d, r_layout)  # (H, Lk, d)
    check_tensor("r_k", r_k, dtype=q.dtype)
    check_tensor("u", u, ndim=2, floating=True, dtype=q.dtype, shape={0: H, 1: d})
    check_tensor("v", v, ndim=2, floating=True, dtype=q.dtype, shape={0: H, 1: d})
    P, es = Lq * Lk, q.element_size()
    check_memory(16 * P + 5 * B * H * P * es + B * H * Lq * Lk * es, what="transformer_xl_terms",
                 shape=(B, H, Lq, Lk), dtype=q.dtype,
                 alternative="rp.attend with rp.schemes.transformer_xl.position_term (backend 'flex': no [Lq, Lk] tensor)")

    a = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk): q_i . k_j
    c = (u[:, None, :] @ k.transpose(-2, -1)).expand(B, H, Lq, Lk)  # (B, H, Lq, Lk): u . k_j
    dist = relative_offsets(Lq, Lk, convention="query_minus_key", query_offset=Lk - Lq,
                            device=q.device)  # (Lq, Lk) i - j, queries the last Lq keys
    row = (Lk - 1 - dist).clamp_(0, Lk - 1)  # (Lq, Lk) relative row of distance i - j (future keys: junk)
    b = torch.gather(q @ r.transpose(-2, -1), -1, row.expand(B, H, Lq, Lk))  # (B, H, Lq, Lk): q_i . r_{i-j}
    d_term = (v[:, None, :] @ r.transpose(-2, -1))[:, 0][:, row].expand(B, H, Lq, Lk)  # (B, H, Lq, Lk): v . r_{i-j}
    return {"a": a, "b": b, "c": c, "d": d_term}


def position_term(r_k: torch.Tensor, u: torch.Tensor, v: torch.Tensor, *, layout: str | None = None) -> PositionTerm:
    """Transformer-XL's position term for ``rp.attend``: (q_i + u) . k_j + (q_i + v) . r_{i-j}.

    r_k: the projected rows W_kR R for distances D - 1 .. 0 (the paper's order), heads first
    (H, D, d) (``layout="HDd"``) or as ``RelPartialLearnableAttention.project`` returns them,
    (D, H, d) (``layout="DHd"``); the layout is read from u's head count, and must be
    given when D == H (the two would be read alike). u, v: (H, d). Convention
    ``query_minus_key``: pair (i, j) reads the row of distance i - j, which must lie in
    [0, D - 1] for every visible pair (a call reaching further is refused). Decoder
    only: ``rp.attend`` requires ``causal=True`` (keys after the query have no row).
    Scale 1/sqrt(d) on all four terms.
    """
    check_tensor("r_k", r_k, ndim=3, floating=True)
    check_tensor("u", u, ndim=2, floating=True)
    if layout is None:
        if r_k.shape[0] == r_k.shape[1]:
            raise ValueError(f"r_k of shape {tuple(r_k.shape)} is ambiguous (D == H = {r_k.shape[0]}): pass "
                             f"layout='HDd' (heads first) or layout='DHd' (the paper's, distances first)")
        layout = "HDd" if r_k.shape[0] == u.shape[0] else "DHd"
    check_choice("layout", layout, ("HDd", "DHd"))
    if layout == "DHd":
        r_k = r_k.transpose(0, 1)  # (H, D, d)
    H, D, d = r_k.shape
    check_tensor("u", u, ndim=2, floating=True, shape={0: H, 1: d})
    check_tensor("v", v, ndim=2, floating=True, shape={0: H, 1: d})

    def row_of_offsets(off):  # off = j - i = -distance; row D - 1 - distance
        return off.clamp_(-(D - 1), 0).add_(D - 1)

    rows = RowIndex(D, row_of_offsets, f"row {D - 1} - (i - j), distances 0 .. {D - 1}", min_offset=-(D - 1))
    return PositionTerm(scheme="transformer_xl", convention="query_minus_key", content_shift=u,
                        query_vectors=(QueryVectors(r_k, rows, shift=v, name="Transformer-XL (b) + (d)"),),
                        causal_only=True, notes=dict(distances=D))


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """Random r_k for ``options.distances`` distances (0 .. D - 1) and random u, v (registry, benchmark)."""
    D = options.distances or 1
    r_k = example_tensor(num_heads, D, head_dim, device=device, dtype=dtype, generator=generator, scale=0.3)
    u, v = (example_tensor(num_heads, head_dim, device=device, dtype=dtype, generator=generator, scale=0.3)
            for _ in range(2))
    return position_term(r_k, u, v, layout="HDd")


@dataclass
class TransformerXLConfig:
    d_model: int = 64
    num_heads: int = 4
    d_head: int = 16
    mem_len: int = 16

    def __post_init__(self):
        check_positive_int("d_model", self.d_model)
        if self.d_model % 2 != 0:
            raise ValueError(f"d_model must be an even integer (sinusoid halves), got {self.d_model}")
        check_positive_int("num_heads", self.num_heads)
        check_positive_int("d_head", self.d_head)
        check_int("mem_len", self.mem_len, min_value=0)


class RelPartialLearnableAttention(nn.Module):
    """Transformer-XL relative attention (``query_minus_key``), one layer's attention sublayer.

    W_q, W_kE, W_v are one combined projection ``qkv_net`` (as in the paper's code);
    W_kR is the separate ``r_net`` applied to the sinusoid R; ``u`` and ``v`` are the
    global content and position biases, (num_heads, d_head). The residual, layer norm and
    dropout belong to the surrounding block and are left out.

    forward(h (B, L, d_model), mems (B, M, d_model) | None) -> (out (B, L, d_model),
    new_mems (B, min(M + L, mem_len), d_model) or None when mem_len == 0). Query i attends
    to the M cached states and causally within the segment; mems are detached.
    """

    def __init__(self, config: TransformerXLConfig):
        super().__init__()
        self.config = config
        H, dh = config.num_heads, config.d_head
        self.qkv_net = nn.Linear(config.d_model, 3 * H * dh, bias=False)  # W_q, W_kE, W_v
        self.r_net = nn.Linear(config.d_model, H * dh, bias=False)  # W_kR
        self.o_net = nn.Linear(H * dh, config.d_model, bias=False)
        self.u = nn.Parameter(torch.randn(H, dh) * 0.02)  # global content bias (r_w_bias)
        self.v = nn.Parameter(torch.randn(H, dh) * 0.02)  # global position bias (r_r_bias)
        self.scale = 1.0 / math.sqrt(dh)

    def _check(self, h, mems):
        check_tensor("h", h, ndim=3, floating=True, shape={2: self.config.d_model})
        if mems is not None:
            check_tensor("mems", mems, ndim=3, floating=True, dtype=h.dtype,
                         shape={0: h.shape[0], 2: self.config.d_model})

    def project(self, h, mems=None):
        """The layer's projections: (cat (B, Lk, d_model), q (B, H, L, dh), k, v (B, H, Lk, dh),
        r_k (Lk, H, dh) for distances Lk - 1 .. 0), with Lk = M + L keys over [mems; h]."""
        self._check(h, mems)
        B, L, _ = h.shape
        H, dh = self.config.num_heads, self.config.d_head
        cat = h if mems is None else torch.cat([mems.detach(), h], dim=1)  # (B, Lk, d_model), Lk = M + L
        Lk = cat.shape[1]
        q, k, v = self.qkv_net(cat).split(H * dh, dim=-1)  # 3 x (B, Lk, H*dh)
        q = q[:, -L:].reshape(B, L, H, dh).transpose(1, 2)  # (B, H, L, dh), queries are the last L
        k = k.reshape(B, Lk, H, dh).transpose(1, 2)  # (B, H, Lk, dh)
        v = v.reshape(B, Lk, H, dh).transpose(1, 2)  # (B, H, Lk, dh)
        R = sinusoidal_relative_encoding(Lk, self.config.d_model, dtype=h.dtype, device=h.device)  # (Lk, d_model)
        r_k = self.r_net(R).reshape(Lk, H, dh)  # (Lk, H, dh), distances Lk-1 .. 0
        return cat, q, k, v, r_k

    def _logits(self, q, k, r_k):
        t = transformer_xl_terms(q, k, r_k, self.u, self.v, r_layout="LHd")
        logits = (t["a"] + t["b"] + t["c"] + t["d"]) * self.scale  # (B, H, L, Lk)
        visible = transformer_xl_causal_mask(q.shape[2], k.shape[2], device=q.device)  # (L, Lk)
        return logits.masked_fill(~visible, float("-inf"))  # (B, H, L, Lk)

    def terms(self, h: torch.Tensor, mems: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The four unscaled terms for this layer, each (B, H, L, M + L) (``query_minus_key``)."""
        _, q, k, _, r_k = self.project(h, mems)
        return transformer_xl_terms(q, k, r_k, self.u, self.v, r_layout="LHd")

    def attention_logits(self, h: torch.Tensor, mems: torch.Tensor | None = None) -> torch.Tensor:
        """Scaled, masked logits (B, H, L, M + L); hidden keys are -inf (``query_minus_key``)."""
        _, q, k, _, r_k = self.project(h, mems)
        return self._logits(q, k, r_k)

    def forward(self, h: torch.Tensor, mems: torch.Tensor | None = None):
        cat, q, k, v, r_k = self.project(h, mems)
        B, L, _ = h.shape
        probs = torch.softmax(self._logits(q, k, r_k), dim=-1)  # (B, H, L, Lk)
        y = (probs @ v).transpose(1, 2).reshape(B, L, -1)  # (B, L, H*dh)
        out = self.o_net(y)  # (B, L, d_model)
        mem_len = self.config.mem_len
        new_mems = cat[:, -mem_len:].detach() if mem_len > 0 else None  # (B, min(Lk, mem_len), d_model)
        return out, new_mems


def run_segments(
    module: RelPartialLearnableAttention,
    x: torch.Tensor,
    segment_len: int,
    mems: torch.Tensor | None = None,
):
    """Process a long sequence segment by segment, carrying the memory (``query_minus_key``).

    x: (B, T, d_model). Each segment of ``segment_len`` tokens (the last may be shorter)
    attends to the previous ``module.config.mem_len`` states and causally to itself.
    Returns (out (B, T, d_model), final mems).
    """
    if not isinstance(module, RelPartialLearnableAttention):
        raise ValueError(f"module must be a RelPartialLearnableAttention, got {type(module).__name__}")
    check_tensor("x", x, ndim=3, floating=True, shape={2: module.config.d_model})
    segment_len = check_positive_int("segment_len", segment_len)
    outs = []
    for start in range(0, x.shape[1], segment_len):
        out, mems = module(x[:, start:start + segment_len], mems)  # (B, <=segment_len, d_model)
        outs.append(out)
    return torch.cat(outs, dim=1), mems  # (B, T, d_model)


# ----------------------------------------------------------------------------- in a model


@dataclass(frozen=True)
class TransformerXLOptions:
    """``distances`` D: relative rows for distances 0 .. D - 1 (None: the model's max_positions)."""

    distances: int | None = None

    def __post_init__(self):
        if self.distances is not None:
            check_int("distances", self.distances, min_value=1)


class TransformerXLPosition(PositionModule):
    """Per layer: W_kR (``r_net``) projecting the fixed sinusoid R, and the global biases u, v (H, d_head).

    A KV cache keeps the keys and values W_kE x_j and W_v x_j like any other scheme's: neither
    depends on the query or on position. The relative rows W_kR R are built once per
    decoding run (``Transformer.position_terms``), for the D distances the cache can reach.
    """

    def __init__(self, shape, options: TransformerXLOptions):
        super().__init__(shape, options)
        H, dh = shape.num_heads, shape.head_dim
        if shape.d_model % 2:
            raise ValueError(f"d_model must be even for transformer_xl (its sinusoid has sin and cos halves), "
                             f"got {shape.d_model}")
        self.distances = options.distances or shape.max_positions
        self.r_net = nn.ModuleList(nn.Linear(shape.d_model, H * dh, bias=False) for _ in range(shape.num_layers))
        self.u = nn.Parameter(torch.zeros(shape.num_layers, H, dh))  # global content bias per layer
        self.v = nn.Parameter(torch.zeros(shape.num_layers, H, dh))  # global position bias per layer

    def table_elements(self) -> int:
        """Elements of the tables ``term`` builds on each call: R (D, d_model) and W_kR R (D, H d_head),
        counted by the model against the memory budget before it is built."""
        s = self.shape
        return self.distances * (s.d_model + s.num_heads * s.head_dim)

    def term(self, layer, attention):
        s = self.shape
        R = sinusoidal_relative_encoding(self.distances, s.d_model, dtype=self.u.dtype,
                                         device=self.u.device)  # (D, d_model), distances D-1 .. 0
        r_k = self.r_net[layer](R).view(self.distances, s.num_heads, s.head_dim)  # (D, H, dh)
        return position_term(r_k, self.u[layer], self.v[layer], layout="DHd")

    @torch.no_grad()
    def init_parameters(self, generator):
        for lin in self.r_net:
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=generator) / math.sqrt(lin.weight.shape[1]))
        self.u.copy_(torch.randn(self.u.shape, generator=generator) * 0.02)
        self.v.copy_(torch.randn(self.v.shape, generator=generator) * 0.02)


SCHEME = Scheme(
    name="transformer_xl", color="#56b4e9", short="TXL", display="Transformer-XL", paper="Dai et al. 2019", cite="dai2019transformerxl",
    chapter="04_transformer_xl", convention="query_minus_key", formula=r"W_{k,R}\, R_{i - j}",
    code="relpos_core.schemes.transformer_xl.transformer_xl_terms", injects="vector on the logit",
    summary="a projected sinusoid per distance, plus global biases u and v", causal_only=True,
    distance=Distance("distances", "one row per distance up to the sequence length", follows_length=True),
    example=example, options=TransformerXLOptions, module=TransformerXLPosition, order=30,
    lab=Lab(()), roles=("segment memory",),
)
