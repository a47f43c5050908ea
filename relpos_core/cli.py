"""argparse types that check a number's range and name it in the error."""
from __future__ import annotations

import argparse


def integer_in(low: int, high: int, note: str = ""):
    """An argparse ``type=``: an integer in [low, high]; ``note`` explains the bound."""
    suffix = f" ({note})" if note else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}]{suffix}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}]{suffix}, got {value}")
        return value

    return parse


def number_in(low: float, high: float):
    """An argparse ``type=``: a number in (low, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number in ({low:g}, {high:g}], got {text!r}") from None
        if not low < value <= high:
            raise argparse.ArgumentTypeError(f"must be a number in ({low:g}, {high:g}], got {text!r}")
        return value

    return parse
