"""Input checks shared by every entry point.

Each check raises a `ValueError` whose message names the parameter, the value received and the
allowed range (docs/design.md, 'Errors'), so the CLI can print it as one line and the app can
show it beside the control.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


def check_finite(name: str, value: float) -> float:
    """Returns `value` as a float if it is a finite real number."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number, got {value!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {_fmt(value)}")
    return value


def check_positive(name: str, value: float) -> float:
    """Returns `value` if it is finite and > 0."""
    value = check_finite(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {_fmt(value)}")
    return value


def check_in_range(name: str, value: float, low: float, high: float, *, closed_high: bool = True,
                   closed_low: bool = True) -> float:
    """Returns `value` if it lies in the interval between `low` and `high` (high may be inf,
    written `[low, inf)` with closed_high False: the value itself must be finite)."""
    value = check_finite(name, value)
    ok_low = value >= low if closed_low else value > low
    ok_high = value <= high if closed_high else value < high
    if not (ok_low and ok_high):
        left = "[" if closed_low else "("
        right = "]" if closed_high else ")"
        raise ValueError(f"{name} must be in {left}{low:g}, {high:g}{right}, got {_fmt(value)}")
    return value


def check_whole(name: str, value, low: int = 1, high: int | None = None) -> int:
    """Returns `value` as an int if it is a whole number in [low, high] (high None: no bound).

    A whole float (2.0, as JSON may hold a count) passes; 2.5, a bool, a string or None does not.
    """
    allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float,
                                                                     np.floating)):
        raise ValueError(f"{name} must be a whole number {allowed}, got {value!r:.80}")
    if isinstance(value, (float, np.floating)) and (not math.isfinite(value)
                                                    or value != int(value)):
        raise ValueError(f"{name} must be a whole number {allowed}, got {_fmt(float(value))}")
    value = int(value)
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be a whole number {allowed}, got {value}")
    return value


def check_range_pair(name: str, value, low: float, high: float) -> tuple[float, float]:
    """Returns `value` as (lo, hi) floats if it is a pair with low < lo <= hi <= high (a search
    range: the open left end keeps log scales defined)."""
    allowed = f"{name} must be LO,HI with {low:g} < LO <= HI <= {high:g}"
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{allowed}, got {value!r:.80}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and low < lo <= hi <= high):
        raise ValueError(f"{allowed}, got {lo:g},{hi:g}")
    return lo, hi


def check_choice(name: str, value, choices) -> str:
    """Returns `value` if it is one of `choices`."""
    if value not in tuple(choices):
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r:.80}")
    return value


def check_array(name: str, values: Iterable[float], *, positive: bool = True,
                nonnegative: bool = False) -> np.ndarray:
    """Returns `values` as a 1-D float64 array that is non-empty, finite and (strictly) positive."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a list of numbers") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D list of numbers, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"{name} must be finite everywhere, got {arr[bad]} at index {bad}")
    if positive and np.any(arr <= 0):
        bad = int(np.flatnonzero(arr <= 0)[0])
        raise ValueError(f"{name} must be > 0 everywhere, got {arr[bad]:g} at index {bad}")
    if nonnegative and np.any(arr < 0):
        bad = int(np.flatnonzero(arr < 0)[0])
        raise ValueError(f"{name} must be >= 0 everywhere, got {arr[bad]:g} at index {bad}")
    return arr


def _first_bad(arr: np.ndarray, bad: np.ndarray, index_name: str) -> str:
    """'got V' (one value) or 'got V at index_name I' (the first bad entry of an array)."""
    flat = np.flatnonzero(bad.reshape(-1))[0]
    value = arr.reshape(-1)[flat]
    if arr.ndim == 0:
        return f"got {value:g}"
    where = np.unravel_index(flat, arr.shape)
    where = int(where[0]) if arr.ndim == 1 else tuple(int(i) for i in where)
    return f"got {value:g} at {index_name} {where}"


def check_all_in_range(name: str, values, low: float, high: float, *, closed_low: bool = True,
                       closed_high: bool = True, index_name: str = "index") -> np.ndarray:
    """Returns `values` as a float64 array (any shape, a scalar included) if every entry is finite
    and lies between `low` and `high`; the vectorised `check_in_range`, for hot paths.

    An infinite `high` is always written open (`[1, inf)`). The message names the first bad entry
    and, for an array, where it is (`index_name` says what the position counts, e.g. "step").
    """
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {values!r:.80}") from None
    bad = ~np.isfinite(arr) | (arr < low if closed_low else arr <= low) | (
        arr > high if closed_high else arr >= high)
    if np.any(bad):
        left = "[" if closed_low else "("
        right = "]" if closed_high and math.isfinite(high) else ")"
        raise ValueError(f"{name} must be in {left}{low:g}, {high:g}{right}, "
                         f"{_first_bad(arr, bad, index_name)}")
    return arr


def check_whole_array(name: str, values, low: int = 0) -> np.ndarray:
    """Returns `values` (a scalar or a 1-D list) as a 1-D int64 array if every entry is a whole
    number >= low; the vectorised `check_whole` (whole floats pass, bools and strings do not)."""
    allowed = f"{name} must be whole numbers >= {low}"
    arr = np.atleast_1d(np.asarray(values))
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{allowed}, got {values!r:.80}")
    if arr.ndim != 1:
        raise ValueError(f"{allowed} in a 1-D list, got shape {arr.shape}")
    as_float = arr.astype(np.float64)
    bad = ~np.isfinite(as_float) | (as_float < low) | (as_float != np.round(as_float))
    if np.any(bad):
        raise ValueError(f"{allowed}, {_first_bad(as_float, bad, 'index')}")
    return arr.astype(np.int64)


def check_batch_sizes(values: Iterable[int], name: str = "batch_sizes") -> np.ndarray:
    """Returns sorted unique batch sizes as an int64 array; each must be a whole number >= 1."""
    values = list(values)
    if not values:
        raise ValueError(f"{name} must hold at least one batch size >= 1, got an empty list")
    out = [check_whole(f"{name} entry", v, 1) for v in values]
    return np.unique(np.asarray(out, dtype=np.int64))


def parse_range(text: str, name: str) -> tuple[float, float]:
    """'1e-3,3' -> (0.001, 3.0): two numbers LO,HI as typed on a command line or in a form
    (their order and bounds are checked where they are used, e.g. `check_range_pair`)."""
    parts = str(text).split(",")
    try:
        lo, hi = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"{name} must be two numbers LO,HI, got {text!r}") from None
    return lo, hi


def parse_optional_range(text: str | None, name: str) -> tuple[float, float] | None:
    """`parse_range`, or None for a field left blank (None or whitespace): the default's."""
    return parse_range(text, name) if (text or "").strip() else None


def parse_batch_sizes(text: str) -> list[int]:
    """'4,8,16' -> [4, 8, 16]; '4:64' -> powers of two times 4 up to 64: [4, 8, 16, 32, 64]."""
    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 2:
            raise ValueError(f"batch-sizes range must be LOW:HIGH, got {text!r}")
        try:
            low, high = int(parts[0]), int(parts[1])
        except ValueError:
            raise ValueError(f"batch-sizes range must be two whole numbers LOW:HIGH, got {text!r}") from None
        if low < 1 or high < low:
            raise ValueError(f"batch-sizes range must satisfy 1 <= LOW <= HIGH, got {text!r}")
        out = []
        b = low
        while b <= high:
            out.append(b)
            b *= 2
        return out
    items = [s for s in text.split(",") if s.strip()]
    if not items:
        raise ValueError("batch-sizes must list at least one batch size >= 1, got an empty list")
    try:
        values = [int(s) for s in items]
    except ValueError:
        raise ValueError(f"batch-sizes must be whole numbers >= 1 separated by commas, got {text!r}") from None
    return [int(v) for v in check_batch_sizes(values, "batch-sizes")]
