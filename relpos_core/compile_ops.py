"""Custom ops that let ``torch.compile(fullgraph=True)`` build and run a call of ``rp.attend`` on every path.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). Two ``torch.library.custom_op``s,
opaque to inductor, so it can neither fuse them away nor into their neighbours.

* ``flex_inputs(*tensors)``: what a FlexAttention ``score_mod`` reads (T5's per-offset bias,
  a row table, the 0-d shift of the offsets) enters the kernel as a buffer of its own. On CPU,
  torch 2.13's flex template accepts no input that inductor computes inside the same graph: a
  whole-function compile fails with ``LoweringException: NoValidChoicesError`` ("Cannot Append
  Choice: Pointwise"). Under ``torch.compile`` on CPU each tensor is copied once by the opaque
  ``relpos::own_buffer`` (tables of O(H (Lq + Lk)) or O(B H L R) numbers on the gather form;
  the naive form's per-pair tables, O(H Lq Lk), are copied too); outside a compile, and on
  CUDA, the tensors pass unchanged.
* ``computed_once(t)``: a small table read many times stays one buffer under ``torch.compile``:
  the bias per offset the dense gather form reads per pair (T5's or Kerple's: H (Lq + Lk - 1)
  numbers), a rotation's cos and sin per position (L r / 2 numbers, read by every head).
  Inductor would otherwise fuse its computation (T5's float32 log buckets, RoPE's float64
  cos and sin) into the larger loop that reads it, and compute it once per pair or per head:
  T5 gather/sdpa ran 1.9x slower compiled than eager. The same opaque copy, on every device.
* ``refuse_non_finite(flags, names)``: the finiteness check of ``rp.attend`` inside a compiled
  graph. Eagerly ``attend`` reads the flags back with ``tolist`` (a graph break); compiled, the
  flags go to ``relpos::refuse_non_finite``, registered as an ordered side effect (never
  dead-code eliminated, never reordered), which reads them and raises the same ``ValueError``
  naming the first tensor that holds NaN or inf. Nothing non-finite passes silently.
* ``warn(message, category)``: ``warnings.warn``, which inside a compiled graph would break it;
  under ``torch.compile`` the warning is given once, when the call is traced
  (``torch.compiler.assume_constant_result`` runs it then): FlexAttention's CPU backward
  fallback says what it did, compiled or not.
"""
from __future__ import annotations

import warnings

import torch
from torch._library.effects import EffectType

__all__ = ["flex_inputs", "computed_once", "refuse_non_finite", "non_finite_message", "warn"]


@torch.library.custom_op("relpos::own_buffer", mutates_args=())
def _own_buffer(t: torch.Tensor) -> torch.Tensor:
    return t.clone()  # an op may not return its input: one copy


@_own_buffer.register_fake
def _(t):
    return torch.empty_like(t)


_own_buffer.register_autograd(lambda ctx, grad: grad)  # an identity: the gradient passes through


def flex_inputs(*tensors: torch.Tensor):
    """The tensors a score_mod reads, each a buffer of its own under ``torch.compile`` on CPU (one tensor:
    returned alone; several: a tuple)."""
    if torch.compiler.is_compiling():
        tensors = tuple(_own_buffer(t) if t.device.type == "cpu" else t for t in tensors)
    return tensors[0] if len(tensors) == 1 else tensors


def computed_once(t: torch.Tensor) -> torch.Tensor:
    """``t``, kept one buffer under ``torch.compile`` (never recomputed inside the loop that reads it)."""
    return _own_buffer(t) if torch.compiler.is_compiling() else t


def non_finite_message(name: str) -> str:
    """What ``rp.attend`` says, compiled or not, when ``name`` holds NaN or inf."""
    return (f"{name} holds non-finite values (NaN or inf); pass check_finite=False to let "
            f"them through (then they reach the output as each kernel propagates them)")


def _raise_first_non_finite(flags: torch.Tensor, names: list[str]) -> None:
    for name, good in zip(names, flags.tolist()):  # one device read for all of them
        if not good:
            raise ValueError(non_finite_message(name))


@torch.library.custom_op("relpos::refuse_non_finite", mutates_args=())
def _refuse_non_finite(flags: torch.Tensor, names: str) -> None:
    _raise_first_non_finite(flags, names.split("\n"))  # an op's schema takes one str, not a list of them


@_refuse_non_finite.register_fake
def _(flags, names):
    return None


_refuse_non_finite.register_effect(EffectType.ORDERED)


def refuse_non_finite(flags: torch.Tensor, names: list[str]) -> None:
    """Raise ``ValueError`` naming the first ``names[i]`` whose ``flags[i]`` (bool, one per tensor) is False.

    One device read. Inside a compiled graph: the opaque op with an ordered side effect, so the graph neither
    breaks nor drops the check; eagerly the same read without the dispatcher's cost.
    """
    if torch.compiler.is_compiling():
        _refuse_non_finite(flags, "\n".join(names))
    else:
        _raise_first_non_finite(flags, names)


@torch.compiler.assume_constant_result
def _warn_when_traced(message: str, category: type) -> bool:
    warnings.warn(message, category, stacklevel=2)
    return True


def warn(message: str, category: type = UserWarning, stacklevel: int = 2) -> None:
    """``warnings.warn(message, category)``; under ``torch.compile`` once per trace, without a graph break."""
    if torch.compiler.is_compiling():
        _warn_when_traced(message, category)
    else:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
