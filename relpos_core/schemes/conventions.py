"""The sign-convention table: which offset each scheme uses, and what a positive value means.

Book: chapter 1, "Why relative positions" (chapters/01_why_relative_positions.ipynb) (and the failure mode "sign
convention flipped"). The two conventions are defined in ``relpos_core.offsets``:

* ``key_minus_query``: the offset is ``j - i``; positive means the key comes *after* the query.
* ``query_minus_key``: the offset is ``i - j``; positive means the key comes *before* the query.
* ``none``: absolute schemes never form an offset.

Mixing them up swaps past and future (T5's buckets for keys after the query, Transformer-XL's
R(i - j)); every scheme's tests include a two-token sign test against its row here.
"""
from __future__ import annotations

__all__ = ["SIGN_CONVENTIONS", "POSITIVE_MEANS", "sign_convention", "conventions_table_markdown"]

POSITIVE_MEANS = {
    "key_minus_query": "key after the query",
    "query_minus_key": "key before the query",
    "none": "no offset (absolute positions)",
}


def _row(scheme, paper, convention, formula, code):
    return dict(scheme=scheme, paper=paper, convention=convention, formula=formula,
                positive_means=POSITIVE_MEANS[convention], code=code)


SIGN_CONVENTIONS: list[dict] = [
    _row("absolute", "Vaswani et al. 2017", "none", "x_i + p_i (added to each token)",
         "relpos_core.schemes.absolute.AbsoluteSelfAttention"),
    _row("shaw", "Shaw, Uszkoreit, Vaswani 2018", "key_minus_query", "a_K[clip(j - i, -k, k) + k]",
         "relpos_core.schemes.shaw.shaw_relative_index"),
    _row("music_transformer", "Huang et al. 2018", "key_minus_query", "E_r[(j - i) + (L - 1)]",
         "relpos_core.schemes.music_transformer.relative_logits_gather"),
    _row("transformer_xl", "Dai et al. 2019", "query_minus_key", "W_kR R(i - j)",
         "relpos_core.schemes.transformer_xl.transformer_xl_terms"),
    _row("t5", "Raffel et al. 2020", "key_minus_query", "table[bucket(j - i), h]",
         "relpos_core.schemes.t5.t5_relative_bucket"),
    _row("deberta", "He, Liu, Gao, Chen 2021", "query_minus_key", "delta(i, j) = clip(i - j, -k, k - 1) + k",
         "relpos_core.schemes.deberta.deberta_delta_index"),
    _row("alibi", "Press, Smith, Lewis 2022", "query_minus_key", "-m_h * (i - j)",
         "relpos_core.schemes.alibi.alibi_bias"),
    _row("rope", "Su et al. 2021", "key_minus_query", "q_i^T R((j - i) theta) k_j",
         "relpos_core.schemes.rope.apply_rope"),
]


def sign_convention(scheme: str) -> dict:
    """The row of ``SIGN_CONVENTIONS`` for ``scheme`` (e.g. ``"t5"``)."""
    names = [row["scheme"] for row in SIGN_CONVENTIONS]
    if scheme not in names:
        raise ValueError(f"scheme must be one of {names}, got {scheme!r}")
    return SIGN_CONVENTIONS[names.index(scheme)]


def conventions_table_markdown() -> str:
    """``SIGN_CONVENTIONS`` as a Markdown table (one row per scheme)."""
    header = ["scheme", "paper", "convention", "formula", "positive means", "code"]
    keys = ["scheme", "paper", "convention", "formula", "positive_means", "code"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in SIGN_CONVENTIONS:
        cells = [f"`{row[k]}`" if k in ("convention", "formula", "code") else row[k] for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
