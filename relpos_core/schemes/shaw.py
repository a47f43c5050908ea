"""Shaw et al.: learned relative vectors on keys and values.

Paper: Peter Shaw, Jakob Uszkoreit, Ashish Vaswani, "Self-Attention with Relative
Position Representations", NAACL 2018. Book: "Shaw et al. and the
Music Transformer's skew" (chapters/02_shaw_and_skew.ipynb).

Sign convention: ``key_minus_query``. The offset of key j seen from query i is r = j - i,
clipped to [-k, k] with k = ``max_relative_position``; table row ``r + k`` holds its
vector, so row 0 is "k or more positions *before* the query" and row 2k is "k or more
positions *after*". Two tables of shape (2k + 1, d_head), shared by the heads of a layer:

    e_ij = q_i . (k_j + a^K_ij) / sqrt(d)          a^K_ij = rel_key[clip(j - i, -k, k) + k]
    z_i  = sum_j softmax_j(e_ij) (v_j + a^V_ij)     a^V_ij = rel_value[clip(j - i, -k, k) + k]

``shaw_attention`` is the scheme's reference form: it gathers the tables into
(Lq, Lk, d) tensors, which is exactly the paper's equations and fine for small L. The
memory-light paths (gather Q . A^T into (Lq, 2k + 1), then index) live in
``relpos_core/kernels``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor
from relpos_core.budget import check_memory
from relpos_core.offsets import relative_offsets
from relpos_core.schemes.declaration import Distance, Lab, LabRun, PositionModule, Scheme, Variant
from relpos_core.terms import PositionTerm, QueryVectors, ValueVectors, clipped_rows, example_tensor

__all__ = [
    "ShawConfig",
    "ShawSelfAttention",
    "shaw_attention",
    "shaw_relative_index",
    "shaw_relative_logits",
    "position_term",
    "ShawOptions",
    "ShawPosition",
    "SCHEME",
]


def shaw_relative_index(
    query_len: int,
    key_len: int | None = None,
    *,
    max_relative_position: int,
    query_offset: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Table row for every (query, key) pair: clip(j - i, -k, k) + k, in [0, 2k].

    Sign convention: ``key_minus_query`` (j - i). Key j sits at position j and the queries
    are the last ``query_len`` keys (``relpos_core.positions``), unless ``query_offset``
    puts query i at ``query_offset + i``. Returns a (query_len, key_len) int64 tensor.
    """
    query_len = check_positive_int("query_len", query_len)
    key_len = query_len if key_len is None else check_positive_int("key_len", key_len)
    k = check_positive_int("max_relative_position", max_relative_position)
    rel = relative_offsets(query_len, key_len, convention="key_minus_query",
                           query_offset=query_offset, device=device)  # (Lq, Lk), j - i
    return rel.clamp_(-k, k).add_(k)  # (Lq, Lk) in [0, 2k], in place: one int64 [Lq, Lk] tensor


def _check_table(name: str, table, k: int, head_dim: int, dtype: torch.dtype) -> torch.Tensor:
    check_tensor(name, table, ndim=2, floating=True, dtype=dtype)
    if table.shape[0] != 2 * k + 1:
        raise ValueError(
            f"{name} must have 2 * max_relative_position + 1 = {2 * k + 1} rows "
            f"(one per clipped offset in [-{k}, {k}]), got shape {tuple(table.shape)}"
        )
    check_tensor(name, table, shape={1: head_dim})
    return table


def shaw_relative_logits(
    q: torch.Tensor,
    rel_key: torch.Tensor,
    *,
    max_relative_position: int,
    key_len: int | None = None,
    query_offset: int | None = None,
) -> torch.Tensor:
    """The unscaled position term q_i . rel_key[clip(j - i, -k, k) + k].

    Sign convention: ``key_minus_query`` (j - i). ``q`` is (..., Lq, d), ``rel_key`` is
    (2k + 1, d); returns (..., Lq, Lk) with Lk = ``key_len`` (default Lq), the queries the
    last Lq keys unless ``query_offset`` places them. Written as the paper's sum over d
    with the table gathered to (Lq, Lk, d), so it is guarded against the memory budget.
    """
    check_tensor("q", q, ndim=tuple(range(2, 9)), floating=True)
    k = check_positive_int("max_relative_position", max_relative_position)
    Lq, d = q.shape[-2], q.shape[-1]
    key_len = Lq if key_len is None else check_positive_int("key_len", key_len)
    _check_table("rel_key", rel_key, k, d, q.dtype)
    lead = math.prod(q.shape[:-2])
    check_memory(Lq * key_len * (8 + d * q.element_size() + lead * q.element_size()), what="shaw_relative_logits",
                 shape=(Lq, key_len, d), dtype=q.dtype,
                 alternative="rp.attend with rp.schemes.shaw.position_term and form='gather' (no [Lq, Lk, d] tensor)")
    idx = shaw_relative_index(Lq, key_len, max_relative_position=k,
                              query_offset=query_offset, device=q.device)  # (Lq, Lk)
    a_k = rel_key[idx]  # (Lq, Lk, d)
    return torch.einsum("...id,ijd->...ij", q, a_k)  # (..., Lq, Lk)


def shaw_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    rel_key: torch.Tensor | None = None,
    rel_value: torch.Tensor | None = None,
    max_relative_position: int,
    causal: bool = False,
    query_offset: int | None = None,
) -> torch.Tensor:
    """Shaw relative attention, the paper's equations (reference form).

    Sign convention: ``key_minus_query``: the pair (i, j) uses table row
    clip(j - i, -k, k) + k, so a key *before* the query uses a row below k.

    q: (B, H, Lq, d); k, v: (B, H, Lk, d); rel_key, rel_value: (2k + 1, d) shared by all
    heads, either may be None (key term only, value term only, both, or neither).
    The queries are the last Lq keys unless ``query_offset`` puts query i at
    ``query_offset + i``; with ``causal=True`` key j is masked when it comes after the
    query. Returns (B, H, Lq, d). Every (Lq, Lk) and (Lq, Lk, d) tensor it builds is
    counted against the memory budget first.
    """
    check_tensor("q", q, ndim=4, floating=True)
    B, H, Lq, d = q.shape
    check_tensor("k", k, ndim=4, floating=True, dtype=q.dtype, shape={0: B, 1: H, 3: d})
    Lk = k.shape[2]
    check_tensor("v", v, ndim=4, floating=True, dtype=q.dtype, shape={0: B, 1: H, 2: Lk, 3: d})
    kmax = check_positive_int("max_relative_position", max_relative_position)
    check_choice("causal", causal, (False, True))
    if query_offset is not None:
        query_offset = check_int("query_offset", query_offset)
    if rel_key is not None:
        _check_table("rel_key", rel_key, kmax, d, q.dtype)
    if rel_value is not None:
        _check_table("rel_value", rel_value, kmax, d, q.dtype)
    es, P = q.element_size(), Lq * Lk
    tables = (rel_key is not None) + (rel_value is not None)
    check_memory(P * (8 + 8 * causal) + tables * P * d * es + 3 * B * H * P * es, what="shaw_attention",
                 shape=(Lq, Lk, d), dtype=q.dtype,
                 alternative="rp.attend with rp.schemes.shaw.position_term and form='gather'")

    idx = shaw_relative_index(Lq, Lk, max_relative_position=kmax,
                              query_offset=query_offset, device=q.device)  # (Lq, Lk)
    logits = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk), content term q_i . k_j
    if rel_key is not None:
        a_k = rel_key[idx]  # (Lq, Lk, d)
        logits = logits + torch.einsum("bhid,ijd->bhij", q, a_k)  # (B, H, Lq, Lk)
    logits = logits / math.sqrt(d)
    if causal:
        rel = relative_offsets(Lq, Lk, query_offset=query_offset, device=q.device)  # (Lq, Lk), j - i
        logits = logits.masked_fill(rel > 0, float("-inf"))  # future keys out
    probs = torch.softmax(logits, dim=-1)  # (B, H, Lq, Lk)
    if causal:  # a query before every key sees none: weight 0, output 0 (not NaN), as rp.attend
        probs = probs.masked_fill(torch.isneginf(logits).all(-1, keepdim=True), 0.0)
    out = probs @ v  # (B, H, Lq, d)
    if rel_value is not None:
        a_v = rel_value[idx]  # (Lq, Lk, d)
        out = out + torch.einsum("bhij,ijd->bhid", probs, a_v)  # (B, H, Lq, d)
    return out


def position_term(*, rel_key: torch.Tensor | None = None, rel_value: torch.Tensor | None = None,
                  max_relative_position: int) -> PositionTerm:
    """Shaw's position term for ``rp.attend``: a^K on the logits, a^V on the output.

    rel_key, rel_value: (2k + 1, d) tables shared by all heads (either may be None);
    row clip(j - i, -k, k) + k (``key_minus_query``). The key term is scaled with the
    content score (1/sqrt(d)). The value term changes the output, not the logits, so only
    the eager backend can apply it (``relpos_core.registry`` says which paths support what).
    """
    k = check_positive_int("max_relative_position", max_relative_position)
    if rel_key is None and rel_value is None:
        raise ValueError("rel_key and rel_value must not both be None: pass at least one (2k + 1, d) table")
    for name, t in (("rel_key", rel_key), ("rel_value", rel_value)):
        if t is not None:
            check_tensor(name, t, ndim=2, floating=True)
            _check_table(name, t, k, t.shape[1], t.dtype)
    rows = clipped_rows(k)
    key = (QueryVectors(rel_key, rows, name="Shaw a^K"),) if rel_key is not None else ()
    value = ValueVectors(rel_value, rows, name="Shaw a^V") if rel_value is not None else None
    return PositionTerm(scheme="shaw" if value is not None else "shaw_key", convention="key_minus_query",
                        query_vectors=key, value=value, notes=dict(max_relative_position=k))


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """Random Shaw tables (2k + 1, head_dim): the key term and, with ``options.value``, the value term."""
    k = options.max_relative_position

    def table():
        return example_tensor(2 * k + 1, head_dim, device=device, dtype=dtype, generator=generator, scale=0.3)

    return position_term(rel_key=table(), rel_value=table() if options.value else None, max_relative_position=k)


@dataclass
class ShawConfig:
    d_model: int = 64
    num_heads: int = 4
    max_relative_position: int = 16
    use_key: bool = True
    use_value: bool = True
    causal: bool = False

    def __post_init__(self):
        check_positive_int("d_model", self.d_model)
        check_positive_int("num_heads", self.num_heads)
        check_positive_int("max_relative_position", self.max_relative_position)
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={self.d_model}, num_heads={self.num_heads}"
            )
        check_choice("use_key", self.use_key, (False, True))
        check_choice("use_value", self.use_value, (False, True))
        check_choice("causal", self.causal, (False, True))


class ShawSelfAttention(nn.Module):
    """Multi-head self-attention with Shaw's key and value tables (``key_minus_query``).

    forward(x (B, L, d_model)) -> (B, L, d_model). The tables (2k + 1, d_head) are
    shared across heads, as in the paper; a disabled table is ``None``.
    """

    def __init__(self, config: ShawConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_heads
        self.head_dim = config.d_model // config.num_heads
        self.q_proj = nn.Linear(config.d_model, config.d_model)
        self.k_proj = nn.Linear(config.d_model, config.d_model)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
        self.o_proj = nn.Linear(config.d_model, config.d_model)
        rows = 2 * config.max_relative_position + 1
        self.rel_key = nn.Parameter(torch.randn(rows, self.head_dim) * 0.02) if config.use_key else None
        self.rel_value = nn.Parameter(torch.randn(rows, self.head_dim) * 0.02) if config.use_value else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, ndim=3, floating=True, shape={2: self.config.d_model})
        B, L, _ = x.shape
        H, hd = self.num_heads, self.head_dim
        q = self.q_proj(x).view(B, L, H, hd).transpose(1, 2)  # (B, H, L, hd)
        k = self.k_proj(x).view(B, L, H, hd).transpose(1, 2)  # (B, H, L, hd)
        v = self.v_proj(x).view(B, L, H, hd).transpose(1, 2)  # (B, H, L, hd)
        y = shaw_attention(q, k, v, rel_key=self.rel_key, rel_value=self.rel_value,
                           max_relative_position=self.config.max_relative_position,
                           causal=self.config.causal)  # (B, H, L, hd)
        y = y.transpose(1, 2).reshape(B, L, H * hd)  # (B, L, d_model)
        return self.o_proj(y)  # (B, L, d_model)


# ----------------------------------------------------------------------------- in a model


@dataclass(frozen=True)
class ShawOptions:
    """``max_relative_position`` k (offsets beyond it share the end rows), ``value`` (the a^V table too),
    ``init``: "random" (N(0, 0.02)) or "sinusoidal" (the sinusoid of positions 0 .. 2k, same row norm)."""

    max_relative_position: int = 8
    value: bool = True
    init: str = "random"

    def __post_init__(self):
        check_positive_int("max_relative_position", self.max_relative_position)
        check_choice("value", self.value, (False, True))
        check_choice("init", self.init, ("random", "sinusoidal"))


class ShawPosition(PositionModule):
    """Per layer, a^K (and a^V) tables (2k + 1, d_head) shared by the layer's heads, as in the paper."""

    def __init__(self, shape, options: ShawOptions):
        super().__init__(shape, options)
        rows = 2 * options.max_relative_position + 1
        self.rel_key = nn.ParameterList(nn.Parameter(torch.zeros(rows, shape.head_dim))
                                        for _ in range(shape.num_layers))
        self.rel_value = nn.ParameterList(nn.Parameter(torch.zeros(rows, shape.head_dim))
                                          for _ in range(shape.num_layers) if options.value)

    def term(self, layer, attention):
        return position_term(rel_key=self.rel_key[layer], rel_value=self.rel_value[layer] if self.options.value
                             else None, max_relative_position=self.options.max_relative_position)

    def recorded_tables(self) -> dict:
        """Layer 0's key table (2k + 1, d), rounded to 5 decimals, rows for offsets -k .. k."""
        table = self.rel_key[0].detach()  # (2k + 1, d)
        return {"rel_key": [[round(v, 5) for v in row] for row in table.tolist()],
                "k": self.options.max_relative_position}

    @torch.no_grad()
    def init_parameters(self, generator):
        if self.options.init == "random":
            return super().init_parameters(generator)
        from relpos_core.schemes.absolute import sinusoidal_position_embeddings

        rows, d = 2 * self.options.max_relative_position + 1, self.shape.head_dim
        table = sinusoidal_position_embeddings(rows, d) * (0.02 * math.sqrt(2.0))  # row norm 0.02 sqrt(d)
        for p in list(self.rel_key) + list(self.rel_value):
            p.copy_(table)


SCHEME = Scheme(
    name="shaw", color="#d55e00", short="Shaw", display="Shaw (key + value)", paper="Shaw et al. 2018", cite="shaw2018self",
    chapter="02_shaw_and_skew", convention="key_minus_query",
    formula=r"a^K[\operatorname{clip}(j - i, -k, k) + k]", code="relpos_core.schemes.shaw.shaw_relative_index",
    injects="vector on the logit", summary="learned vectors per clipped offset, on keys and values",
    distance=Distance("max_relative_position", "offsets beyond k share the end rows", small=4, medium=16, large=64,
                      label="clip k = {max_relative_position}"),
    example=example, options=ShawOptions, module=ShawPosition, order=20,
    variants=(Variant("shaw_key", "Shaw (key only)", dict(value=False),
                      "learned vectors per clipped offset, on the keys only", short="Shaw key", color="#dd8855",
                      lab=Lab(("marker", "retrieval_gap"), experiments=("shaw_value",))),),
    # the experiments: clipping (one layer against two on the marker task), the value table
    # (with and without a^V), the band (the learned table from a random and a smooth start)
    lab=Lab(("marker", "retrieval_gap"), book=True, tiny=("marker",), experiments=("shaw_value",),
            runs=(LabRun("clipping", "marker"),
                  LabRun("clipping", "marker", "1layer", model=dict(num_layers=1), tiny=True),
                  LabRun("band", "marker", "k16", dict(max_relative_position=16), keep_tables=True, full=False,
                         tiny=True),
                  LabRun("band", "marker", "k16-sinusoidal", dict(max_relative_position=16, init="sinusoidal"),
                         keep_tables=True, full=False, tiny=True))),
)
