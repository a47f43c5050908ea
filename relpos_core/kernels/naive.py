"""The naive form: every position quantity materialised per (query, key) pair.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). This is each paper's
equations written out literally, the baseline the other forms are measured against:

* vector terms (Shaw et al., 2018; DeBERTa, He et al., 2021; Transformer-XL, Dai et al.,
  2019): the table gathered into an [Lq, Lk, d] tensor (per head: [H, Lq, Lk, d]), then
  one einsum with q or k: about Lq Lk d numbers (4 GiB at L = 4096, d = 64, fp32);
* scalar terms (T5, Raffel et al., 2020; ALiBi, Press et al., 2022): the [Lq, Lk] offset
  (and bucket-id) tensors, then the dense [H, Lq, Lk] bias;
* the value term (Shaw): the table gathered into [Lq, Lk, d], then einsum with the weights.

Each piece computes its own naive form (``Piece.logits(form="naive", ...)`` in
``relpos_core.pieces``) with the two helpers re-exported here; the backends (``eager``,
``sdpa``, ``flex``) compose the pieces (``forms.compose_logits``) and apply the mask. Offsets are
``key_minus_query`` (j - i). The memory guard runs in ``relpos_core.attend`` before any of
this, with the byte count of ``relpos_core.measure.analytic``.
"""
from __future__ import annotations

from relpos_core.pieces.vectors import embed_pairs, pair_logits

__all__ = ["embed_pairs", "pair_logits"]
