"""What each scheme computes: one module per scheme (see CONTRIBUTING.md).

``SIGN_CONVENTIONS`` lists every scheme's offset convention (``key_minus_query`` = j - i,
``query_minus_key`` = i - j) and what a positive offset means.
"""
from . import absolute, alibi, conventions, deberta, music_transformer, rope, shaw, t5, transformer_xl
from .conventions import SIGN_CONVENTIONS, conventions_table_markdown, sign_convention

__all__ = [
    "absolute",
    "alibi",
    "conventions",
    "deberta",
    "music_transformer",
    "rope",
    "shaw",
    "t5",
    "transformer_xl",
    "SIGN_CONVENTIONS",
    "conventions_table_markdown",
    "sign_convention",
]
