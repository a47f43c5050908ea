"""Kerple: kernelized relative positions, a learned conditionally positive definite kernel of the distance.

Paper: Ta-Chung Chi, Ting-Han Fan, Peter J. Ramadge and Alexander I. Rudnicky (2022),
"KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation", NeurIPS 2022.
Book: "RoPE and ALiBi" (chapters/06_rope_and_alibi.ipynb), where ALiBi is its
special case; the experiments (chapters/14_experiments_length.ipynb).

Sign convention: ``query_minus_key``; the kernel reads the distance |i - j|. Two kernels,
each with two learned positive numbers per head, r1 and r2 (this file declares both: the
``kerple_log`` scheme and its ``kerple_power`` variant):

* logarithmic: ``b_ij = -r1 log(1 + r2 |i - j|)``;
* power: ``b_ij = -r1 |i - j|^r2``, with 0 < r2 <= 2.

ALiBi is the power kernel with r2 = 1 and a fixed r1 = m_h. The bias is added to the
scaled logit, like ALiBi's. As in the paper's code, the parameters are clamped from below
at a small epsilon (and r2 of the power kernel at 2 from above) where they are read, so a
gradient step cannot make the kernel lose its shape. One module per attention layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_choice, check_tensor
from relpos_core.schemes.declaration import Lab, PositionModule, Scheme, Variant
from relpos_core.terms import PositionTerm, ScalarFunction, example_tensor

__all__ = ["KERNELS", "EPS", "kerple_bias", "position_term", "KerpleOptions", "KerplePosition", "SCHEME"]

KERNELS = ("log", "power")
EPS = 1e-2  # the smallest r1 and r2 the kernel reads (the paper's code clamps at 1e-2)


def _kernel(kind: str, r1: torch.Tensor, r2: torch.Tensor):
    """fn(offsets, dtype) -> (H, *offsets.shape): the kernel's bias for each offset j - i."""

    def fn(offsets: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        shape = (-1,) + (1,) * offsets.dim()
        a = r1.clamp(min=EPS).to(dtype).reshape(shape)  # (H, 1, ...)
        b = r2.clamp(min=EPS, max=2.0 if kind == "power" else None).to(dtype).reshape(shape)  # (H, 1, ...)
        distance = offsets.to(dtype).abs_()  # |i - j|
        if kind == "log":
            return -a * torch.log1p(b * distance)  # (H, ...)
        # |i - j|^r2 is 0 at distance 0; computed at 1 there so that its gradient is 0, not 0 * log 0 = NaN
        far = distance > 0
        return -a * torch.where(far, torch.where(far, distance, 1.0).pow(b), 0.0)  # (H, ...)

    return fn


def kerple_bias(r1: torch.Tensor, r2: torch.Tensor, offsets: torch.Tensor, *, kernel: str = "log",
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The Kerple bias of ``offsets`` (any shape, integers): (H, *offsets.shape).

    r1, r2: (H,) positive numbers per head (clamped at ``EPS`` from below; the power
    kernel's r2 at 2 from above). Convention ``query_minus_key``: the kernel reads |i - j|.
    """
    check_choice("kernel", kernel, KERNELS)
    check_tensor("r1", r1, ndim=1, floating=True)
    check_tensor("r2", r2, ndim=1, floating=True, shape={0: r1.shape[0]})
    check_tensor("offsets", offsets, floating=False)
    return _kernel(kernel, r1, r2)(offsets, dtype)


def position_term(r1: torch.Tensor, r2: torch.Tensor, *, kernel: str = "log") -> PositionTerm:
    """Kerple's position term for ``rp.attend``: one learned kernel value per head and offset.

    r1, r2: (H,) (learnable: gradients reach them on every path that trains). Convention
    ``query_minus_key``. Added to the scaled logit; causality, if wanted, is the mask's.
    """
    check_choice("kernel", kernel, KERNELS)
    check_tensor("r1", r1, ndim=1, floating=True)
    check_tensor("r2", r2, ndim=1, floating=True, shape={0: r1.shape[0]})
    H = r1.shape[0]

    piece = ScalarFunction(_kernel(kernel, r1, r2), (r1, r2), H, name=f"Kerple {kernel} kernel",
                           working=3)  # |i - j|, its kernel step and the result
    return PositionTerm(scheme=f"kerple_{kernel}", convention="query_minus_key", scalars=(piece,),
                        notes=dict(kernel=kernel))


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """Random r1 in (0, 2), r2 in (0, 1) per head, as the paper's code initialises them."""
    r1 = example_tensor(num_heads, device=device, dtype=dtype, generator=generator).abs().add(0.1)
    r2 = example_tensor(num_heads, device=device, dtype=dtype, generator=generator).abs().add(0.1)
    if torch.device(device or "cpu").type != "meta":
        r1, r2 = r1.clamp(max=2.0), r2.clamp(max=1.0)
    return position_term(r1, r2, kernel=options.kernel)


@dataclass(frozen=True)
class KerpleOptions:
    """``kernel``: "log" (-r1 log(1 + r2 |i - j|)) or "power" (-r1 |i - j|^r2)."""

    kernel: str = "log"

    def __post_init__(self):
        check_choice("kernel", self.kernel, KERNELS)


class KerplePosition(PositionModule):
    """Per layer, r1 and r2 per head; drawn uniformly in (0, 2) and (0, 1)."""

    def __init__(self, shape, options: KerpleOptions):
        super().__init__(shape, options)
        self.r1 = nn.Parameter(torch.ones(shape.num_layers, shape.num_heads))  # (layers, H)
        self.r2 = nn.Parameter(torch.ones(shape.num_layers, shape.num_heads))  # (layers, H)

    def term(self, layer, attention):
        return position_term(self.r1[layer], self.r2[layer], kernel=self.options.kernel)

    @torch.no_grad()
    def init_parameters(self, generator):
        self.r1.copy_(torch.rand(self.r1.shape, generator=generator) * 2 + EPS)
        self.r2.copy_(torch.rand(self.r2.shape, generator=generator) + EPS)


SCHEME = Scheme(
    name="kerple_log", color="#44aa99", short="Kerple log", display="Kerple (log)", paper="Chi et al. 2022", cite="chi2022kerple", chapter=None,
    convention="query_minus_key", formula=r"-r_1 \log\big(1 + r_2 \lvert i - j \rvert\big)",
    code="relpos_core.schemes.kerple_log.kerple_bias", injects="scalar on the logit",
    summary="a learned logarithmic kernel of the distance per head",
    example=example, options=KerpleOptions, module=KerplePosition, order=80,
    variants=(Variant("kerple_power", "Kerple (power)", dict(kernel="power"),
                      "a learned power kernel of the distance per head", short="Kerple power", color="#88bb77",
                      lab=Lab((), language_model=())),),
    lab=Lab(("retrieval_gap",), language_model=("book",)),
)
