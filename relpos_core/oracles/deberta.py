"""Hugging Face-parity DeBERTa modules: test oracles and the chapter's reference layers.

Book: "DeBERTa: content and position, disentangled" (chapters/05_deberta.ipynb: one
layer rebuilt from ``deberta_c2p_p2c``, the EMD drawn from ``EnhancedMaskDecoder``) and
the benchmark (``benchmark_module``, chapters/11_what_it_costs.ipynb).

The scheme itself (delta(i, j), the log buckets, its position term, its declaration) is
``relpos_core/schemes/deberta.py``; this file holds what is built *around* it to check it
against Hugging Face transformers:

* ``build_relative_position``: DeBERTa-v2's offset matrix, log-bucketed or not;
* ``deberta_c2p_p2c`` / ``deberta_c2p_p2c_tables``: the content-to-position and
  position-to-content terms computed densely, as [L, 2S] tables then gathered;
* ``DisentangledSelfAttention``, ``DisentangledLayer``, ``RelativeEmbeddings``,
  ``EnhancedMaskDecoder``: modules whose parameter names match Hugging Face's
  DeBERTa-v2, so weights can be copied across with ``load_state_dict``. The EMD's steps
  are the scheme's ``enhanced_mask_decode`` (the one the lab's models run).

Sign convention: ``query_minus_key`` (i - j), as in the scheme file, whose docstring
also says how the p2c index of the released code differs from the paper's.

**Query length != key length.** HF's p2c path rebuilds the offsets as (Lk, Lk)
(``build_rpos(key_layer, key_layer, ...)``, with ``position_buckets`` and
``max_relative_positions`` passed in swapped order) and gathers a (Lk, Lk) score, so
adding it to the (Lq, Lk) content score fails when Lq != Lk (RuntimeError in 5.24).
We do not copy that: here every term uses the (Lq, Lk) offsets i - j with key j at
position j and the queries the last Lq keys, the library's one rule
(``relpos_core.positions``; pass ``relative_pos`` to place them otherwise). When
Lq == Lk, as in every released model, the two agree.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor
from relpos_core.budget import check_memory
from relpos_core.offsets import relative_offsets
from relpos_core.schemes.declaration import BenchmarkModule
from relpos_core.schemes.deberta import _check_buckets, enhanced_mask_decode, make_log_bucket_position, position_term

__all__ = ["build_relative_position", "deberta_c2p_p2c_tables", "deberta_c2p_p2c", "DisentangledConfig",
           "RelativeEmbeddings", "DisentangledSelfAttention", "DisentangledLayer", "EnhancedMaskDecoder",
           "benchmark_module"]

POS_ATT_TYPES = ("c2p", "p2c")


def build_relative_position(
    query_len: int,
    key_len: int | None = None,
    *,
    bucket_size: int = -1,
    max_position: int = -1,
    query_offset: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Offsets i - j (``query_minus_key``), log-bucketed when bucket_size, max_position > 0.

    The queries are the last ``query_len`` keys unless ``query_offset`` places them (HF's
    function puts them at 0 .. Lq - 1: pass ``query_offset=0`` for that; the two agree
    when Lq == Lk). Returns (query_len, key_len) int64 (HF adds a leading 1).
    """
    query_len = check_positive_int("query_len", query_len)
    key_len = query_len if key_len is None else check_positive_int("key_len", key_len)
    bucket_size, max_position = _check_buckets(bucket_size, max_position)
    if bucket_size > 0:  # make_log_bucket_position's float32 steps: about 40 bytes per pair on top
        check_memory(48 * query_len * key_len, what="build_relative_position", shape=(query_len, key_len),
                     dtype=torch.int64)
    rel = relative_offsets(query_len, key_len, convention="query_minus_key", query_offset=query_offset,
                           device=device)  # (Lq, Lk) i - j
    if bucket_size > 0:
        rel = make_log_bucket_position(rel, bucket_size, max_position)  # (Lq, Lk)
    return rel


def _heads_first(name: str, pos: torch.Tensor, num_heads: int, head_dim: int, layout: str | None) -> torch.Tensor:
    """Return a (H, 2S, d) view of a (2S, H, d) or (H, 2S, d) table."""
    check_tensor(name, pos, ndim=3, floating=True, shape={-1: head_dim})
    if layout is None:
        a, b = pos.shape[0] == num_heads, pos.shape[1] == num_heads
        if a and b:
            raise ValueError(
                f"pos_layout must be given ('shd' or 'hsd'): {name} has shape {tuple(pos.shape)}, ambiguous"
            )
        if not (a or b):
            raise ValueError(f"{name} must have shape (2S, H={num_heads}, d) or (H, 2S, d), got {tuple(pos.shape)}")
        layout = "hsd" if a else "shd"
    dim = 0 if layout == "hsd" else 1
    if pos.shape[dim] != num_heads or pos.shape[1 - dim] % 2:
        want = "(H, 2S, d)" if dim == 0 else "(2S, H, d)"
        raise ValueError(f"{name} must have shape {want} with H={num_heads}, got {tuple(pos.shape)}")
    return pos if layout == "hsd" else pos.transpose(0, 1)  # (H, 2S, d)


def deberta_c2p_p2c_tables(
    q: torch.Tensor, k: torch.Tensor, pos_key: torch.Tensor, pos_query: torch.Tensor, *, pos_layout: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The dense [L, 2S] score tables c2p_table = q @ K_r^T and p2c_table = k @ Q_r^T.

    q (B, H, Lq, d), k (B, H, Lk, d); pos_key = K_r and pos_query = Q_r, each (2S, H, d)
    or (H, 2S, d) (``pos_layout`` "shd" / "hsd", inferred unless 2S == H).
    Returns c2p_table (B, H, Lq, 2S) and p2c_table (B, H, Lk, 2S). Row r of the relative
    table holds offset r - S in the ``query_minus_key`` convention (i - j), so for the
    index idx[i, j] = clamp(rel[i, j] + S, 0, 2S - 1):
    c2p[b, h, i, j] = c2p_table[b, h, i, idx[i, j]] and (HF / "code")
    p2c[b, h, i, j] = p2c_table[b, h, j, idx[i, j]]. Unscaled.
    """
    check_tensor("q", q, ndim=4, floating=True)
    B, H, Lq, d = q.shape
    check_tensor("k", k, ndim=4, floating=True, shape={0: B, 1: H, 3: d})
    if pos_layout is not None:
        check_choice("pos_layout", pos_layout, ("shd", "hsd"))
    pos_key = _heads_first("pos_key", pos_key, H, d, pos_layout)  # (H, 2S, d)
    pos_query = _heads_first("pos_query", pos_query, H, d, pos_layout)  # (H, 2S, d)
    if pos_key.shape != pos_query.shape:
        raise ValueError(
            f"pos_key and pos_query must have the same shape, got {tuple(pos_key.shape)} and {tuple(pos_query.shape)}"
        )
    c2p_table = q @ pos_key.transpose(-1, -2)  # (B, H, Lq, 2S)
    p2c_table = k @ pos_query.transpose(-1, -2)  # (B, H, Lk, 2S)
    return c2p_table, p2c_table


def deberta_c2p_p2c(
    q: torch.Tensor,
    k: torch.Tensor,
    pos_key: torch.Tensor,
    pos_query: torch.Tensor,
    relative_pos: torch.Tensor,
    att_span: int,
    *,
    p2c_index: str = "code",
    pos_layout: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unscaled content-to-position and position-to-content scores.

    Sign convention ``query_minus_key``: relative_pos (Lq, Lk) integer holds i - j
    (possibly log-bucketed). With S = att_span and idx = clamp(rel + S, 0, 2S - 1):
      c2p[b, h, i, j] = q[b, h, i] . K_r[idx[i, j], h]
      p2c[b, h, i, j] = k[b, h, j] . Q_r[idx[i, j], h]          (p2c_index="code", HF)
      p2c[b, h, i, j] = k[b, h, j] . Q_r[clamp(-rel[i, j] + S)]  (p2c_index="paper")
    q (B, H, Lq, d), k (B, H, Lk, d), pos_key/pos_query (2S, H, d) or (H, 2S, d).
    Returns (c2p, p2c), each (B, H, Lq, Lk).
    """
    check_tensor("q", q, ndim=4, floating=True)
    att_span = check_positive_int("att_span", att_span)
    check_choice("p2c_index", p2c_index, ("code", "paper"))
    check_tensor("relative_pos", relative_pos, ndim=2, floating=False, shape={0: q.shape[2]})
    check_tensor("k", k, ndim=4, floating=True, shape={2: relative_pos.shape[1]})
    check_tensor("pos_key", pos_key, ndim=3)
    if 2 * att_span not in pos_key.shape[:2]:
        raise ValueError(f"pos_key must have 2 * att_span = {2 * att_span} rows, got shape {tuple(pos_key.shape)}")
    c2p_table, p2c_table = deberta_c2p_p2c_tables(q, k, pos_key, pos_query, pos_layout=pos_layout)
    if c2p_table.shape[-1] != 2 * att_span:
        raise ValueError(f"pos_key must have 2 * att_span = {2 * att_span} rows, got {c2p_table.shape[-1]}")
    B, H, Lq, _ = c2p_table.shape
    Lk = p2c_table.shape[2]
    check_memory(Lq * Lk * (24 + 3 * B * H * q.element_size()), what="deberta_c2p_p2c", shape=(B, H, Lq, Lk),
                 dtype=q.dtype, alternative="rp.attend with rp.schemes.deberta.position_term (backend 'flex')")
    rel = relative_pos.to(device=q.device, dtype=torch.long)  # (Lq, Lk)
    idx = torch.clamp(rel + att_span, 0, 2 * att_span - 1)  # (Lq, Lk)
    c2p = torch.gather(c2p_table, -1, idx.expand(B, H, Lq, Lk))  # (B, H, Lq, Lk)
    p2c_idx = idx if p2c_index == "code" else torch.clamp(-rel + att_span, 0, 2 * att_span - 1)  # (Lq, Lk)
    # p2c_table is indexed by key row j: gather along the 2S axis of the (Lk, 2S) table
    p2c_t = torch.gather(p2c_table, -1, p2c_idx.T.expand(B, H, Lk, Lq))  # (B, H, Lk, Lq)
    return c2p, p2c_t.transpose(-1, -2)  # (B, H, Lq, Lk) each


@dataclass
class DisentangledConfig:
    """Like HF's ``DebertaV2Config`` (the fields a disentangled layer reads).

    ``max_relative_positions`` is k; the relative table has 2S rows with
    S = ``position_buckets`` when > 0 (log buckets) else k.
    """

    hidden_size: int = 64
    num_heads: int = 4
    max_relative_positions: int = 512
    position_buckets: int = -1
    pos_att_type: tuple[str, ...] = ("c2p", "p2c")
    share_att_key: bool = True
    layer_norm_eps: float = 1e-7
    intermediate_size: int | None = None  # DisentangledLayer MLP width (default 4 * hidden_size)
    max_position_embeddings: int = 512  # absolute positions of the EnhancedMaskDecoder
    norm_rel_ebd: bool = True  # LayerNorm on the shared relative table (DeBERTa-v3 "layer_norm")

    def __post_init__(self):
        check_positive_int("hidden_size", self.hidden_size)
        check_positive_int("num_heads", self.num_heads)
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"num_heads must divide hidden_size, got num_heads={self.num_heads}, hidden_size={self.hidden_size}"
            )
        check_positive_int("max_relative_positions", self.max_relative_positions)
        check_int("position_buckets", self.position_buckets)
        if self.position_buckets > 0:
            _check_buckets(self.position_buckets, self.max_relative_positions)
        self.pos_att_type = tuple(self.pos_att_type)
        for t in self.pos_att_type:
            check_choice("pos_att_type", t, POS_ATT_TYPES)
        if len(set(self.pos_att_type)) != len(self.pos_att_type):
            raise ValueError(f"pos_att_type must not repeat a term, got {self.pos_att_type}")
        check_positive_int("max_position_embeddings", self.max_position_embeddings)
        if self.intermediate_size is not None:
            check_positive_int("intermediate_size", self.intermediate_size)

    @property
    def att_span(self) -> int:  # S: the table has 2S rows
        return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


class RelativeEmbeddings(nn.Module):
    """The encoder's shared (2S, D) relative table (+ LayerNorm), as in DeBERTa-v2's encoder.

    Row r stands for offset r - S (``query_minus_key``). One instance serves every layer;
    each layer projects it with its own key/query projections. Parameter names match
    HF's ``DebertaV2Encoder`` (``rel_embeddings.weight``, ``LayerNorm.*``).
    """

    def __init__(self, config: DisentangledConfig):
        super().__init__()
        self.rel_embeddings = nn.Embedding(2 * config.att_span, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps) if config.norm_rel_ebd else None

    def forward(self) -> torch.Tensor:
        table = self.rel_embeddings.weight  # (2S, D)
        return table if self.LayerNorm is None else self.LayerNorm(table)  # (2S, D)


class DisentangledSelfAttention(nn.Module):
    """Disentangled self-attention: c2c + c2p + p2c, scaled by sqrt(d * (1 + #terms)).

    Parameter names match HF's ``DisentangledSelfAttention``. forward(hidden (B, Lk, D),
    attention_mask, rel_embeddings (2S, D), query_states (B, Lq, D) = hidden) ->
    (B, Lq, D). Offsets are ``query_minus_key``; see the module docstring for Lq != Lk.
    attention_mask: None, (B, Lk) key padding, (B, Lq, Lk) or (B, 1 or H, Lq, Lk);
    nonzero = may attend. Masked scores get finfo.min like HF (fully masked rows then
    average all values). HF's encoder turns a (B, L) padding mask m into m_i * m_j first.
    """

    def __init__(self, config: DisentangledConfig):
        super().__init__()
        self.config = config
        D, H = config.hidden_size, config.num_heads
        self.num_attention_heads = H
        self.attention_head_size = D // H
        self.query_proj = nn.Linear(D, D)
        self.key_proj = nn.Linear(D, D)
        self.value_proj = nn.Linear(D, D)
        self.pos_att_type = config.pos_att_type
        if not config.share_att_key:
            if "c2p" in self.pos_att_type:
                self.pos_key_proj = nn.Linear(D, D)
            if "p2c" in self.pos_att_type:
                self.pos_query_proj = nn.Linear(D, D)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # (..., L, D) -> (..., H, L, d)
        x = x.view(*x.shape[:-1], self.num_attention_heads, self.attention_head_size)  # (..., L, H, d)
        return x.transpose(-2, -3)  # (..., H, L, d)

    @property
    def scale(self) -> float:
        """sqrt(d_head * (1 + number of position terms)): sqrt(3 d) with c2p and p2c, as in the paper."""
        return math.sqrt(self.attention_head_size * (1 + len(self.config.pos_att_type)))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        rel_embeddings: torch.Tensor | None,
        *,
        query_states: torch.Tensor | None = None,
        relative_pos: torch.Tensor | None = None,
    ) -> torch.Tensor:
        cfg = self.config
        D, S = cfg.hidden_size, cfg.att_span
        check_tensor("hidden_states", hidden_states, ndim=3, floating=True, shape={-1: D})
        B, Lk, _ = hidden_states.shape
        if query_states is None:
            query_states = hidden_states
        check_tensor("query_states", query_states, ndim=3, floating=True, shape={0: B, -1: D})
        Lq = query_states.shape[1]
        if cfg.pos_att_type:
            check_tensor("rel_embeddings", rel_embeddings, ndim=2, floating=True, shape={-1: D})
            if rel_embeddings.shape[0] != 2 * S:
                raise ValueError(
                    f"rel_embeddings must have 2S = {2 * S} rows (S = att_span), got shape {tuple(rel_embeddings.shape)}"
                )
        mask = _expand_mask(attention_mask, B, Lq, Lk)  # (B, 1|H, Lq, Lk) bool or None
        if relative_pos is None:
            buckets = cfg.position_buckets > 0
            relative_pos = build_relative_position(
                Lq, Lk, bucket_size=cfg.position_buckets if buckets else -1,
                max_position=cfg.max_relative_positions if buckets else -1, device=hidden_states.device,
            )  # (Lq, Lk)
        check_tensor("relative_pos", relative_pos, ndim=2, floating=False, shape={0: Lq, 1: Lk})

        q = self._heads(self.query_proj(query_states))  # (B, H, Lq, d)
        k = self._heads(self.key_proj(hidden_states))  # (B, H, Lk, d)
        v = self._heads(self.value_proj(hidden_states))  # (B, H, Lk, d)
        scores = q @ k.transpose(-1, -2)  # (B, H, Lq, Lk) content-to-content
        if cfg.pos_att_type:
            key_proj = self.key_proj if cfg.share_att_key else getattr(self, "pos_key_proj", None)
            query_proj = self.query_proj if cfg.share_att_key else getattr(self, "pos_query_proj", None)
            pos_key = self._heads(key_proj(rel_embeddings)) if key_proj is not None else None  # (H, 2S, d)
            pos_query = self._heads(query_proj(rel_embeddings)) if query_proj is not None else None  # (H, 2S, d)
            c2p, p2c = deberta_c2p_p2c(
                q, k,
                pos_key if pos_key is not None else pos_query,
                pos_query if pos_query is not None else pos_key,
                relative_pos, S, pos_layout="hsd",
            )  # (B, H, Lq, Lk) each
            if "c2p" in cfg.pos_att_type:
                scores = scores + c2p
            if "p2c" in cfg.pos_att_type:
                scores = scores + p2c
        scores = scores / self.scale  # (B, H, Lq, Lk)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)  # (B, H, Lq, Lk)
        out = probs @ v  # (B, H, Lq, d)
        return out.transpose(1, 2).reshape(B, Lq, D)  # (B, Lq, D)


def _expand_mask(mask, B, Lq, Lk):
    if mask is None:
        return None
    check_tensor("attention_mask", mask, ndim=(2, 3, 4))
    if mask.dim() == 2:
        check_tensor("attention_mask", mask, shape={0: B, 1: Lk})
        return mask.bool()[:, None, None, :]  # (B, 1, 1, Lk)
    if mask.dim() == 3:
        check_tensor("attention_mask", mask, shape={0: B, 1: Lq, 2: Lk})
        return mask.bool()[:, None]  # (B, 1, Lq, Lk)
    check_tensor("attention_mask", mask, shape={0: B, 2: Lq, 3: Lk})
    return mask.bool()  # (B, 1|H, Lq, Lk)


class DisentangledLayer(nn.Module):
    """One DeBERTa transformer layer (post-LN), parameter names as HF's ``DebertaV2Layer``.

    attention.self -> attention.output (dense, residual with the *query* states,
    LayerNorm) -> intermediate.dense + GELU -> output (dense, residual, LayerNorm).
    forward(hidden (B, Lk, D), attention_mask, rel_embeddings, query_states=None) -> (B, Lq, D).
    """

    def __init__(self, config: DisentangledConfig):
        super().__init__()
        D = config.hidden_size
        inner = config.intermediate_size or 4 * D
        eps = config.layer_norm_eps
        self.attention = nn.ModuleDict({
            "self": DisentangledSelfAttention(config),
            "output": nn.ModuleDict({"dense": nn.Linear(D, D), "LayerNorm": nn.LayerNorm(D, eps)}),
        })
        self.intermediate = nn.ModuleDict({"dense": nn.Linear(D, inner)})
        self.output = nn.ModuleDict({"dense": nn.Linear(inner, D), "LayerNorm": nn.LayerNorm(D, eps)})

    def forward(self, hidden_states, attention_mask, rel_embeddings, *, query_states=None, relative_pos=None):
        query_states = hidden_states if query_states is None else query_states
        ctx = self.attention["self"](
            hidden_states, attention_mask, rel_embeddings, query_states=query_states, relative_pos=relative_pos
        )  # (B, Lq, D)
        ao = self.attention["output"]
        x = ao["LayerNorm"](ao["dense"](ctx) + query_states)  # (B, Lq, D)
        h = F.gelu(self.intermediate["dense"](x))  # (B, Lq, inner)
        return self.output["LayerNorm"](self.output["dense"](h) + x)  # (B, Lq, D)


class EnhancedMaskDecoder(nn.Module):
    """Enhanced Mask Decoder (paper section 3.2) as a module: ``enhanced_mask_decode``'s steps.

    With H the output of the *second-to-last* encoder layer it re-runs ``layer`` with keys
    and values H and a query input carrying learned absolute position embeddings P:
        I_0 = H + P[position_ids];  I_{t+1} = layer(H as keys/values, query_states=I_t)
    and returns I_n (B, L, D) for the MLM head (n = ``num_steps``, 2 in the paper).
    ``layer`` defaults to a fresh ``DisentangledLayer``; pass the encoder's last layer to
    share its weights, as Microsoft's release does. Offsets inside the layer are
    ``query_minus_key``.
    """

    def __init__(self, config: DisentangledConfig, layer: nn.Module | None = None, num_steps: int = 2):
        super().__init__()
        self.num_steps = check_positive_int("num_steps", num_steps)
        self.max_position_embeddings = config.max_position_embeddings
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layer = layer if layer is not None else DisentangledLayer(config)

    def forward(self, hidden_states, attention_mask, rel_embeddings, *, position_ids=None, relative_pos=None):
        check_tensor("hidden_states", hidden_states, ndim=3, floating=True)
        B, L, _ = hidden_states.shape
        if position_ids is None:
            position_ids = torch.arange(L, device=hidden_states.device)[None]  # (1, L)
        check_tensor("position_ids", position_ids, ndim=(1, 2), floating=False, shape={-1: L})
        if position_ids.numel() and (position_ids.min() < 0 or position_ids.max() >= self.max_position_embeddings):
            raise ValueError(
                f"position_ids must lie in [0, {self.max_position_embeddings - 1}] (max_position_embeddings)"
            )

        def run_last(keys, query):  # (B, L, D) each -> (B, L, D)
            return self.layer(keys, attention_mask, rel_embeddings, query_states=query, relative_pos=relative_pos)

        return enhanced_mask_decode(hidden_states, self.position_embeddings(position_ids), run_last, self.num_steps)


def benchmark_module(num_heads: int, head_dim: int, att_span: int, *, device=None, dtype=torch.float32,
                     generator=None) -> BenchmarkModule:
    """One Hugging Face ``DebertaV2Layer`` (eager, log buckets with S = ``att_span``, random weights from a
    seeded fork of the RNG) and what its attention needs to run on ``rp.attend``."""
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import DebertaV2Layer

    H, d, S = num_heads, head_dim, int(att_span)
    cfg = DebertaV2Config(hidden_size=H * d, num_attention_heads=H, intermediate_size=4 * H * d,
                          relative_attention=True, position_buckets=S, max_relative_positions=2 * S,
                          pos_att_type=["c2p", "p2c"], share_att_key=True, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)
    cfg._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = DebertaV2Layer(cfg).to(device=device, dtype=dtype).eval()
    sa = module.attention.self
    S = sa.pos_ebd_size
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    rel = torch.randn(2 * S, H * d, generator=g).to(device=device, dtype=dtype)  # the shared relative table

    def heads(x):  # (B, L, H d) -> (B, H, L, d)
        return x.view(x.shape[0], x.shape[1], H, d).transpose(1, 2)

    def hf(hidden):
        mask = torch.ones(hidden.shape[0], 1, 1, hidden.shape[1], dtype=torch.bool, device=hidden.device)
        return module(hidden, mask, rel_embeddings=rel)[0]  # (B, L, H d)

    def prepare(hidden):
        q, k, v = (heads(p(hidden)) for p in (sa.query_proj, sa.key_proj, sa.value_proj))  # (B, H, L, d)
        pos_key, pos_query = heads(sa.key_proj(rel)[None])[0], heads(sa.query_proj(rel)[None])[0]  # (H, 2S, d)
        term = position_term(pos_key, pos_query, att_span=S, position_buckets=sa.position_buckets,
                             max_relative_positions=sa.max_relative_positions)
        return q, k, v, term

    def finish(ctx, hidden):  # ctx (B, H, L, d) -> (B, L, H d)
        ctx = ctx.transpose(1, 2).reshape(hidden.shape[0], hidden.shape[1], -1)
        attention_output = module.attention.output(ctx, hidden)  # (B, L, H d)
        return module.output(module.intermediate(attention_output), attention_output)

    return BenchmarkModule("Hugging Face DebertaV2Layer (eager, one layer)", hf=hf, prepare=prepare, finish=finish)
