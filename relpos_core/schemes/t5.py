"""T5 relative position buckets: one learned scalar per head and distance bucket.

Paper: Raffel, Shazeer, Roberts, Lee, Narang, Matena, Zhou, Li and Liu (2020),
"Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer",
JMLR 21. Book: "T5: one scalar per head, looked up by bucket"
(chapters/03_t5_buckets.ipynb); T5 in a KV cache in "The KV cache"
(chapters/08_the_kv_cache.ipynb).

Sign convention: ``key_minus_query``. The offset is ``j - i`` (key position minus query
position), exactly as Mesh TensorFlow and Hugging Face compute it, so a positive offset
means the key comes *after* the query.

* Bidirectional (encoder): half the buckets are for keys at or before the query, half for
  keys after it (offset > 0 adds ``num_buckets // 2``).
* Causal (decoder): all buckets look backwards; keys after the query share bucket 0 and
  are masked anyway.

Within a direction the first ``max_exact`` distances get a bucket each, then buckets grow
logarithmically up to ``max_distance``; every distance beyond that lands in the last
bucket. The bias table is (num_buckets, num_heads); in a model one table serves every
layer. The dense bias of a table and the Hugging Face-parity stack are test oracles:
``relpos_core/oracles/t5.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor
from relpos_core.schemes.declaration import Bench, Distance, Lab, LabRun, PositionModule, Scheme
from relpos_core.terms import PositionTerm, RowIndex, ScalarTable, example_tensor

__all__ = ["t5_relative_bucket", "position_term", "bucket_work_bytes", "T5Options", "T5Position", "SCHEME"]

INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64)


def _check_bucket_args(bidirectional, num_buckets, max_distance, *, num_buckets_name="num_buckets") -> int:
    """Validate the bucket parameters and return ``max_exact`` (distances with their own bucket)."""
    check_choice("bidirectional", bidirectional, (True, False))
    # max_exact must be >= 1: num_buckets // 4 (bidirectional) or num_buckets // 2 (causal)
    num_buckets = check_int(num_buckets_name, num_buckets, min_value=4 if bidirectional else 2)
    if bidirectional and num_buckets % 2:
        raise ValueError(
            f"{num_buckets_name} must be even when bidirectional=True (half the buckets per direction), "
            f"got {num_buckets}"
        )
    max_exact = num_buckets // 4 if bidirectional else num_buckets // 2
    check_int("max_distance", max_distance, min_value=max_exact + 1)  # must lie beyond the exact range
    return max_exact


def t5_relative_bucket(
    relative_position: torch.Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """Bucket id in [0, num_buckets) for each offset, same shape as the input (int64).

    Convention ``key_minus_query``: ``relative_position`` holds ``j - i``; positive means
    the key comes after the query. Bidirectional: offsets > 0 use the upper half of the
    buckets. Causal: offsets > 0 map to bucket 0 (they are masked).
    The log step is done in float32 exactly as Mesh TensorFlow / Hugging Face do, so the
    bucket boundaries agree with theirs bit for bit.
    """
    check_tensor("relative_position", relative_position, dtype=INT_DTYPES)
    max_exact = _check_bucket_args(bidirectional, num_buckets, max_distance)
    rel = relative_position.long()
    if bidirectional:
        num_buckets //= 2  # buckets per direction
        bucket = (rel > 0).long().mul_(num_buckets)  # keys after the query: upper half
        distance = rel.abs()
    else:
        bucket = None
        distance = rel.neg().clamp_(min=0)  # only look backwards
    # distances >= max_exact: logarithmically wider buckets up to max_distance. Same float32
    # operations in the same order as the paper's code (in place, to hold fewer [Lq, Lk] tensors)
    scaled = distance.clamp(min=max_exact).float().div_(max_exact).log_()
    scaled = scaled.div_(math.log(max_distance / max_exact)).mul_(num_buckets - max_exact)
    large = scaled.long().add_(max_exact)  # truncation, as in the paper's code
    del scaled
    large = large.clamp_(max=num_buckets - 1)  # everything beyond max_distance: the last bucket
    out = torch.where(distance < max_exact, distance, large)
    del large, distance
    return out if bucket is None else out.add_(bucket)


def bucket_work_bytes(n: int, bidirectional: bool) -> int:
    """Most bytes ``t5_relative_bucket`` holds at once on n offsets, beyond its int64 input.

    The upper-half offset (bidirectional), the distance, the clamped copy and its float32
    copy, then the truncated buckets and the scaled logs, then ``where``'s mask and result:
    the steps of ``t5_relative_bucket`` below, counted for the memory ledger.
    """
    bucket = 8 * n if bidirectional else 0
    return bucket + 8 * n + max(8 * n + 4 * n, 4 * n + 8 * n, 8 * n + n + 8 * n)


def position_term(table: torch.Tensor, *, bidirectional: bool = True, max_distance: int = 128) -> PositionTerm:
    """T5's position term for ``rp.attend``: one scalar per head and bucket, added unscaled.

    table: (num_buckets, H), Hugging Face's ``relative_attention_bias.weight`` (learnable
    or not; gradients reach it on the eager and SDPA backends, and through FlexAttention
    on CUDA). Convention ``key_minus_query``: pair (i, j) reads ``table[bucket(j - i), h]``.
    The term's scale is 1.0: T5 folds 1/sqrt(d) into its initialisation, so its logits
    are ``q . k + bias`` with no 1/sqrt(d) (chapters/03_t5_buckets.ipynb).
    """
    check_tensor("table", table, ndim=2, floating=True)
    num_buckets = table.shape[0]
    _check_bucket_args(bidirectional, num_buckets, max_distance, num_buckets_name="num_buckets (table.shape[0])")

    def bucket_of_offsets(offsets):
        return t5_relative_bucket(offsets, bidirectional=bidirectional, num_buckets=num_buckets,
                                  max_distance=max_distance)

    ids = RowIndex(num_buckets, bucket_of_offsets,
                   f"T5 bucket(j - i), {'bidirectional' if bidirectional else 'causal'}, {num_buckets} buckets, "
                   f"max_distance {max_distance}", work_bytes=lambda n: bucket_work_bytes(n, bidirectional))
    return PositionTerm(scheme="t5", convention="key_minus_query", scale=1.0,
                        scalars=(ScalarTable(table.transpose(0, 1), ids, name="T5 bias table"),),
                        notes=dict(bidirectional=bidirectional, max_distance=max_distance))


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """A random T5 term (bidirectional unless the options say causal) with the options' buckets.

    With ``max_distance`` <= 8 the example uses 8 buckets (32 need max_distance > 8 bidirectionally).
    """
    num_buckets = options.num_buckets if options.max_distance > 8 else 8
    bidirectional = True if options.bidirectional is None else options.bidirectional
    exact = num_buckets // 4 if bidirectional else num_buckets // 2
    table = example_tensor(num_buckets, num_heads, device=device, dtype=dtype, generator=generator)
    return position_term(table, bidirectional=bidirectional, max_distance=max(options.max_distance, exact + 1))


# ----------------------------------------------------------------------------- in a model


@dataclass(frozen=True)
class T5Options:
    """``num_buckets``, ``max_distance``; ``bidirectional`` None follows the model (a decoder uses
    the causal buckets, all looking back; an encoder splits them between the two directions)."""

    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool | None = None

    def __post_init__(self):
        check_choice("bidirectional", self.bidirectional, (None, False, True))
        _check_bucket_args(True if self.bidirectional is None else self.bidirectional, self.num_buckets,
                           self.max_distance)


class T5Position(PositionModule):
    """One (num_buckets, H) table shared by every layer, as in T5 (only the first block owns it)."""

    def __init__(self, shape, options: T5Options):
        super().__init__(shape, options)
        self.bidirectional = (not shape.causal) if options.bidirectional is None else options.bidirectional
        _check_bucket_args(self.bidirectional, options.num_buckets, options.max_distance)
        self.table = nn.Parameter(torch.zeros(options.num_buckets, shape.num_heads))  # (buckets, H)

    def term(self, layer, attention):
        return position_term(self.table, bidirectional=self.bidirectional, max_distance=self.options.max_distance)

    @torch.no_grad()
    def init_parameters(self, generator):
        self.table.copy_(torch.randn(self.table.shape, generator=generator) * self.shape.d_model ** -0.5)


SCHEME = Scheme(
    name="t5", color="#e69f00", display="T5 buckets", short="T5", paper="Raffel et al. 2020", cite="raffel2020t5", chapter="03_t5_buckets",
    convention="key_minus_query", formula=r"\text{table}[\text{bucket}(j - i),\, h]",
    code="relpos_core.schemes.t5.t5_relative_bucket", injects="scalar on the logit",
    summary="a learned scalar per head and log-spaced distance bucket",
    distance=Distance("max_distance", "distances beyond it share the last bucket", small=32, medium=128, large=128,
                      minimum=17, label="{num_buckets} buckets, max_distance = {max_distance}"),
    example=example, options=T5Options, module=T5Position, order=40,
    benchmark_module="relpos_core.oracles.t5.benchmark_module",
    # the clipping experiment: one layer against two on the marker task
    lab=Lab(("marker", "marker_causal", "copy", "retrieval_gap"), book=True, tiny=("marker",),
            runs=(LabRun("clipping", "marker"), LabRun("clipping", "marker", "1layer", model=dict(num_layers=1),
                                                       tiny=True))),
    bench=Bench(train=("small", "medium", "large"), block_skip=("large",)),
)
