"""realnets.calibration.sharded_sample: how a sample is cut into chunks (the multi-process path
itself runs in tests/realnets/test_multihost.py)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from realnets.calibration import sharded_sample
from realnets.calibration.sharded_sample import ShardedSample, _spans


def test_one_process_cuts_chunks_of_chunk_rows_and_a_shorter_last():
    assert _spans(66, 33) == [(0, 33, False), (33, 66, False)]
    assert _spans(70, 32) == [(0, 32, False), (32, 64, False), (64, 70, False)]
    assert _spans(5, 100) == [(0, 5, False)]


@pytest.mark.parametrize("n, chunk, want", [
    # 4 global devices: chunks of the largest multiple of 4 in `chunk` (at least 4), sharded;
    # only the rows left at the end on each process
    (66, 33, [(0, 32, False), (32, 64, False), (64, 66, True)]),
    (64, 32, [(0, 32, False), (32, 64, False)]),
    (3, 100, [(0, 3, True)]),
    (10, 4, [(0, 4, False), (4, 8, False), (8, 10, True)]),
    # fewer rows asked per chunk than devices: one row per device, not every row local
    (10, 2, [(0, 4, False), (4, 8, False), (8, 10, True)]),
    (9, 7, [(0, 4, False), (4, 8, False), (8, 9, True)]),
])
def test_several_processes_shard_multiples_of_the_devices_and_keep_the_rest_local(
        monkeypatch, n, chunk, want):
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    spans = _spans(n, chunk, devices=[object()] * 4)
    assert spans == want
    # every row once, in order
    assert [r for lo, hi, _ in spans for r in range(lo, hi)] == list(range(n))


def test_the_chunked_mean_is_the_row_mean():
    """mean over chunks of 7 (weights rows / n) equals the mean over all 30 rows."""
    x = np.random.default_rng(0).standard_normal((30, 3)).astype(np.float32)
    placed = ShardedSample({"x": x}, chunk_rows=7)
    assert [rows for rows, _, _ in placed.chunks] == [7, 7, 7, 7, 2]
    got = placed.mean(lambda w, b: (b["x"] @ w).mean(), np.ones(3, np.float32))
    assert got == pytest.approx(float(x.sum(axis=1, dtype=np.float64).mean()), rel=1e-6)
    rows = placed.rows(lambda w, b: b["x"] @ w, np.ones(3, np.float32))
    np.testing.assert_allclose(rows, x.sum(axis=1), rtol=1e-6)
    with pytest.raises(ValueError, match="chunk_rows must be >= 1"):
        sharded_sample.ShardedSample({"x": x}, chunk_rows=0)
