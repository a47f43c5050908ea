"""Argument checks shared by every public function.

Each check raises ``ValueError`` naming the parameter and its valid range *before*
any large allocation, so bad input never turns into a confusing shape error or an
out-of-memory crash deep inside a kernel.
"""
from __future__ import annotations

import numbers

import torch

__all__ = [
    "check_int",
    "check_positive_int",
    "check_choice",
    "check_tensor",
    "check_same_shape",
]


def check_int(name: str, value, *, min_value: int | None = None, max_value: int | None = None) -> int:
    """Return ``value`` as int if it is an integer in [min_value, max_value], else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(
            f"{name} must be an integer{_range_text(min_value, max_value)}, "
            f"got {value!r} of type {type(value).__name__}"
        )
    value = int(value)
    if (min_value is not None and value < min_value) or (max_value is not None and value > max_value):
        raise ValueError(f"{name} must be an integer{_range_text(min_value, max_value)}, got {value}")
    return value


def check_positive_int(name: str, value, *, max_value: int | None = None) -> int:
    """An integer >= 1 (sequence lengths, head counts, head sizes, clip distances)."""
    return check_int(name, value, min_value=1, max_value=max_value)


def check_choice(name: str, value, choices) -> object:
    """``value`` must be one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_tensor(
    name: str,
    tensor,
    *,
    ndim: int | tuple[int, ...] | None = None,
    floating: bool | None = None,
    dtype: torch.dtype | tuple[torch.dtype, ...] | None = None,
    shape: dict[int, int] | None = None,
) -> torch.Tensor:
    """Check a tensor's rank, dtype family and selected dimension sizes.

    ``shape`` maps a dimension index to the size it must have, e.g. ``{-1: head_dim}``.
    """
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if tensor.dim() not in allowed:
            want = " or ".join(str(n) for n in allowed)
            raise ValueError(f"{name} must have rank {want}, got rank {tensor.dim()} with shape {tuple(tensor.shape)}")
    if floating is True and not tensor.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor (float16, bfloat16, float32, float64), got {tensor.dtype}")
    if floating is False and tensor.is_floating_point():
        raise ValueError(f"{name} must be an integer tensor, got {tensor.dtype}")
    if dtype is not None:
        allowed_dtypes = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        if tensor.dtype not in allowed_dtypes:
            raise ValueError(f"{name} must have dtype in {[str(d) for d in allowed_dtypes]}, got {tensor.dtype}")
    for dim, size in (shape or {}).items():
        if tensor.dim() <= (dim if dim >= 0 else -dim - 1) or tensor.shape[dim] != size:
            raise ValueError(f"{name} must have size {size} in dimension {dim}, got shape {tuple(tensor.shape)}")
    return tensor


def check_same_shape(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def _range_text(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" in [{lo}, {hi}]"
    if lo is not None:
        return f" >= {lo}"
    if hi is not None:
        return f" <= {hi}"
    return ""
