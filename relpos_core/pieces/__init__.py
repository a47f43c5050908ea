"""The kinds of position piece, one class each, all following ``base.Piece`` (see its docstring).

Book: "What it costs" (chapters/11_what_it_costs.ipynb). ``vectors``: tables of vectors
read by row of offset (Shaw, DeBERTa, Transformer-XL); ``scalars``: biases per head (T5,
ALiBi, Kerple, FIRE); ``rotary``: RoPE's rotation; ``contextual``: CoPE's positions counted
by gates on q . k; ``forget``: forgetting attention's cumulative log-gates; ``length_scaling``:
a factor per query of its length or position (log-length, scalable softmax, Llama 4).
``relpos_core.terms`` re-exports them with ``PositionTerm``.
"""
from . import length_scaling
from .base import Alloc, Piece, Sizes
from .forget import ForgetGate
from .length_scaling import LengthScaling
from .rotary import Rotary, XPosDecay
from .scalars import PairScalar, ScalarFunction, ScalarSlopes, ScalarTable
from .vectors import KeyVectors, QueryVectors, RowIndex, ValueVectors

__all__ = ["Piece", "Alloc", "Sizes", "Rotary", "XPosDecay", "PairScalar", "ScalarFunction", "ScalarSlopes",
           "ScalarTable", "KeyVectors", "QueryVectors", "RowIndex", "ValueVectors", "ForgetGate", "LengthScaling",
           "length_scaling"]
