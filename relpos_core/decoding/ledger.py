"""What each scheme stores per cached token, and what it recomputes at every decode step.

Book: chapter 7, "The KV cache" (chapters/07_the_kv_cache.ipynb).

Three counts, each a closed formula that the tests and the chapter check against the
real tensors of a ``relpos_core.decoding.KVCache`` and of the decoder's position terms:

* ``cache_bytes``: the cache itself, which grows with the kept tokens K and the batch B:
  keys and values (B, H, K, d) per layer, or Transformer-XL's memory (B, K, d_model) per
  layer, plus one int64 position per kept token.
* ``shared_position_bytes``: position state that does not grow with the batch: Shaw's
  two (2k + 1, d) tables per layer, T5's (buckets, H) table, ALiBi's H float32 slopes,
  Transformer-XL's relative rows (H, D, d) per layer for the D distances the cache can
  reach (D grows with the context) with its u and v, nothing for RoPE and sinusoidal
  absolute vectors (computed when needed, not stored).
* ``step_work``: the multiply-adds a decode step spends on positions per layer, beyond
  the q . k and p . v that every scheme computes over the kept tokens.

``bytes_per_token`` divides the first two by the context length (and the second by B):
the curve of chapter 7's figure. Sign conventions: not applicable (sizes only).
"""
from __future__ import annotations

import torch

from relpos_core._validate import check_choice, check_int, check_positive_int

__all__ = ["cache_bytes", "shared_position_bytes", "bytes_per_token", "step_work", "LAYOUT_SCHEMES"]

SCHEMES = ("absolute", "shaw", "t5", "alibi", "rope", "transformer_xl")
LAYOUT_SCHEMES = ("absolute", "shaw", "t5", "alibi", "rope_rotated", "rope_unrotated", "transformer_xl")
POSITION_BYTES = 8


def _dtype_bytes(dtype) -> int:
    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    return check_positive_int("dtype (bytes per element)", dtype)


def _scheme(scheme: str) -> str:
    base = "rope" if scheme in ("rope_rotated", "rope_unrotated") else scheme
    check_choice("scheme", base, SCHEMES)
    return base


def cache_bytes(scheme: str, *, tokens: int, batch: int, num_layers: int, num_heads: int, head_dim: int,
                d_model: int, dtype=torch.float32) -> dict[str, int]:
    """Bytes of a cache holding ``tokens`` kept tokens, by kind (keys, values, memory, positions).

    Transformer-XL stores each layer's input states (d_model per token) instead of keys
    and values; every cache stores one int64 position per kept token.
    """
    scheme = _scheme(scheme)
    tokens = check_int("tokens", tokens, min_value=0)
    for name, v in (("batch", batch), ("num_layers", num_layers), ("num_heads", num_heads),
                    ("head_dim", head_dim), ("d_model", d_model)):
        check_positive_int(name, v)
    b = _dtype_bytes(dtype)
    per_layer_kv = batch * num_heads * tokens * head_dim * b  # one (B, H, K, d) tensor
    if scheme == "transformer_xl":
        return dict(keys=0, values=0, memory=num_layers * batch * tokens * d_model * b,
                    positions=POSITION_BYTES * tokens)
    return dict(keys=num_layers * per_layer_kv, values=num_layers * per_layer_kv, memory=0,
                positions=POSITION_BYTES * tokens)


def shared_position_bytes(scheme: str, *, num_layers: int, num_heads: int, head_dim: int, dtype=torch.float32,
                          max_relative_position: int = 8, num_buckets: int = 32, distances: int = 1) -> int:
    """Bytes of the position state shared by the whole batch (tables, relative rows).

    Shaw: 2 (2k + 1) d per layer (a^K and a^V, shared by the heads); T5: buckets x H once
    (one table for all layers); ALiBi: H float32 slopes; Transformer-XL: H x distances x d
    per layer (its rows W_kR R, which must cover every distance the cache reaches) plus
    u and v (H, d); 0 for RoPE and absolute positions.
    """
    scheme = _scheme(scheme)
    for name, v in (("num_layers", num_layers), ("num_heads", num_heads), ("head_dim", head_dim),
                    ("max_relative_position", max_relative_position), ("num_buckets", num_buckets),
                    ("distances", distances)):
        check_positive_int(name, v)
    b = _dtype_bytes(dtype)
    if scheme == "shaw":
        return num_layers * 2 * (2 * max_relative_position + 1) * head_dim * b
    if scheme == "t5":
        return num_buckets * num_heads * b
    if scheme == "alibi":
        return num_heads * 4  # float32 slopes, whatever the model's dtype
    if scheme == "transformer_xl":
        return num_layers * num_heads * (distances + 2) * head_dim * b
    return 0


def bytes_per_token(scheme: str, *, context: int, batch: int = 1, num_layers: int, num_heads: int,
                    head_dim: int, d_model: int | None = None, dtype=torch.float32,
                    max_relative_position: int = 8, num_buckets: int = 32) -> dict[str, float]:
    """Bytes per token of context for one sequence, by kind, with everything the cache needs.

    The cache's bytes per token, plus the shared position state divided by
    ``context * batch`` (Transformer-XL's rows cover ``context`` distances).
    ``d_model`` defaults to ``num_heads * head_dim``.
    """
    context = check_positive_int("context", context)
    batch = check_positive_int("batch", batch)
    d_model = num_heads * head_dim if d_model is None else d_model
    cache = cache_bytes(scheme, tokens=context, batch=1, num_layers=num_layers, num_heads=num_heads,
                        head_dim=head_dim, d_model=d_model, dtype=dtype)
    shared = shared_position_bytes(scheme, num_layers=num_layers, num_heads=num_heads, head_dim=head_dim,
                                   dtype=dtype, max_relative_position=max_relative_position,
                                   num_buckets=num_buckets, distances=context)
    out = {kind: n / context for kind, n in cache.items()}
    out["position tables"] = shared / (context * batch)
    return out


def step_work(scheme: str, *, context: int, num_heads: int, head_dim: int, d_model: int | None = None,
              max_relative_position: int = 8) -> dict[str, object]:
    """What one decode step recomputes for positions, per layer: a description and multiply-adds.

    ``scheme`` may be "rope_rotated" or "rope_unrotated" (the two cache layouts). Counts
    leave out the q . k and p . v over the ``context`` kept keys that every scheme does.
    A rotation costs 2 multiply-adds per dimension; a bias lookup or slope product counts 1.
    """
    if scheme == "rope":
        raise ValueError("scheme 'rope' must say its cache layout: 'rope_rotated' or 'rope_unrotated'")
    base = _scheme(scheme)
    context = check_positive_int("context", context)
    H, d = check_positive_int("num_heads", num_heads), check_positive_int("head_dim", head_dim)
    d_model = H * d if d_model is None else check_positive_int("d_model", d_model)
    k = check_positive_int("max_relative_position", max_relative_position)
    if base == "absolute":
        return dict(what="nothing (the new token's position vector is added once, at the input)", madds=0)
    if base == "alibi":
        return dict(what="slope x distance for every kept key", madds=H * context)
    if base == "t5":
        return dict(what="the bucket of every kept key's offset, then a table lookup", madds=H * context)
    if base == "shaw":
        return dict(what="q . a^K for the 2k + 1 rows, the value term over the same rows",
                    madds=2 * H * (2 * k + 1) * d)
    if scheme == "rope_rotated":
        return dict(what="rotate the new query and the new key, once", madds=2 * 2 * H * d)
    if scheme == "rope_unrotated":
        return dict(what="rotate the new query and every kept key", madds=2 * H * d * (context + 1))
    return dict(what="keys and values re-projected from the memory; (q + v) . r for every distance",
                madds=2 * context * d_model * H * d + H * d * context)
