"""Hugging Face transformers' default implementations in the peer benchmark, built from configs with
random weights (nothing downloaded).

* RoPE (Su et al. 2021): Llama's ``LlamaRotaryEmbedding`` and ``apply_rotary_pos_emb`` (rotate_half
  pairing), then ``F.scaled_dot_product_attention`` with ``is_causal``, as Llama's sdpa attention runs;
* T5 (Raffel et al. 2020): ``T5Attention`` with the ``sdpa`` (the default) and the ``eager``
  attention, one encoder layer's self-attention, projections included (module rows);
* ALiBi (Press et al. 2022): BLOOM's ``build_alibi_tensor`` and ``BloomAttention`` (its only
  implementation), causal, projections included (module rows);
* DeBERTa (He et al. 2021): one ``DebertaV2Layer`` with log buckets (``position_buckets``, as
  DeBERTa-v2/v3), from ``relpos_core.oracles.deberta.benchmark_module`` (module rows).

Each module row also runs the same module's attention on ``rp.attend`` (``module_spec``). Imports
happen inside the functions: relpos_core imports without transformers.
"""
from __future__ import annotations

import torch

from relpos_core.bench.peers.common import Built, Contender
from relpos_core.schemes.declaration import BenchmarkModule

__all__ = ["contenders", "module_spec", "module_causal", "MODULE_SCHEMES"]

LIBRARY = "transformers"


def _llama_rope(row):
    import torch.nn.functional as F
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    cfg = LlamaConfig(hidden_size=row.H * row.d, num_attention_heads=row.H, num_key_value_heads=row.H,
                      head_dim=row.d, rope_theta=row.rope_base, max_position_embeddings=max(row.L, 2048))
    rotary = LlamaRotaryEmbedding(cfg).to(row.device)

    def fn(q, k, v):  # (B, H, L, d) each
        position_ids = torch.arange(k.shape[-2], device=q.device)[None]  # (1, L)
        cos, sin = rotary(v, position_ids)  # (1, L, d) each
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, L, d)
    return Built(fn, [])


# ----------------------------------------------------------------------------- modules

def _t5_module(row, dtype, implementation: str) -> BenchmarkModule:
    from relpos_core.oracles.t5 import benchmark_module

    spec = benchmark_module(row.H, row.d, row.max_distance, device=row.device, dtype=dtype)
    if implementation == "eager":
        return spec
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    cfg = T5Config(d_model=row.H * row.d, d_kv=row.d, num_heads=row.H, relative_attention_num_buckets=32,
                   relative_attention_max_distance=row.max_distance, dropout_rate=0.0, is_decoder=False)
    cfg._attn_implementation = implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the oracle's seed: the same weights as its eager module
        module = T5Attention(cfg, has_relative_attention_bias=True, layer_idx=0).to(row.device, dtype).eval()
    return BenchmarkModule(f"Hugging Face T5Attention ({implementation})", hf=lambda h: module(h)[0],
                           prepare=spec.prepare, finish=spec.finish)


def _bloom_module(row, dtype) -> BenchmarkModule:
    from transformers import BloomConfig
    from transformers.models.bloom.modeling_bloom import BloomAttention, build_alibi_tensor

    from relpos_core.schemes import alibi

    H, d = row.H, row.d
    cfg = BloomConfig(hidden_size=H * d, n_head=H, hidden_dropout=0.0, attention_dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = BloomAttention(cfg, layer_idx=0).to(row.device, dtype).eval()
    term = alibi.position_term(H, device=row.device)  # causal: -m_h (i - j) for j <= i

    def hf(hidden):  # (B, L, H d), as BloomModel feeds one layer: the ALiBi tensor and a causal mask
        B, L, _ = hidden.shape
        keep = torch.ones(B, L, device=hidden.device, dtype=torch.long)
        bias = build_alibi_tensor(keep, H, hidden.dtype)  # (B H, 1, L): m_h j, as BLOOM adds it
        future = torch.ones(L, L, dtype=torch.bool, device=hidden.device).triu(1)  # (L, L)
        mask = torch.zeros(L, L, dtype=hidden.dtype, device=hidden.device).masked_fill(
            future, torch.finfo(hidden.dtype).min)[None, None]  # (1, 1, L, L)
        return module(hidden, torch.zeros_like(hidden), bias, mask)[0]  # residual 0: the attention's output

    def prepare(hidden):
        q, k, v = module._reshape(module.query_key_value(hidden))  # (B, H, L, d) each
        return q, k, v, term

    def finish(ctx, hidden):  # ctx (B, H, L, d) -> (B, L, H d)
        return module.dense(ctx.transpose(1, 2).reshape(hidden.shape[0], hidden.shape[1], -1))

    return BenchmarkModule("Hugging Face BloomAttention (eager)", hf=hf, prepare=prepare, finish=finish)


def _deberta_module(row, dtype) -> BenchmarkModule:
    from relpos_core.oracles.deberta import benchmark_module

    return benchmark_module(row.H, row.d, row.att_span, device=row.device, dtype=dtype,
                            generator=torch.Generator().manual_seed(0))


_MODULES = {
    "t5": lambda row, dtype: _t5_module(row, dtype, "eager"),
    "alibi": _bloom_module,
    "deberta": _deberta_module,
}
MODULE_SCHEMES = tuple(_MODULES)
_CAUSAL = {"alibi": True}  # BLOOM is a decoder; T5's encoder layer and DeBERTa's are bidirectional


def module_spec(row, dtype) -> BenchmarkModule:
    """The row's module (same seeded weights at every dtype): prepare / finish for rp.attend's contenders."""
    return _MODULES[row.scheme](row, dtype)


def module_causal(scheme: str) -> bool:
    return _CAUSAL.get(scheme, False)


def _module_contender(name, scheme, make):
    def build(row):
        spec = make(row, row.dtype)
        return Built(spec.hf, [])
    return Contender(name, LIBRARY, scheme, "module", build)


def contenders() -> list[Contender]:
    """Hugging Face's contenders; raises ImportError when transformers is not installed."""
    import transformers  # noqa: F401

    return [
        Contender("Hugging Face Llama apply_rotary_pos_emb + SDPA", LIBRARY, "rope", "kernel", _llama_rope,
                  pairing="rotate_half"),
        _module_contender("Hugging Face T5Attention (sdpa)", "t5", lambda r, dt: _t5_module(r, dt, "sdpa")),
        _module_contender("Hugging Face T5Attention (eager)", "t5", lambda r, dt: _t5_module(r, dt, "eager")),
        _module_contender("Hugging Face BloomAttention (eager)", "alibi", _bloom_module),
        _module_contender("Hugging Face DebertaV2Layer (eager, log buckets)", "deberta", _deberta_module),
    ]
