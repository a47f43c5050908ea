"""DeBERTa: disentangled attention, clip-and-shift / log-bucket positions, and the EMD.

Paper: Pengcheng He, Xiaodong Liu, Jianfeng Gao, Weizhu Chen, "DeBERTa: Decoding-enhanced
BERT with Disentangled Attention" (ICLR 2021). Book: "DeBERTa: content and
position, disentangled" (chapters/05_deberta.ipynb): disentangled attention,
clip-and-shift and log-bucket offsets, the EMD.

Sign convention: ``query_minus_key``. Entry (i, j) of every offset matrix here is i - j,
so a positive offset means the key comes *before* the query.

Here: ``deberta_delta_index`` (the paper's delta(i, j) = clamp(i - j, -k, k - 1) + k in
[0, 2k), eq. 3), ``make_log_bucket_position`` (DeBERTa-v2's log buckets), ``position_term``
(c2p and p2c for ``rp.attend``) and ``enhanced_mask_decode`` (the EMD's steps). The dense
c2p/p2c scores and the Hugging Face-parity modules are oracles (``relpos_core/oracles/deberta.py``).

The p2c index: Algorithm 1 writes ``A_p2c[j, delta(j, i)]``, but the released code
(Hugging Face 5.24, after Microsoft's) reads delta(i, j), the *same* row as c2p (it clamps
``-r + S`` on transposed offsets, then transposes back). ``p2c_index="code"`` (default, as
the checkpoints were trained) reproduces it; ``"paper"`` uses delta(j, i).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor
from relpos_core.offsets import relative_offsets
from relpos_core.schemes.declaration import Distance, Lab, LabRun, PositionModule, Scheme, Variant
from relpos_core.terms import KeyVectors, PositionTerm, QueryVectors, RowIndex, example_tensor

__all__ = ["SIGN_CONVENTION", "deberta_delta_index", "make_log_bucket_position", "position_term",
           "enhanced_mask_decode", "DeBERTaOptions", "DeBERTaPosition", "SCHEME"]

SIGN_CONVENTION = "query_minus_key"


def deberta_delta_index(query_len: int, key_len: int | None = None, *, max_relative_positions: int,
                        query_offset: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """The paper's delta(i, j), the row of the (2k, d) table pair (i, j) reads: (Lq, Lk) int64 in [0, 2k).

    Sign convention ``query_minus_key``: 0 if i - j <= -k, 2k - 1 if i - j >= k, else
    i - j + k (k = ``max_relative_positions``): above k - 1 exactly when the key is at or
    before the query. The queries are the last Lq keys unless ``query_offset`` places them.
    """
    query_len = check_positive_int("query_len", query_len)
    key_len = query_len if key_len is None else check_positive_int("key_len", key_len)
    k = check_positive_int("max_relative_positions", max_relative_positions)
    rel = relative_offsets(query_len, key_len, convention="query_minus_key", query_offset=query_offset,
                           device=device)  # (Lq, Lk) i - j, budget-checked
    return rel.clamp_(-k, k - 1).add_(k)  # (Lq, Lk) in [0, 2k)


def _check_buckets(bucket_size, max_position) -> tuple[int, int]:
    bucket_size = check_int("bucket_size", bucket_size)
    max_position = check_int("max_position", max_position)
    if (bucket_size > 0) != (max_position > 0):
        raise ValueError(
            "bucket_size and max_position must both be > 0 (log buckets) or both <= 0 (no buckets), "
            f"got bucket_size={bucket_size}, max_position={max_position}"
        )
    if bucket_size > 0:
        check_int("bucket_size", bucket_size, min_value=2)
        check_int("max_position", max_position, min_value=bucket_size // 2 + 2)
    return bucket_size, max_position


def make_log_bucket_position(relative_pos: torch.Tensor, bucket_size: int, max_position: int) -> torch.Tensor:
    """DeBERTa-v2 log buckets of signed offsets (any convention; the map is odd).

    With mid = bucket_size // 2 (>= 1), |r| <= mid is kept; larger r becomes sign(r) * (mid +
    ceil(log(|r| / mid) / log((max_position - 1) / mid) * (mid - 1))), so |r| = max_position - 1
    lands on 2 mid - 1 (max_position >= mid + 2). HF's values, in the input's integer dtype.
    """
    check_tensor("relative_pos", relative_pos, floating=False)
    bucket_size, max_position = _check_buckets(bucket_size, max_position)
    if bucket_size <= 0:
        raise ValueError(f"bucket_size must be an integer >= 2 here, got {bucket_size}")
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    inside = (relative_pos < mid) & (relative_pos > -mid)
    abs_pos = torch.where(inside, torch.full_like(relative_pos, mid - 1), relative_pos.abs())
    # float32 arithmetic in the same order as the reference code, so ceil() rounds alike
    scale = torch.log(torch.tensor((max_position - 1) / mid))  # () float32
    log_pos = torch.ceil(torch.log(abs_pos / mid) / scale * (mid - 1)) + mid  # float32
    bucket = torch.where(abs_pos <= mid, relative_pos.to(log_pos.dtype), log_pos * sign)
    return bucket.to(relative_pos.dtype)


def position_term(pos_key: torch.Tensor | None = None, pos_query: torch.Tensor | None = None, *, att_span: int,
                  position_buckets: int = -1, max_relative_positions: int = -1, p2c_index: str = "code",
                  pos_layout: str = "hsd") -> PositionTerm:
    """DeBERTa's position term for ``rp.attend``: c2p (``q_i . K_r[row]``) and p2c (``k_j . Q_r[row]``).

    pos_key = K_r and pos_query = Q_r: projected tables (H, 2S, d) with S = att_span
    (``pos_layout="shd"``: rows first, (2S, H, d), as a projection of the shared table gives
    them); either may be None. Convention ``query_minus_key``: the row is clamp(r + S, 0,
    2S - 1) with r = i - j, log-bucketed when position_buckets > 0 (DeBERTa-v2). p2c reads
    c2p's row (``p2c_index="code"``) or delta(j, i) (``"paper"``). Scale 1/sqrt(d (1 + number
    of position terms)): 1/sqrt(3d) with both, as in the paper.
    """
    S = check_positive_int("att_span", att_span)
    check_choice("p2c_index", p2c_index, ("code", "paper"))
    check_choice("pos_layout", pos_layout, ("hsd", "shd"))
    if pos_layout == "shd":
        pos_key = None if pos_key is None else check_tensor("pos_key", pos_key, ndim=3).transpose(0, 1)
        pos_query = None if pos_query is None else check_tensor("pos_query", pos_query, ndim=3).transpose(0, 1)
    buckets = check_int("position_buckets", position_buckets) > 0
    if buckets:
        _check_buckets(position_buckets, max_relative_positions)
    if pos_key is None and pos_query is None:
        raise ValueError("pos_key and pos_query must not both be None: pass K_r (c2p), Q_r (p2c) or both")
    tables = [(name, t) for name, t in (("pos_key", pos_key), ("pos_query", pos_query)) if t is not None]
    d = check_tensor(*tables[0], ndim=3, floating=True).shape[2]
    for name, t in tables:  # (H, 2S, d), one head size
        if check_tensor(name, t, ndim=3, floating=True, shape={2: d}).shape[1] != 2 * S:
            raise ValueError(f"{name} must be (H, 2 * att_span = {2 * S}, d), got shape {tuple(t.shape)}")

    def bucketed(r):  # r = i - j, in place where possible
        return make_log_bucket_position(r, position_buckets, max_relative_positions) if buckets else r

    def c2p_rows(off):  # off = j - i
        return bucketed(off.neg_()).add_(S).clamp_(0, 2 * S - 1)

    def paper_p2c_rows(off):  # delta(j, i): r = j - i
        return bucketed(off).add_(S).clamp_(0, 2 * S - 1)

    what = f"clamp({'bucket(i - j)' if buckets else 'i - j'} + {S}, 0, {2 * S - 1})"
    work = (lambda n: 48 * n) if buckets else (lambda n: 0)  # make_log_bucket_position's float32 steps
    c2p = RowIndex(2 * S, c2p_rows, what, work_bytes=work)
    p2c = c2p if p2c_index == "code" else RowIndex(2 * S, paper_p2c_rows, what.replace("i - j", "j - i"),
                                                   work_bytes=work)
    n_terms = (pos_key is not None) + (pos_query is not None)
    return PositionTerm(
        scheme="deberta", convention="query_minus_key", scale=1.0 / math.sqrt(d * (1 + n_terms)),
        query_vectors=(QueryVectors(pos_key, c2p, name="DeBERTa c2p"),) if pos_key is not None else (),
        key_vectors=(KeyVectors(pos_query, p2c, name="DeBERTa p2c"),) if pos_query is not None else (),
        notes=dict(att_span=S, position_buckets=position_buckets, p2c_index=p2c_index))


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """Random c2p + p2c tables (H, 2S, head_dim) with the options' span and buckets."""
    S = options.att_span

    def table():
        return example_tensor(num_heads, 2 * S, head_dim, device=device, dtype=dtype, generator=generator, scale=0.3)

    return position_term(table(), table(), att_span=S, position_buckets=options.position_buckets,
                         max_relative_positions=options.max_relative_positions, p2c_index=options.p2c_index)


def enhanced_mask_decode(hidden: torch.Tensor, absolute: torch.Tensor, run_last, num_steps: int = 2) -> torch.Tensor:
    """Enhanced Mask Decoder (paper section 3.2): absolute positions, added late.

    For masked-language-model pre-training only, the EMD puts absolute positions back just
    before the MLM head. With H = ``hidden`` (B, L, D), the *second-to-last* layer's output,
    and P = ``absolute`` (L, D) or (B, L, D), it re-runs the last layer (replacing the final
    pass) with H as keys and values and queries that carry P:
        I_0 = H + P;  I_{t+1} = run_last(H, I_t)
    and returns I_n (B, L, D) (n = ``num_steps``; the paper's n = 2).
    """
    num_steps = check_positive_int("num_steps", num_steps)
    query = hidden + absolute  # I_0 = H + P, (B, L, D)
    for _ in range(num_steps):
        query = run_last(hidden, query)  # (B, L, D)
    return query



@dataclass(frozen=True)
class DeBERTaOptions:
    """``att_span`` S (2S rows: offsets clipped to [-S, S - 1]); ``position_buckets`` and
    ``max_relative_positions`` > 0: DeBERTa-v2's log buckets; ``p2c_index``: "code" or "paper";
    ``emd``: the Enhanced Mask Decoder (``enhanced_mask_decode``)."""

    att_span: int = 16
    position_buckets: int = -1
    max_relative_positions: int = -1
    p2c_index: str = "code"
    emd: bool = False

    def __post_init__(self):
        check_positive_int("att_span", self.att_span)
        check_choice("p2c_index", self.p2c_index, ("code", "paper"))
        check_choice("emd", self.emd, (False, True))
        if check_int("position_buckets", self.position_buckets) > 0:
            _check_buckets(self.position_buckets, self.max_relative_positions)
            if self.position_buckets != self.att_span:
                raise ValueError(f"att_span must equal position_buckets ({self.position_buckets}) when log buckets "
                                 f"are on (the table has 2 x position_buckets rows), got {self.att_span}")


class DeBERTaPosition(PositionModule):
    """One relative table (2S, d_model) with its LayerNorm, shared by every layer; each layer projects it
    with its own key and query projections (``share_att_key``, DeBERTa-v2). With ``emd``, a learned
    absolute table (max_positions, d_model) for the Enhanced Mask Decoder."""

    def __init__(self, shape, options: DeBERTaOptions):
        super().__init__(shape, options)
        self.rel_embeddings = nn.Parameter(torch.zeros(2 * options.att_span, shape.d_model))  # (2S, D)
        self.norm = nn.LayerNorm(shape.d_model)
        if options.emd:
            self.absolute = nn.Parameter(torch.zeros(shape.max_positions, shape.d_model))  # (N, D)

    def _heads(self, x):  # (2S, H d) -> (H, 2S, d)
        return x.view(x.shape[0], self.shape.num_heads, self.shape.head_dim).transpose(0, 1)

    def term(self, layer, attention):
        o = self.options
        rel = self.norm(self.rel_embeddings)  # (2S, D)
        return position_term(self._heads(attention.wk(rel)), self._heads(attention.wq(rel)), att_span=o.att_span,
                             position_buckets=o.position_buckets, max_relative_positions=o.max_relative_positions,
                             p2c_index=o.p2c_index)

    def run_blocks(self, blocks, h, run):
        if not self.options.emd:
            return super().run_blocks(blocks, h, run)
        for block in blocks[:-1]:
            h = run(block, h)  # H: the second-to-last layer's output (keys and values of the EMD)
        absolute = self.absolute[:h.shape[1]].to(h.dtype)  # P, (L, D)
        return enhanced_mask_decode(h, absolute, lambda keys, query: run(blocks[-1], keys, query=query))

    @torch.no_grad()
    def init_parameters(self, generator):
        self.rel_embeddings.copy_(torch.randn(self.rel_embeddings.shape, generator=generator) * 0.02)
        self.norm.reset_parameters()
        if self.options.emd:
            self.absolute.copy_(torch.randn(self.absolute.shape, generator=generator) * 0.02)


SCHEME = Scheme(
    name="deberta", color="#ee3377", display="DeBERTa", paper="He et al. 2021", cite="he2021deberta", chapter="05_deberta",
    convention="query_minus_key", formula=r"\delta(i, j) = \operatorname{clip}(i - j, -k, k - 1) + k",
    code="relpos_core.schemes.deberta.deberta_delta_index", injects="vector on the logit",
    summary="content-to-position and position-to-content terms from one shared table",
    distance=Distance("att_span", "offsets beyond the span share the end rows", small=4, medium=64, large=256),
    not_decoded=("an encoder: pre-trained bidirectionally by masked language modelling, every token attending "
                 "to keys on both sides; the paper has no causal form to decode with"),
    example=example, options=DeBERTaOptions, module=DeBERTaPosition, order=50,
    benchmark_module="relpos_core.oracles.deberta.benchmark_module",
    variants=(Variant("deberta_emd", "DeBERTa + EMD", dict(emd=True),
                      "DeBERTa with the Enhanced Mask Decoder's absolute positions at the output", model_only=True,
                      short="DeBERTa+EMD", color="#992255", language_tasks=False,
                      lab=Lab((), runs=(LabRun("emd", "position", tiny=True),))),),
    lab=Lab(("marker", "retrieval"), book=True, runs=(LabRun("emd", "position"),)),
    roles=("relative table",),
)
