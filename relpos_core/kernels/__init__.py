"""How each scheme is computed (see CONTRIBUTING.md and chapters/11_what_it_costs.ipynb).

Forms (how a scheme's ``PositionTerm`` becomes numbers): ``naive`` (per pair), ``gather``
(per row or offset, then indexed), ``skew`` (per offset, then a strided view). Backends
(which attention kernel consumes them): ``eager`` (softmax written out), ``sdpa`` (a dense
bias as ``attn_mask``; forcing one of SDPA's own backends: ``sdpa_backends``), ``flex``
(inside FlexAttention's tile loop). ``rotary``: RoPE's rotation (and xPos, and the
context-extension scalings). ``reference``: ``rp.attention`` written out.
``relpos_core.attend`` is the one entry point that validates, guards memory and
dispatches to them.
"""
from . import eager, flex, forms, gather, naive, reference, rotary, sdpa, sdpa_backends, skew
from .forms import BACKENDS, FORMS

__all__ = ["forms", "naive", "gather", "skew", "eager", "sdpa", "sdpa_backends", "flex", "rotary", "reference",
           "FORMS", "BACKENDS"]
