"""Hugging Face's hybrid-layer models as relpos layer patterns: which layer rotates, with which
base, on which window.

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb): what a window layer keeps.

Each function reads a Hugging Face config (an object with the attributes named below; no
import of transformers here) and returns one layer string per layer, in the spelling of
``relpos_core.layers.LayerSpec.parse`` (``"rope@base=10000.0,window=512"``, ``"none"``),
so ``TransformerConfig(layers=...)`` builds the same pattern. What the relpos model does
not reproduce is refused with its reason rather than dropped:

* SmolLM3 (Hugging Face ``SmolLM3Attention``): ``no_rope_layers[i] == 1`` means layer i
  *uses* RoPE (rotate-half pairs); ``use_sliding_window`` with ``layer_types`` gives its
  sliding layers ``sliding_window``.
* Gemma 3 (``Gemma3Attention``; Gemma Team 2025): ``layer_types`` (or
  ``sliding_window_pattern``) marks the local layers: RoPE with
  ``rope_parameters["sliding_attention"]["rope_theta"]`` (``rope_local_base_freq``, 10k)
  on ``sliding_window``; the global layers RoPE with the full-attention base (1M).
  Its q/k RMS norms and ``query_pre_attn_scalar`` are not position: the parity test applies
  them outside the position term. Logit soft-capping is refused.
* Cohere 2 / Command A (``Cohere2Attention``; Cohere 2025, Yang et al. 2025): the sliding
  layers rotate (interleaved pairs) on ``sliding_window``, the full layers have no position.
* Llama 4 text (``Llama4TextAttention``; Meta 2025): ``no_rope_layers[i] == 1`` means layer
  i uses RoPE (interleaved pairs, complex multiplication); the others no position. Its
  chunked attention (``attention_chunk_size``), length-dependent temperature
  (``attn_temperature_tuning``) and L2 q/k norm (``use_qk_norm``) are refused here:
  turn them off in the config to compare.
"""
from __future__ import annotations

__all__ = ["smollm3_layers", "gemma3_layers", "cohere2_layers", "llama4_layers", "LAYERS_FROM_CONFIG"]


def _rope(base: float, *, pairing: str = "rotate_half", window: int | None = None) -> str:
    items = [f"base={float(base)}"] + ([] if pairing == "rotate_half" else [f"pairing={pairing}"])
    return "rope@" + ",".join(items + ([] if window is None else [f"window={int(window)}"]))


def _theta(params: dict, model: str) -> float:
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"{model}: rope_type {params['rope_type']!r} is not mapped here (only 'default')")
    return float(params["rope_theta"])


def smollm3_layers(config) -> tuple[str, ...]:
    """SmolLM3: RoPE where ``no_rope_layers[i]`` is 1, no position elsewhere."""
    theta = _theta(config.rope_parameters, "SmolLM3")
    out = []
    for i, use_rope in enumerate(config.no_rope_layers[:config.num_hidden_layers]):
        sliding = config.use_sliding_window and config.layer_types[i] == "sliding_attention"
        window = config.sliding_window if sliding else None
        if use_rope:
            out.append(_rope(theta, window=window))
        else:
            out.append("none" if window is None else f"none@window={int(window)}")
    return tuple(out)


def gemma3_layers(config) -> tuple[str, ...]:
    """Gemma 3: local RoPE layers (local base, sliding window) and global RoPE layers (global base)."""
    if getattr(config, "attn_logit_softcapping", None) is not None:
        raise ValueError("Gemma 3: attn_logit_softcapping is not a position scheme and is not reproduced: "
                         "set it to None to compare")
    local = _theta(config.rope_parameters["sliding_attention"], "Gemma 3")
    full = _theta(config.rope_parameters["full_attention"], "Gemma 3")
    return tuple(_rope(local, window=config.sliding_window) if kind == "sliding_attention" else _rope(full)
                 for kind in config.layer_types[:config.num_hidden_layers])


def cohere2_layers(config) -> tuple[str, ...]:
    """Cohere 2: sliding layers rotate (interleaved) on the window, full layers carry no position."""
    theta = _theta(config.rope_parameters, "Cohere 2")
    return tuple(_rope(theta, pairing="interleaved", window=config.sliding_window)
                 if kind == "sliding_attention" else "none"
                 for kind in config.layer_types[:config.num_hidden_layers])


def llama4_layers(config) -> tuple[str, ...]:
    """Llama 4 text: RoPE (interleaved) where ``no_rope_layers[i]`` is 1, no position elsewhere."""
    for name, why in (("attn_temperature_tuning", "a length-dependent temperature on the NoPE layers"),
                      ("use_qk_norm", "an L2 norm of q and k after the rotation")):
        if getattr(config, name, False):
            raise ValueError(f"Llama 4: {name}=True ({why}) is not reproduced here: set it to False to compare")
    if "chunked_attention" in config.layer_types:
        raise ValueError("Llama 4: chunked attention (attention_chunk_size) is a block mask, not a sliding "
                         "window: set attention_chunk_size=None to compare")
    theta = _theta(config.rope_parameters, "Llama 4")
    return tuple(_rope(theta, pairing="interleaved") if use_rope else "none"
                 for use_rope in config.no_rope_layers[:config.num_hidden_layers])


#: Hugging Face ``config.model_type`` -> the function that reads its layer pattern
LAYERS_FROM_CONFIG = {"smollm3": smollm3_layers, "gemma3_text": gemma3_layers, "cohere2": cohere2_layers,
                      "llama4_text": llama4_layers}
