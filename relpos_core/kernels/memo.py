"""Work done once per shape: the keys and small caches that ``rp.attend``, the rotation and the model share.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). A training step calls
``rp.attend`` once per layer with the same shapes every time; what follows from the shapes
alone (the checks, the positions, the refusals, the byte count, RoPE's cos and sin) need
not be derived again on every call. Three caches use the keys built here:

* ``rp.attend``'s call plans (``relpos_core.attend``): keyed by the shapes, dtypes and
  devices of q, k, v and of the term's tensors (``signature``), and every argument;
* RoPE's cos / sin tables (``relpos_core.kernels.rotary``): keyed by the rotation
  (``signature(..., identity=True)``: a table of a scaling is read by value, so it is
  identified by its storage and version counter), the first position and the length;
* the dense SDPA bias of one model forward (``shared_biases``): layers that share a
  table (T5's one table for the stack, ALiBi's slopes) get the bias computed once, as
  Hugging Face's T5 computes its ``position_bias`` once per stack.

Nothing is cached while ``torch.compile`` traces (``bypassed``): the graph holds the work
itself. A cached tensor is made in the grad and inference mode its key records, so a
table made under ``torch.inference_mode`` is never handed to a call that records
gradients.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
import types
from collections import OrderedDict

import torch

__all__ = ["ENABLED", "Unhashable", "signature", "tensor_key", "LRU", "bypassed", "mode_key", "shared_biases",
           "shared_bias_memo"]


class Unhashable(Exception):
    """An object of a term that no key can stand for: the call is then not cached."""


_DEPTH = 16
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def tensor_key(t: torch.Tensor, identity: bool) -> tuple:
    """What a cache reads of a tensor: its shape, dtype, device and whether it requires grad; with
    ``identity`` also its storage, strides, offset and version counter (bumped by every in-place write)."""
    meta = (tuple(t.shape), t.dtype, t.device, t.requires_grad)
    if not identity:
        return meta
    if t.is_meta:
        raise Unhashable("a meta tensor holds no values")
    if t.is_inference():  # no version counter: an in-place write could not be seen
        raise Unhashable("an inference tensor")
    return meta + (t.data_ptr(), t.stride(), t._version)


def signature(obj, *, identity: bool = False, _depth: int = 0):
    """A hashable key for ``obj`` (a term, a piece, a rotation and what they hold).

    Dataclasses by their type and fields, tuples, lists and dicts by their items, tensors by
    ``tensor_key``, numbers and strings by value, functions by their code and the values they
    close over (so two terms built alike get one key), anything else hashable by itself (with
    ``identity``, a module is refused: its parameters could change under one key). Raises
    ``Unhashable`` for anything else, or past ``_DEPTH`` levels of nesting.
    """
    if _depth > _DEPTH:
        raise Unhashable("nested too deep")
    sub = dict(identity=identity, _depth=_depth + 1)
    if isinstance(obj, torch.Tensor):
        return ("tensor",) + tensor_key(obj, identity)
    if obj is None or isinstance(obj, (bool, int, float, str, torch.dtype, torch.device)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        return (cls,) + tuple(signature(getattr(obj, n), **sub) for n in _fields(cls))
    if isinstance(obj, (tuple, list)):
        return (type(obj),) + tuple(signature(x, **sub) for x in obj)
    if isinstance(obj, dict):
        return (dict,) + tuple((k, signature(v, **sub)) for k, v in obj.items())
    if isinstance(obj, types.FunctionType):  # by its code and what it closes over: a scheme builds its
        cells = tuple(signature(c.cell_contents, **sub) for c in obj.__closure__ or ())
        return ("function", obj.__code__, cells)  # lambdas afresh for each term, alike for alike terms
    if identity and isinstance(obj, torch.nn.Module):
        raise Unhashable(f"a module ({type(obj).__name__})")
    try:
        hash(obj)
    except TypeError:
        raise Unhashable(type(obj).__name__) from None
    return obj


class LRU:
    """A bounded mapping: the ``size`` most recently used keys."""

    def __init__(self, size: int):
        self.size = size
        self.data: OrderedDict = OrderedDict()

    def get(self, key):
        value = self.data.get(key)
        if value is not None:
            self.data.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)

    def clear(self) -> None:
        self.data.clear()

    def __len__(self) -> int:
        return len(self.data)


#: False switches every cache here off (each call checked and each table derived afresh: what the
#: per-call cost tool times as "before")
ENABLED = True


def bypassed() -> bool:
    """True while ``torch.compile`` traces, or with the caches switched off (``ENABLED``): they step aside."""
    return not ENABLED or torch.compiler.is_compiling()


def mode_key() -> tuple[bool, bool]:
    """(grad enabled, inference mode): a cached tensor is reused only in the mode it was made in."""
    return torch.is_grad_enabled(), torch.is_inference_mode_enabled()


_LOCAL = threading.local()


@contextlib.contextmanager
def shared_biases():
    """Inside the block (one model forward), a dense SDPA bias is computed once per term and positions
    and reused by every layer whose term holds the same tables (``shared_bias_memo``); nothing is kept
    after the block."""
    previous = getattr(_LOCAL, "memo", None)
    _LOCAL.memo = {}
    try:
        yield
    finally:
        _LOCAL.memo = previous


def shared_bias_memo() -> dict | None:
    """The active forward's bias memo (``shared_biases``), or None outside one or while compiling."""
    memo = getattr(_LOCAL, "memo", None)
    return None if memo is None or bypassed() else memo
