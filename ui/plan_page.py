"""The app's Plan tab as library code (no streamlit): the step time measured here (a throughput
file is read by `realnets.planning.step_time.read_throughput`), and the plan of a sweep on it (`realnets.planning`, docs/plan.md), as the CLI's
`python -m realnets plan` makes it. Every function answers bad input with one ValueError line,
which the page shows beside its controls."""

from __future__ import annotations

from typing import Callable

from pathlib import Path

from realnets.planning.plan import Plan, TwoPointCurve, make_plan, two_point_steps
from realnets.planning.step_time import ThroughputRecord
from ui.measured import Measured

# Seconds per timed repeat when the step time is measured from the app: half the CLI's default
# (`python -m realnets throughput`), so a sweep of eight batch sizes measures in well under a
# minute; three repeats still give a median and a spread.
MEASURE_SECONDS_PER_REPEAT = 0.5


def sweep_workload(sweep: Measured) -> str:
    """The workload key (name, or FILE.py:FUNCTION) of a realnets sweep; ValueError for a curve
    that is not one (a batch_science directory: no workload to time, no step time to plan)."""
    key = sweep.config.get("workload")
    if sweep.curve.source != "measured" or not isinstance(key, str) or not key:
        raise ValueError(f"{sweep.name} is not a sweep of `python -m realnets sweep` (its "
                         "config.json names no workload)")
    return key


def two_point_record(sweep_dir: Path | None) -> dict | None:
    """The sweep directory's two_point.json (`python -m realnets two-point`), or None without one;
    ValueError (one line) for one that does not read."""
    from realnets import store
    from realnets.validation.files import TWO_POINT_FILE

    if sweep_dir is None or not (Path(sweep_dir) / TWO_POINT_FILE).is_file():
        return None
    return store.read_json(Path(sweep_dir) / TWO_POINT_FILE, "two-point record")


def _curve_of(sweep: Measured, record: dict) -> TwoPointCurve:
    """The two-point record checked against the sweep (ValueError: made before it changed, or
    without an estimate) and read for the plan."""
    from realnets.validation.two_point import plan_curve

    return plan_curve(record, sweep.curve)


def batch_sizes_to_measure(sweep: Measured, train_size: int | None,
                           two_point: dict | None = None) -> tuple[int, ...]:
    """The sweep's batch sizes that fit the training set (an epoch holds at least one batch), or
    with a `two_point` record the powers of two its plan covers (B_ref .. the training-set size),
    as the CLI's `plan` measures without --throughput; ValueError if none does, or for a
    two-point record made before the sweep changed."""
    from realnets.planning.throughput import fitting_batch_sizes

    if two_point is not None:
        return tuple(b for b, *_ in two_point_steps(_curve_of(sweep, two_point), train_size))
    return fitting_batch_sizes(sweep.config.get("batch_sizes") or (), train_size)


def measure_here(sweep: Measured, task, device_counts, log: Callable[[str], None] | None = None,
                 seconds_per_repeat: float | None = None,
                 two_point: dict | None = None) -> ThroughputRecord:
    """Seconds per step of the sweep's workload and optimizer on this machine's first
    `device_counts` devices, at `batch_sizes_to_measure` (`realnets.planning.throughput`);
    `seconds_per_repeat` None: MEASURE_SECONDS_PER_REPEAT."""
    from realnets.planning import throughput

    return throughput.measure_throughput(
        task, sweep_workload(sweep), str(sweep.config.get("optimizer")),
        batch_sizes_to_measure(sweep, task.train_size, two_point), list(device_counts),
        seconds_per_repeat=(MEASURE_SECONDS_PER_REPEAT if seconds_per_repeat is None
                            else seconds_per_repeat),
        max_rows_per_device=int(sweep.config.get("max_rows_per_device") or 4096), log=log)


def plan_of(sweep: Measured, throughput: ThroughputRecord, price_per_device_hour=None,
            deadline_s=None, budget=None, train_size: int | None = None,
            two_point: dict | None = None) -> Plan:
    """The plan of a loaded sweep (its curve, or with `two_point` its two_point.json's curve, as
    `python -m realnets plan [--steps-from two-point]` uses them) on the step time of
    `throughput`; make_plan's ValueErrors pass through (a bad price, both a deadline and a
    budget, no batch size that reached the goal, another workload's step time, a stale
    two-point record)."""
    sweep_workload(sweep)
    if sweep.points.empty:
        raise ValueError(f"{sweep.name} has no finished trials yet")
    return make_plan(sweep.curve, throughput, price_per_device_hour,
                     deadline_s, budget, train_size=train_size,
                     two_point=None if two_point is None else _curve_of(sweep, two_point))


def describe_throughput(record: ThroughputRecord) -> str:
    """One line on where and how well the step time was measured."""
    m = record.model
    counts = ", ".join(str(n) for n in record.device_counts())
    return (f"Step time of {record.workload} ({record.optimizer}) on {record.platform} "
            f"{record.device_kind}: {len(record.points)} measured (batch size, devices) pairs "
            f"on {counts} device(s); model `{m.formula}` with fixed {m.fixed * 1e3:.3g} ms, "
            f"per example {m.per_example * 1e6:.3g} us, all-reduce {m.allreduce * 1e3:.3g} ms "
            f"(relative error RMS {m.rms_relative_error:.1%}, largest {m.max_relative_error:.1%}).")
