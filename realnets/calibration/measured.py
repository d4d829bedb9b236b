"""Measured numbers for JSON records: a value with its uncertainty and the kind of that
uncertainty, non-finite numbers as null, and the standard error of a mean."""

from __future__ import annotations

import math

import numpy as np


def standard_error(x: np.ndarray, axis: int = 0) -> np.ndarray:
    n = x.shape[axis]
    if n < 2:
        return np.full(np.delete(x.shape, axis), np.nan)
    return np.std(x, axis=axis, ddof=1) / math.sqrt(n)


def finite_or_none(x):
    x = float(x)
    return x if math.isfinite(x) else None


GENERIC_NULL_REASON = "not finite (e.g. no uncertainty given, or fewer than 2 samples)"


def measured_value(value, uncertainty, kind: str, null_reason: str | None = None) -> dict:
    """{"value", "uncertainty", "uncertainty_kind"}: floats or lists, non-finite as null; where
    any is null, "null_reason" says why (`null_reason`, or the generic reason when None)."""
    def conv(x):
        if x is None:
            return None
        if np.ndim(x) == 0:
            return finite_or_none(x)
        return [finite_or_none(v) for v in np.asarray(x, np.float64).ravel()]

    out = {"value": conv(value), "uncertainty": conv(uncertainty), "uncertainty_kind": kind}
    flat = [v for x in (out["value"], out["uncertainty"])
            for v in (x if isinstance(x, list) else [x])]
    if None in flat:
        out["null_reason"] = GENERIC_NULL_REASON if null_reason is None else null_reason
    return out
