"""Length-dependent attention scaling: each query's logits multiplied by a factor of its length or position.

Book: "RoPE and ALiBi" (chapters/06_rope_and_alibi.ipynb). Three published factors, one
piece (``LengthScaling``), applied to the query before any kernel (so every form and
backend, and the KV cache, computes it unchanged):

* ``log_length`` (Chiang and Cholak 2022, "Overcoming a Theoretical Limitation of
  Self-Attention", ACL 2022, section 5): the logits of a query that attends n keys times
  log n. Here normalised as log_{n_train}(n) = log n / log n_train, so a model trained at
  n_train keys sees factor 1 there (``train_length``; e = 2.718... gives the paper's log n);
* ``ssmax`` (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention",
  arXiv:2501.19399): softmax(s log n z), ``s`` a learned scalar per head, shape (H,);
* ``llama4`` (Llama 4's attention temperature, Hugging Face's ``Llama4TextAttention`` with
  ``attn_temperature_tuning``): the query at absolute position t times
  log(floor((t + 1) / floor_scale) + 1) attn_scale + 1.

n is the number of keys the query attends: with ``causal`` those at key positions <= its
own (inside a sliding window, only the window's; after a KV cache's eviction, the kept
ones), else every key (at least 1: a query that
sees no key gets output 0 anyway). t is the query's position as the call places it
(queries are the last Lq of the keys unless the call says otherwise), so a decode step is
scaled at its true position. Multiplying the query multiplies q . k and every term that
reads q: for RoPE and NoPE, whose logits are q . k alone, that is the logits.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from relpos_core._validate import check_choice, check_tensor
from relpos_core.pieces.base import ALL_BACKENDS, Alloc, Piece

__all__ = ["LengthScaling", "METHODS", "from_config", "example"]

METHODS = ("log_length", "ssmax", "llama4")
_FIELDS = {"log_length": ("train_length",), "ssmax": ("init",), "llama4": ("floor_scale", "attn_scale")}


def _positive(name: str, value, *, above: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not above < float(value) < math.inf:
        raise ValueError(f"{name} must be a finite number > {above:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class LengthScaling(Piece):
    """Each query's q multiplied by its length factor (module docstring); no logit term of its own.

    ``method``: "log_length" (``train_length`` > 1), "ssmax" (``s``: (H,) learned per head;
    ``init``: the value a model starts it at) or "llama4" (``floor_scale`` > 0,
    ``attn_scale`` > 0).
    """

    method: str
    train_length: float = 2048.0
    init: float = 1.0
    floor_scale: float = 8192.0
    attn_scale: float = 0.1
    s: torch.Tensor | None = None  # (H,) ssmax's per-head scale
    name: str = "length scaling"
    kind: ClassVar[str] = "length_scaling"
    stage: ClassVar[str] = "rotary"  # applied to q before any kernel, as the rotation is
    computes: ClassVar = {form: ALL_BACKENDS for form in ("none", "naive", "gather", "skew")}

    def __post_init__(self):
        check_choice("method", self.method, METHODS)
        object.__setattr__(self, "train_length", _positive("train_length", self.train_length, above=1.0))
        object.__setattr__(self, "init", _positive("init", self.init))
        object.__setattr__(self, "floor_scale", _positive("floor_scale", self.floor_scale))
        object.__setattr__(self, "attn_scale", _positive("attn_scale", self.attn_scale))
        if self.s is not None:
            if self.method != "ssmax":
                raise ValueError(f"s (a per-head scale) belongs to method 'ssmax', not {self.method!r}")
            check_tensor("s", self.s, ndim=1, floating=True)

    def with_scale(self, s: torch.Tensor) -> "LengthScaling":
        """The same scaling holding ssmax's per-head ``s`` (H,)."""
        return replace(self, s=s)

    def check(self, num_heads, head_dim):
        if self.method == "ssmax":
            if self.s is None:
                raise ValueError("length scaling 'ssmax' needs its per-head scale s (H,): give it with with_scale(s)")
            if self.s.shape[0] != num_heads:
                raise ValueError(f"the term's ssmax scale s has {self.s.shape[0]} heads, q has H = {num_heads}")

    @property
    def heads(self):
        return None if self.s is None else self.s.shape[0]

    def tensors(self):
        return [] if self.s is None else [("ssmax scale s", self.s)]

    def factors(self, pos, causal: bool) -> torch.Tensor:
        """The factor of every query: (Lq,) float64, or (H, Lq) in the dtype of s for ssmax."""
        if self.method == "llama4":
            t = pos.query.to(torch.float64)  # (Lq,) absolute positions
            return torch.log1p(torch.floor((t + 1.0) / self.floor_scale)) * self.attn_scale + 1.0  # (Lq,)
        if not causal:
            n = torch.full((pos.query_len,), float(pos.key_len), dtype=torch.float64, device=pos.query.device)
        elif pos.contiguous:  # key j visible to query i iff i + shift - W < j <= i + shift
            last = torch.arange(pos.query_len, device=pos.query.device) + pos.shift  # (Lq,)
            first = torch.zeros_like(last) if pos.window is None else (last - pos.window + 1).clamp(min=0)
            n = (last.clamp(max=pos.key_len - 1) - first + 1).clamp(min=0).to(torch.float64)  # (Lq,)
        else:
            keys = torch.sort(pos.key).values  # (Lk,)
            n = torch.searchsorted(keys, pos.query, right=True)  # (Lq,) keys at or before
            if pos.window is not None:  # minus those at or before query - W
                n = n - torch.searchsorted(keys, pos.query - pos.window, right=True)
            n = n.to(torch.float64)  # (Lq,)
        log_n = n.clamp(min=1.0).log()  # (Lq,)
        if self.method == "log_length":
            return log_n / math.log(self.train_length)  # (Lq,)
        return self.s[:, None] * log_n.to(self.s.dtype)  # (H, Lq)

    def prepare_query(self, q: torch.Tensor, pos, causal: bool) -> torch.Tensor:
        """q (B, H, Lq, d) times each query's factor: (B, H, Lq, d), fresh."""
        f = self.factors(pos, causal)  # (Lq,) or (H, Lq)
        f = f[:, None] if f.dim() == 1 else f[None, :, :, None]  # (Lq, 1) or (1, H, Lq, 1)
        return q * f.to(q.dtype)

    def decode_step_work(self, context, num_heads, head_dim, layout=None):
        """The new query's factor (a log: 1) and the product of its d entries per head."""
        return "scale the new query by its length factor", num_heads * head_dim + 1

    def allocations(self, form, backend, s):
        """The factors (float64, and cast) and the scaled query."""
        rows = s.H * s.Lq if self.method == "ssmax" else s.Lq
        return [Alloc("length factors", (3, rows), torch.float64), Alloc("factors cast", (rows,), s.dtype),
                Alloc("scaled query", (s.B, s.H, s.Lq, s.d), s.dtype)]


def from_config(config) -> LengthScaling | None:
    """None, a ``LengthScaling``, or a dict such as ``{"type": "llama4", "floor_scale": 8192, "attn_scale": 0.1}``
    (types ``log_length`` with ``train_length``, ``ssmax`` with ``init``, ``llama4``)."""
    if config is None or isinstance(config, LengthScaling):
        return config
    if not isinstance(config, dict):
        raise ValueError(f"length_scaling must be None, a LengthScaling or a dict with a 'type', got "
                         f"{type(config).__name__}")
    config = dict(config)
    method = check_choice("length_scaling type", config.pop("type", None), METHODS)
    unknown = sorted(set(config) - set(_FIELDS[method]))
    if unknown:
        raise ValueError(f"length_scaling {method!r} takes {list(_FIELDS[method])}, got unknown {unknown}")
    return LengthScaling(method, **config)


def example(config, num_heads: int, device=None, dtype=torch.float32) -> LengthScaling | None:
    """The scaling of ``config`` for an example term: ssmax's s (num_heads,) at its ``init``."""
    scaling = from_config(config)
    if scaling is None or scaling.method != "ssmax" or scaling.s is not None:
        return scaling
    dtype = torch.float32 if dtype is None else dtype
    if torch.device(device or "cpu").type == "meta":
        return scaling.with_scale(torch.empty(num_heads, device="meta", dtype=dtype))
    return scaling.with_scale(torch.full((num_heads,), scaling.init, device=device, dtype=dtype))
