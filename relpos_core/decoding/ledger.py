"""What each scheme stores per cached token, and what it recomputes at every decode step.

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb).

Nothing here is written per scheme: every count is read off the decoder's own position
terms, built on the meta device (shapes only, no memory) for the sizes asked:

* ``cache_bytes``: the cache itself, which grows with the kept tokens K and the batch B:
  keys and values (B, H, K, d) per layer, for every scheme, plus one int64 position
  per kept token (the eviction frames need it);
* ``shared_position_bytes``: the position state a decoding run holds whatever the batch:
  the tensors of the layers' position terms, each counted once (T5's one table serves
  every layer; Transformer-XL's rows W_kR R cover the D distances the cache can reach);
* ``step_work``: the multiply-adds a decode step spends on positions per layer, beyond
  the q . k and p . v that every scheme computes over the kept tokens, from the pieces
  of the term (``relpos_core.terms``).

``bytes_per_token`` divides the first two by the context length (and the second by B):
the curve of the figure in chapters/08_the_kv_cache.ipynb. Sign conventions: not applicable
(sizes only).
"""
from __future__ import annotations

import torch

from relpos_core import schemes
from relpos_core._validate import check_choice, check_int, check_positive_int
from relpos_core.budget import dtype_size
from relpos_core.cache import POSITION_BYTES, ROPE_LAYOUTS

__all__ = ["decoder_terms", "cache_bytes", "shared_position_bytes", "bytes_per_token", "step_work",
           "term_state_bytes", "layouts"]


def _dtype(dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
    return dtype


def _decoded(scheme: str) -> schemes.Entry:
    entry = schemes.lookup(scheme)
    if entry.scheme.not_decoded:
        raise ValueError(f"scheme {scheme!r} is not decoded: {entry.scheme.not_decoded}")
    return entry


def layouts(scheme: str) -> list[str | None]:
    """The cache layouts a scheme decodes with: ["rotated", "unrotated"] for RoPE, ["unrotated"]
    where a rotated key would not stay right (xPos), [None] for schemes without a rotation."""
    term = decoder_terms(scheme, num_layers=1, num_heads=2, head_dim=8, context=2, dtype=torch.float32)[0]
    if term is None or term.rotary is None:
        return [None]
    return list(ROPE_LAYOUTS) if term.rotary.rotated_keys_cacheable else ["unrotated"]


def decoder_terms(scheme: str, *, num_layers: int, num_heads: int, head_dim: int, context: int,
                  dtype=torch.float32, d_model: int | None = None, position: dict | None = None) -> list:
    """The position terms of a decoder of these sizes (one per layer, None for no term), on the meta device.

    ``context``: the longest cache it is built for (Transformer-XL's rows, absolute tables).
    """
    from relpos_core.models import Attention, TransformerConfig

    _decoded(scheme)
    for name, value in (("num_layers", num_layers), ("num_heads", num_heads), ("head_dim", head_dim),
                        ("context", context)):
        check_positive_int(name, value)
    dtype = _dtype(dtype)
    config = TransformerConfig(scheme, position=dict(position or {}), vocab_size=1, d_model=d_model or num_heads * head_dim,
                               num_heads=num_heads, head_dim=head_dim, num_layers=num_layers, max_positions=context)
    with torch.device("meta"):
        module = config.entry.scheme.module(config.shape, config.options).to(dtype)
        attention = Attention(config).to(dtype)
    return [module.term(layer, attention) for layer in range(num_layers)]


def term_state_bytes(terms) -> int:
    """Bytes of the tensors the terms hold, each storage counted once (a table shared by layers once)."""
    seen = {}
    for term in terms:
        if term is None:
            continue
        for _, t in term.tensors():
            base = t if t._base is None else t._base
            seen[id(base)] = base.numel() * base.element_size()
    return sum(seen.values())


def cache_bytes(scheme: str, *, tokens: int, batch: int, num_layers: int, num_heads: int, head_dim: int,
                dtype=torch.float32) -> dict[str, int]:
    """Bytes of a cache holding ``tokens`` kept tokens, by kind (keys, values, positions).

    Every scheme caches keys and values (B, H, K, d) per layer, and one int64 position per
    kept token.
    """
    _decoded(scheme)
    tokens = check_int("tokens", tokens, min_value=0)
    for name, v in (("batch", batch), ("num_layers", num_layers), ("num_heads", num_heads), ("head_dim", head_dim)):
        check_positive_int(name, v)
    per_layer = batch * num_heads * tokens * head_dim * dtype_size(_dtype(dtype))  # one (B, H, K, d) tensor
    return dict(keys=num_layers * per_layer, values=num_layers * per_layer, positions=POSITION_BYTES * tokens)


def shared_position_bytes(scheme: str, *, num_layers: int, num_heads: int, head_dim: int, context: int,
                          dtype=torch.float32, d_model: int | None = None, position: dict | None = None) -> int:
    """Bytes of the position state a decoding run holds for the whole batch (``term_state_bytes``)."""
    return term_state_bytes(decoder_terms(scheme, num_layers=num_layers, num_heads=num_heads, head_dim=head_dim,
                                          context=context, dtype=dtype, d_model=d_model, position=position))


def bytes_per_token(scheme: str, *, context: int, batch: int = 1, num_layers: int, num_heads: int, head_dim: int,
                    dtype=torch.float32, d_model: int | None = None, position: dict | None = None) -> dict[str, float]:
    """Bytes per token of context for one sequence, by kind, with everything the cache needs.

    The cache's bytes per token, plus the shared position state divided by
    ``context * batch`` (Transformer-XL's rows cover ``context`` distances).
    """
    context = check_positive_int("context", context)
    batch = check_positive_int("batch", batch)
    cache = cache_bytes(scheme, tokens=context, batch=1, num_layers=num_layers, num_heads=num_heads,
                        head_dim=head_dim, dtype=dtype)
    shared = shared_position_bytes(scheme, num_layers=num_layers, num_heads=num_heads, head_dim=head_dim,
                                   context=context, dtype=dtype, d_model=d_model, position=position)
    out = {kind: n / context for kind, n in cache.items()}
    out["position tables"] = shared / (context * batch)
    return out


def step_work(scheme: str, *, context: int, num_heads: int, head_dim: int, rope_layout: str | None = None,
              position: dict | None = None) -> dict[str, object]:
    """What one decode step computes for positions, per layer: a description and multiply-adds.

    Each piece of the scheme's term says what it computes (``Piece.decode_step_work``),
    beyond the q . k and p . v over the ``context`` kept keys that every scheme does. A
    rotation costs 2 multiply-adds per dimension, a dot product of size d costs d; a bias
    lookup, a slope product or a kernel evaluation counts 1. A piece that does not say
    raises, naming it.
    """
    entry = _decoded(scheme)
    context = check_positive_int("context", context)
    H, d = check_positive_int("num_heads", num_heads), check_positive_int("head_dim", head_dim)
    term = decoder_terms(scheme, num_layers=1, num_heads=H, head_dim=d, context=context, position=position)[0]
    if term is None:
        what = ("nothing (the position vector was added to the token once)" if entry.scheme.positions_in_tokens
                else "nothing")
        return dict(what=what, madds=0)
    layout = check_choice("rope_layout", rope_layout, layouts(scheme)) if term.rotary is not None else None
    parts, madds = [], 0
    for piece in term.all_pieces:
        what, n = piece.decode_step_work(context, H, d, layout)
        parts.append(what)
        madds += n
    return dict(what="; ".join(parts), madds=madds)
