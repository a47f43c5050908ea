"""SDPA's backends: which exist where, and forcing one so a fallback fails loudly.

Book: "What it costs" (chapters/11_what_it_costs.ipynb) and "Failure modes"
(chapters/12_failure_modes.ipynb): a silent kernel fallback, where a dense
bias pushes ``scaled_dot_product_attention`` onto the slow, quadratic-memory math path.

Each backend runs as an aten op of its own (``relpos_core.measure.backends`` detects which
ran by reading them from the profiler):

| op name | backend |
|---|---|
| ``aten::_scaled_dot_product_flash_attention`` | ``flash`` (CUDA) |
| ``aten::_scaled_dot_product_flash_attention_for_cpu`` | ``flash`` (CPU) |
| ``aten::_scaled_dot_product_efficient_attention`` / ``_efficient_attention_forward`` | ``efficient`` |
| ``aten::_scaled_dot_product_cudnn_attention`` | ``cudnn`` |
| ``aten::_scaled_dot_product_attention_math`` | ``math`` |

On CPU two backends exist: ``flash`` (the fused ``_flash_attention_for_cpu`` kernel) and
``math``. Checked in torch 2.13 CPU: flash runs fp32, fp64, bf16 and fp16, with no mask,
``is_causal`` or a 2-D / 4-D float mask; a 3-D (H, L, L) mask or a mask that requires
grad sends the call to ``math``. ``efficient`` and ``cudnn`` are CUDA-only. On CUDA flash
takes fp16/bf16 and refuses any ``attn_mask``; cuDNN and memory-efficient accept a dense
mask (the H200 anchors: cuDNN is tried first there).
"""
from __future__ import annotations

import contextlib
import warnings

import torch

from relpos_core._validate import check_choice

__all__ = [
    "SDPA_BACKENDS",
    "BACKEND_OPS",
    "SdpaBackendError",
    "active_forced_backend",
    "available_sdpa_backends",
    "check_backend_supports",
    "force_sdpa_backend",
]

SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")  # not the kernel paths' backends (eager, sdpa, flex)

# most specific names first: "flash_attention_for_cpu" also contains "flash_attention"
BACKEND_OPS = (
    ("_scaled_dot_product_flash_attention_for_cpu", "flash"),
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_flash_attention_forward", "flash"),
    ("_scaled_dot_product_efficient_attention", "efficient"),
    ("_efficient_attention_forward", "efficient"),
    ("_scaled_dot_product_cudnn_attention", "cudnn"),
    ("_scaled_dot_product_attention_math", "math"),
)


class SdpaBackendError(ValueError):
    """A forced SDPA backend cannot run these inputs (raised instead of a silent fallback)."""


_FORCED: list[str] = []


def active_forced_backend() -> str | None:
    """The backend forced by the innermost ``force_sdpa_backend`` block, or None."""
    return _FORCED[-1] if _FORCED else None


def available_sdpa_backends(device="cpu") -> tuple[str, ...]:
    """Backends this build can run on ``device`` ("cpu" or "cuda")."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return ("flash", "math")
    if dev.type == "cuda":
        have = ["math"]
        if torch.backends.cuda.flash_sdp_enabled():
            have.insert(0, "flash")
        if torch.backends.cuda.mem_efficient_sdp_enabled():
            have.insert(0, "efficient")
        if getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: False)():
            have.insert(0, "cudnn")
        return tuple(have)
    raise ValueError(f"device must be cpu or cuda, got {dev}")


def _sdp_backend(name: str):
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[name]


def check_backend_supports(backend: str, *, device, dtype: torch.dtype, mask_ndim: int | None = None,
                           mask_requires_grad: bool = False) -> None:
    """Raise ``SdpaBackendError`` if ``backend`` is known not to run these inputs.

    Checked before anything is allocated; the forced call is still guarded at run time
    (``force_sdpa_backend`` turns a "No available kernel" into the same error).
    """
    check_choice("backend", backend, SDPA_BACKENDS)
    dev = torch.device(device)
    dt = str(dtype).replace("torch.", "")
    if dev.type == "cpu":
        if backend in ("efficient", "cudnn"):
            raise SdpaBackendError(
                f"backend {backend!r} does not exist on CPU (CPU has 'flash', the fused "
                f"_flash_attention_for_cpu kernel, and 'math'); force 'flash' or 'math', or run on CUDA")
        if backend == "flash" and mask_ndim is not None and mask_ndim not in (2, 4):
            raise SdpaBackendError(
                f"backend 'flash' on CPU takes a 2-D (Lq, Lk) or 4-D (B|1, H|1, Lq, Lk) attn_mask, got a "
                f"{mask_ndim}-D mask; pass the bias as 4-D (1, H, Lq, Lk) or force 'math'")
        if backend == "flash" and mask_requires_grad:
            raise SdpaBackendError(
                "backend 'flash' on CPU cannot take an attn_mask that requires grad (the dispatcher "
                "uses 'math' then); force 'math', or detach the bias")
        return
    if dev.type == "cuda":
        if backend in ("flash", "cudnn") and dtype not in (torch.float16, torch.bfloat16):
            raise SdpaBackendError(
                f"backend {backend!r} on CUDA takes float16 or bfloat16, got {dt}; cast q, k, v "
                f"to bfloat16, or force 'efficient' (fp32) or 'math' (any dtype)")
        if backend == "efficient" and dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise SdpaBackendError(
                f"backend 'efficient' takes float16, bfloat16 or float32, got {dt}; force 'math'")
        if backend == "flash" and mask_ndim is not None:
            raise SdpaBackendError(
                "backend 'flash' refuses any attn_mask (a dense bias cannot run on it); force "
                "'cudnn' or 'efficient' for a dense bias, or move the bias into a FlexAttention score_mod")
        return
    raise SdpaBackendError(f"device must be cpu or cuda, got {dev}")


@contextlib.contextmanager
def force_sdpa_backend(name: str):
    """Run SDPA calls inside the block on backend ``name`` only, failing loudly otherwise.

    Wraps ``torch.nn.attention.sdpa_kernel([backend])``. If the backend cannot run a call
    inside the block, PyTorch's "No available kernel" RuntimeError (whose reasons are
    only printed as warnings) becomes an ``SdpaBackendError`` (a ValueError) that names
    the backend, the reasons and what to do instead. The relpos kernel paths also check
    their inputs against the forced backend before allocating (``check_backend_supports``).
    """
    check_choice("name", name, SDPA_BACKENDS)
    from torch.nn.attention import sdpa_kernel

    _FORCED.append(name)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([_sdp_backend(name)]):
                    yield name
            except RuntimeError as e:
                text = str(e)
                if "No available kernel" in text or "No viable backend" in text:
                    reasons = "; ".join(str(w.message).split(" (Triggered")[0] for w in caught
                                        if "kernel not used" in str(w.message) or "attn mask" in str(w.message))
                    raise SdpaBackendError(
                        f"forced SDPA backend {name!r} cannot run this call"
                        f"{': ' + reasons if reasons else ''} ({text.strip()}). Force another backend "
                        f"(available here: {list(available_sdpa_backends('cuda' if torch.cuda.is_available() else 'cpu'))}), "
                        f"change the inputs, or use the FlexAttention path") from e
                raise
        for w in caught:  # re-emit warnings that were not about the backend choice
            if "kernel not used" not in str(w.message):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    finally:
        _FORCED.pop()
