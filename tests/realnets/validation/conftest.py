"""Fixtures the validation tests share: a whole-set loss that can be killed part-way, the chunks
a `ShardedSample` was cut into, and a copy of a small shipped report to run commands on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


class Killed(Exception):
    """Raised by a `killable_loss` at its kill point, as a killed process would stop there."""


class KillableLoss:
    """Replaces `module.sample_loss` by one that counts its evaluations in `calls` and raises
    Killed at evaluation number `kill_at` (0-based; None: never)."""

    Killed = Killed

    def __init__(self, monkeypatch):
        self._monkeypatch = monkeypatch
        self._real: dict = {}             # module -> its own sample_loss, before any install
        self.calls: list[int] = []

    def install(self, module, kill_at: int | None = None) -> None:
        """Installs (again) with a new kill point; the count in `calls` goes on."""
        real = self._real.setdefault(module, module.sample_loss)

        def counting(*args, **kwargs):
            fn = real(*args, **kwargs)

            def value_and_grad(theta):
                if len(self.calls) == kill_at:
                    raise Killed
                self.calls.append(1)
                return fn(theta)
            return value_and_grad

        self._monkeypatch.setattr(module, "sample_loss", counting)


@pytest.fixture
def killable_loss(monkeypatch) -> KillableLoss:
    return KillableLoss(monkeypatch)


@pytest.fixture
def chunks_seen(monkeypatch) -> list[list[int]]:
    """The rows of each chunk of every `ShardedSample` made while the test runs, one list per
    sample (all modules build it through `realnets.calibration.sharded_sample`)."""
    from realnets.calibration import sharded_sample

    made, real = [], sharded_sample.ShardedSample

    def recorded(batch, **kwargs):
        placed = real(batch, **kwargs)
        made.append([rows for rows, _, _ in placed.chunks])
        return placed

    monkeypatch.setattr(sharded_sample, "ShardedSample", recorded)
    return made


@pytest.fixture
def tabular_report(tmp_path, monkeypatch) -> Path:
    """A copy of reports/validation/breast_cancer_mlp (validation.json, two_ends.json,
    miss_split.json) in tmp_path, with an empty summary.json beside it; the working directory
    the repository root, from which the report names its sweep."""
    from realnets.validation.files import TWO_ENDS_FILE
    from realnets.validation.summary import SUMMARY_FILE

    monkeypatch.chdir(ROOT)
    d = tmp_path / "breast_cancer_mlp"
    d.mkdir()
    for f in ("validation.json", TWO_ENDS_FILE, "miss_split.json"):
        shutil.copy(ROOT / "reports" / "validation" / "breast_cancer_mlp" / f, d / f)
    (tmp_path / SUMMARY_FILE).write_text(json.dumps([]))
    return d
