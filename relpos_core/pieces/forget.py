"""A forget gate on the logits (forgetting attention): the cumulative log of data-dependent gates.

Paper: Zhixuan Lin, Evgenii Nikishin, Xu Owen He and Aaron Courville (2025), "Forgetting
Transformer: Softmax Attention with a Forget Gate", ICLR 2025, arXiv:2503.02130.
Book: "What it costs" (chapters/11_what_it_costs.ipynb), where its paths are tabulated.

Per head h and key t, a gate f_t = sigmoid(w_h . k_t + b_h) in (0, 1), and for a causal
query i and a visible key j

    logit_ij += sum over keys l with pos_j < pos_l <= pos_i of log f_l      # unscaled
             = C(pos_i) - C(pos_j),   C(p) = sum over keys l with pos_l <= p of log f_l

a data-dependent ALiBi: every token between the key and the query (the query's own
included) multiplies the key's weight by its gate. Only O(L) numbers per head are formed
(the cumulative sums at the keys and at the queries), never a per-offset table: the bias
depends on the gates of the tokens in between, not on the offset. The dense backends
compute the (B, H, Lq, Lk) difference (form "naive"); FlexAttention reads the two sums per
pair inside its kernel (form "naive", the only one). Keys are summed in the order of their
positions; after a KV cache's eviction the sums run over the kept keys only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from relpos_core._validate import check_tensor
from relpos_core.compile_ops import flex_inputs
from relpos_core.pieces.base import ALL_BACKENDS, Alloc, Piece

__all__ = ["ForgetGate"]

F32 = torch.float32
I64 = torch.int64


@dataclass(frozen=True)
class ForgetGate(Piece):
    """logit_ij += sum_{pos_j < pos_l <= pos_i} log sigmoid(w_h . k_l + b_h) (module docstring).

    ``weight`` (H, d) and ``bias`` (H,): the gate of head h reads that head's key.
    """

    weight: torch.Tensor
    bias: torch.Tensor
    name: str = "forget gate"
    kind: ClassVar[str] = "forget_gate"
    stage: ClassVar[str] = "scalar"
    scaled: ClassVar[bool] = False
    batched: ClassVar[bool] = True
    offset_only: ClassVar[bool] = False
    computes: ClassVar = {"naive": ALL_BACKENDS}

    def __post_init__(self):
        check_tensor("weight", self.weight, ndim=2, floating=True)
        check_tensor("bias", self.bias, ndim=1, floating=True, shape={0: self.weight.shape[0]})

    def refusal(self, form, backend):
        return (f"the {self.name}'s bias is a sum of log-gates of the tokens between the key and the query "
                f"(data-dependent), not a function of the offset, so no per-offset table exists: use form 'naive'")

    def check(self, num_heads, head_dim):
        if self.weight.shape != (num_heads, head_dim):
            raise ValueError(f"the term's {self.name} weight has shape {tuple(self.weight.shape)}, q needs "
                             f"(H, d) = ({num_heads}, {head_dim})")

    @property
    def heads(self):
        return self.weight.shape[0]

    def tensors(self):
        return [(f"{self.name} weight", self.weight), (f"{self.name} bias", self.bias)]

    def cumulative(self, k: torch.Tensor, pos, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(C at every query (B, H, Lq), C at every key (B, H, Lk)), in ``dtype``."""
        w, b = self.weight.to(dtype), self.bias.to(dtype)
        log_f = F.logsigmoid(torch.einsum("bhld,hd->bhl", k.to(dtype), w) + b[None, :, None])  # (B, H, Lk)
        if pos.key_start is not None:  # keys in position order
            keys, c_sorted = pos.key, log_f.cumsum(-1)  # (Lk,), (B, H, Lk)
            c_key = c_sorted
        else:
            keys, order = torch.sort(pos.key)  # (Lk,)
            c_sorted = log_f.index_select(-1, order).cumsum(-1)  # (B, H, Lk) in position order
            c_key = torch.empty_like(c_sorted).index_copy_(-1, order, c_sorted)  # back to the keys' order
        seen = torch.searchsorted(keys, pos.query, right=True)  # (Lq,) keys at or before each query
        padded = F.pad(c_sorted, (1, 0))  # (B, H, Lk + 1): C before any key is 0
        return padded.index_select(-1, seen), c_key  # (B, H, Lq), (B, H, Lk)

    def logits(self, form, q, k, pos, dtype):
        c_query, c_key = self.cumulative(k, pos, dtype)
        return c_query[..., :, None] - c_key[..., None, :]  # (B, H, Lq, Lk)

    def score_mod(self, form, q, k, pos):
        c_query, c_key = self.cumulative(k, pos, F32)
        B, H, Lq = c_query.shape
        Lk = c_key.shape[-1]
        cq, ck = flex_inputs(c_query.reshape(B * H, Lq), c_key.reshape(B * H, Lk))  # 2-D tables (flex.py's rule)
        return lambda b, h, qi, ki, off: cq[b * H + h, qi] - ck[b * H + h, ki]

    def decode_step_work(self, context, num_heads, head_dim, layout=None):
        """Per head: the gate of every kept key and the new one (d + 2 each: the dot product, the bias, the
        log-sigmoid), their running sum (1 each) and the difference per kept key (1)."""
        return ("the log-gate of every kept key, their running sum and one difference per key",
                num_heads * (context + 1) * (head_dim + 2 + 1) + num_heads * context)

    def allocations(self, form, backend, s):
        """The log-gates and their cumulative sums at the keys and queries (the sort when keys are not in order
        is counted too), and on the dense backends the (B, H, Lq, Lk) difference."""
        dt = F32 if backend == "flex" else s.dtype
        keys = (s.B, s.H, s.Lk)
        out = [Alloc("key and gate weights cast", (s.B, s.H, s.Lk, s.d), dt),
               Alloc("w . k, + b, log-sigmoid and its buffer", (4, *keys), dt),
               Alloc("cumulative log-gates (sorted, in key order, padded)", (3, s.B, s.H, s.Lk + 1), dt),
               Alloc("keys sorted, their order, keys seen per query", (2 * s.Lk + s.Lq,), I64),
               Alloc("cumulative log-gates at the queries", (s.B, s.H, s.Lq), dt)]
        if backend != "flex":
            out.append(Alloc(f"{self.name}: the bias per pair", (s.B, s.H, s.Lq, s.Lk), s.dtype))
        return out
