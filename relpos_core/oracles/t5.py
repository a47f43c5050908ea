"""Hugging Face-parity T5 modules: test oracles and the chapters' reference stack.

Book: "T5: one scalar per head, looked up by bucket" (chapters/03_t5_buckets.ipynb, the
stack whose checkpoint loads strictly), "Failure modes" (chapters/12_failure_modes.ipynb,
a bias table per layer) and the benchmark (``benchmark_module``, chapters/11_what_it_costs.ipynb).

The scheme itself (its buckets, its position term, its declaration) is
``relpos_core/schemes/t5.py``; this file holds what is built *around* it to check it
against Hugging Face transformers: the dense bias of a table (``t5_bias_from_table``) and
modules that mirror ``T5EncoderModel(config).encoder`` parameter names one for one, so
its ``state_dict`` loads with ``strict=True``. Sign convention: ``key_minus_query``
(j - i), as in the scheme file. Only the first block of a stack owns the bias table; later
blocks reuse the first block's position bias.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from relpos_core._validate import check_choice, check_positive_int, check_tensor
from relpos_core.budget import check_memory
from relpos_core.offsets import relative_offsets
from relpos_core.schemes.declaration import BenchmarkModule
from relpos_core.schemes.t5 import INT_DTYPES, _check_bucket_args, position_term, t5_relative_bucket

__all__ = ["t5_bias_from_table", "T5Config", "T5RelativeBias", "T5LayerNorm", "T5Attention", "T5DenseReluDense",
           "T5LayerSelfAttention", "T5LayerFF", "T5Block", "T5EncoderStack", "benchmark_module"]


def t5_bias_from_table(
    table: torch.Tensor,
    query_len: int,
    key_len: int | None = None,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    query_offset: int | None = None,
    num_heads: int | None = None,
    key_positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """The dense (H, Lq, Lk) T5 bias from a (num_buckets, H) table (HF's ``relative_attention_bias.weight``).

    Convention ``key_minus_query``: entry (h, i, j) is ``table[bucket(j - i), h]``. Key j
    sits at position j, or at ``key_positions[j]`` when given (the keys a KV cache kept
    after evicting others), and the queries are the last ``query_len`` keys (a decoder
    step attends to its whole cache), unless ``query_offset`` puts query i at
    ``query_offset + i``. ``num_heads``, if given, must match the table's second dimension.
    """
    check_tensor("table", table, ndim=2, floating=True)
    if num_heads is not None:
        num_heads = check_positive_int("num_heads", num_heads)
        if table.shape[1] != num_heads:
            raise ValueError(
                f"num_heads={num_heads} does not match table of shape {tuple(table.shape)} (num_buckets, H)"
            )
    _check_bucket_args(bidirectional, table.shape[0], max_distance, num_buckets_name="num_buckets (table.shape[0])")
    query_len = check_positive_int("query_len", query_len)
    if key_positions is None:
        key_len = query_len if key_len is None else check_positive_int("key_len", key_len)
    n_keys = key_len if key_positions is None else key_positions.numel()
    check_memory(table.element_size() * table.shape[1] * query_len * n_keys + 41 * query_len * n_keys,
                 what="t5_bias_from_table", shape=(table.shape[1], query_len, n_keys), dtype=table.dtype,
                 alternative="rp.attend with rp.schemes.t5.position_term and backend='flex' (no dense bias)")
    rel = relative_offsets(query_len, key_len, convention="key_minus_query", query_offset=query_offset,
                           key_positions=key_positions, device=table.device)  # (Lq, Lk) j - i
    buckets = t5_relative_bucket(rel, bidirectional=bidirectional, num_buckets=table.shape[0],
                                 max_distance=max_distance)  # (Lq, Lk)
    return table[buckets].permute(2, 0, 1)  # (H, Lq, Lk)


@dataclass
class T5Config:
    """A T5 stack. ``is_decoder`` (HF's name) and ``causal`` (the book's name) are the same flag."""

    d_model: int = 512
    d_kv: int = 64
    num_heads: int = 8
    d_ff: int = 2048
    num_layers: int = 6
    num_buckets: int = 32
    max_distance: int = 128
    is_decoder: bool | None = None
    causal: bool | None = None
    vocab_size: int = 32128
    layer_norm_eps: float = 1e-6
    dropout_rate: float = 0.0

    def __post_init__(self):
        for name in ("d_model", "d_kv", "num_heads", "d_ff", "num_layers", "vocab_size"):
            check_positive_int(name, getattr(self, name))
        if self.is_decoder is not None and self.causal is not None and bool(self.is_decoder) != bool(self.causal):
            raise ValueError(f"is_decoder={self.is_decoder} and causal={self.causal} disagree; set one of them")
        flag = self.causal if self.causal is not None else self.is_decoder
        flag = False if flag is None else flag
        check_choice("causal", flag, (True, False))
        self.is_decoder = self.causal = bool(flag)
        _check_bucket_args(not self.causal, self.num_buckets, self.max_distance)
        if not (self.layer_norm_eps > 0):
            raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps}")
        if not (0.0 <= self.dropout_rate < 1.0):
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate}")


class T5RelativeBias(nn.Embedding):
    """The (num_buckets, H) bias table. It *is* an ``nn.Embedding`` (so HF checkpoints load);
    ``compute_bias`` turns it into the dense (H, Lq, Lk) bias (``key_minus_query``)."""

    def __init__(self, num_buckets: int, num_heads: int, *, bidirectional: bool = True, max_distance: int = 128):
        _check_bucket_args(bidirectional, num_buckets, max_distance)
        num_heads = check_positive_int("num_heads", num_heads)
        super().__init__(num_buckets, num_heads)
        self.bidirectional = bool(bidirectional)
        self.max_distance = max_distance

    def compute_bias(self, query_len: int, key_len: int | None = None, *,
                     query_offset: int | None = None) -> torch.Tensor:
        """(H, Lq, Lk) bias; entry (h, i, j) = weight[bucket(j - i), h] (``key_minus_query``),
        the queries the last ``query_len`` keys unless ``query_offset`` places them."""
        return t5_bias_from_table(self.weight, query_len, key_len, bidirectional=self.bidirectional,
                                  max_distance=self.max_distance, query_offset=query_offset)


class T5LayerNorm(nn.Module):
    """RMS norm without mean subtraction or bias, as T5 has it."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(check_positive_int("d_model", d_model)))
        self.eps = eps

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)  # (B, L, 1)
        return self.weight * (x * torch.rsqrt(variance + self.eps)).type_as(self.weight)  # (B, L, d_model)


class T5Attention(nn.Module):
    """T5 self-attention: q, k, v, o without bias and *no* 1/sqrt(d_kv) scaling (T5 folds it into init).

    Only a layer with ``has_relative_attention_bias`` owns ``relative_attention_bias``; the
    others take the first layer's ``position_bias``. Convention ``key_minus_query``.
    """

    def __init__(self, config: T5Config, has_relative_attention_bias: bool = False):
        super().__init__()
        self.config = config
        self.has_relative_attention_bias = bool(has_relative_attention_bias)
        inner = config.num_heads * config.d_kv
        self.q = nn.Linear(config.d_model, inner, bias=False)
        self.k = nn.Linear(config.d_model, inner, bias=False)
        self.v = nn.Linear(config.d_model, inner, bias=False)
        self.o = nn.Linear(inner, config.d_model, bias=False)
        if self.has_relative_attention_bias:
            self.relative_attention_bias = T5RelativeBias(
                config.num_buckets, config.num_heads, bidirectional=not config.causal, max_distance=config.max_distance
            )

    def forward(self, hidden_states, position_bias=None, attention_mask=None):
        """hidden_states (B, L, d_model); position_bias (H, L, L) or (B, H, L, L) from the first layer;
        attention_mask (B, L): 1/True for real keys, 0/False for padding.
        Returns (output (B, L, d_model), position_bias) so the next layer can reuse the bias."""
        cfg = self.config
        check_tensor("hidden_states", hidden_states, ndim=3, floating=True, shape={-1: cfg.d_model})
        B, L, _ = hidden_states.shape
        if position_bias is not None:
            check_tensor("position_bias", position_bias, ndim=(3, 4), floating=True,
                         shape={-3: cfg.num_heads, -2: L, -1: L})
        if attention_mask is not None:
            check_tensor("attention_mask", attention_mask, ndim=2, shape={0: B, 1: L})

        q = self.q(hidden_states).view(B, L, cfg.num_heads, cfg.d_kv).transpose(1, 2)  # (B, H, L, d_kv)
        k = self.k(hidden_states).view(B, L, cfg.num_heads, cfg.d_kv).transpose(1, 2)  # (B, H, L, d_kv)
        v = self.v(hidden_states).view(B, L, cfg.num_heads, cfg.d_kv).transpose(1, 2)  # (B, H, L, d_kv)
        if position_bias is None:
            if self.has_relative_attention_bias:
                position_bias = self.relative_attention_bias.compute_bias(L, L)  # (H, L, L)
            else:
                position_bias = q.new_zeros(cfg.num_heads, L, L)  # (H, L, L)

        scores = q @ k.transpose(-2, -1) + position_bias  # (B, H, L, L), unscaled
        allowed = torch.ones(L, L, dtype=torch.bool, device=q.device)  # (L, L)
        if cfg.causal:
            allowed = allowed.tril()  # key j <= query i
        allowed = allowed.expand(B, 1, L, L)  # (B, 1, L, L)
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]  # (B, 1, L, L)
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)  # (B, H, L, L)
        attn = F.softmax(scores.float(), dim=-1).type_as(scores)  # (B, H, L, L)
        attn = F.dropout(attn, p=cfg.dropout_rate, training=self.training)
        out = (attn @ v).transpose(1, 2).reshape(B, L, cfg.num_heads * cfg.d_kv)  # (B, L, H * d_kv)
        return self.o(out), position_bias  # (B, L, d_model)


class T5DenseReluDense(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.wi = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout_rate = config.dropout_rate

    def forward(self, x):
        h = F.dropout(F.relu(self.wi(x)), p=self.dropout_rate, training=self.training)  # (B, L, d_ff)
        return self.wo(h)  # (B, L, d_model)


class T5LayerSelfAttention(nn.Module):
    def __init__(self, config: T5Config, has_relative_attention_bias: bool = False):
        super().__init__()
        self.SelfAttention = T5Attention(config, has_relative_attention_bias)
        self.layer_norm = T5LayerNorm(config.d_model, config.layer_norm_eps)
        self.dropout_rate = config.dropout_rate

    def forward(self, x, position_bias=None, attention_mask=None):
        h, position_bias = self.SelfAttention(self.layer_norm(x), position_bias, attention_mask)
        return x + F.dropout(h, p=self.dropout_rate, training=self.training), position_bias  # (B, L, d_model)


class T5LayerFF(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.DenseReluDense = T5DenseReluDense(config)
        self.layer_norm = T5LayerNorm(config.d_model, config.layer_norm_eps)
        self.dropout_rate = config.dropout_rate

    def forward(self, x):
        h = self.DenseReluDense(self.layer_norm(x))
        return x + F.dropout(h, p=self.dropout_rate, training=self.training)  # (B, L, d_model)


class T5Block(nn.Module):
    def __init__(self, config: T5Config, has_relative_attention_bias: bool = False):
        super().__init__()
        self.layer = nn.ModuleList([T5LayerSelfAttention(config, has_relative_attention_bias), T5LayerFF(config)])

    def forward(self, x, position_bias=None, attention_mask=None):
        x, position_bias = self.layer[0](x, position_bias, attention_mask)
        return self.layer[1](x), position_bias  # (B, L, d_model)


class T5EncoderStack(nn.Module):
    """Token embedding, ``num_layers`` blocks and a final RMS norm; keys match HF's ``T5EncoderModel.encoder``.

    Block 0 owns the bias table and computes the (H, L, L) bias once; every later block
    reuses it. With ``config.causal`` it is a decoder-only stack (no cross-attention), whose
    keys then no longer match HF's T5 decoder.
    """

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.block = nn.ModuleList([T5Block(config, i == 0) for i in range(config.num_layers)])
        self.final_layer_norm = T5LayerNorm(config.d_model, config.layer_norm_eps)

    def forward(self, input_ids, attention_mask=None):
        """input_ids (B, L) int64; attention_mask (B, L) 1 for tokens, 0 for padding. Returns (B, L, d_model)."""
        check_tensor("input_ids", input_ids, ndim=2, dtype=INT_DTYPES)
        p = self.config.dropout_rate
        x = F.dropout(self.embed_tokens(input_ids), p=p, training=self.training)  # (B, L, d_model)
        position_bias = None  # computed by block 0, reused by the rest
        for block in self.block:
            x, position_bias = block(x, position_bias, attention_mask)
        return F.dropout(self.final_layer_norm(x), p=p, training=self.training)  # (B, L, d_model)


def benchmark_module(num_heads: int, head_dim: int, max_distance: int, *, device=None, dtype=torch.float32,
                     generator=None) -> BenchmarkModule:
    """Hugging Face's ``T5Attention`` (eager, bidirectional, 32 buckets, random weights from a seeded
    fork of the RNG: the caller's RNG is left as it was) and what it needs to run on ``rp.attend``."""
    from transformers import T5Config as HFT5Config
    from transformers.models.t5.modeling_t5 import T5Attention as HFT5Attention

    H, d = num_heads, head_dim
    cfg = HFT5Config(d_model=H * d, d_kv=d, num_heads=H, relative_attention_num_buckets=32,
                   relative_attention_max_distance=int(max_distance), dropout_rate=0.0, is_decoder=False)
    cfg._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = HFT5Attention(cfg, has_relative_attention_bias=True, layer_idx=0).to(device=device, dtype=dtype).eval()
    table = module.relative_attention_bias.weight.detach()  # (num_buckets, H)
    term = position_term(table, bidirectional=True, max_distance=module.relative_attention_max_distance)

    def heads(x):  # (B, L, H d) -> (B, H, L, d)
        return x.view(x.shape[0], x.shape[1], H, d).transpose(1, 2)

    def prepare(hidden):
        q, k, v = (heads(p(hidden)) for p in (module.q, module.k, module.v))  # (B, H, L, d) each
        return q, k, v, term

    def finish(ctx, hidden):  # ctx (B, H, L, d) -> (B, L, H d)
        return module.o(ctx.transpose(1, 2).reshape(hidden.shape[0], hidden.shape[1], -1))

    return BenchmarkModule("Hugging Face T5Attention (eager)", hf=lambda hidden: module(hidden)[0], prepare=prepare,
                           finish=finish)
