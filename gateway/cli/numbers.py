"""Argparse types for numbers whose range a command checks itself: each refuses what is not a finite number."""

from __future__ import annotations

import argparse
import math


def finite_number(text: str) -> float:
    """An argparse type: a finite number (its range is the command's to check); nan and inf are refused,
    since neither is a duration or a period, and a JSON body or an integer conversion cannot hold them."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, e.g. 2.5, got {text!r}")
    return value
