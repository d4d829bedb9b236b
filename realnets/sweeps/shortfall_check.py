"""The check of the shortfall's extrapolation (docs/prediction_rule.md, 'session 44') on sweeps
with four times the trials it starts from: `python -m realnets shortfall PATH...`.

A PATH is a sweep directory or a steps CSV (`write_steps_csv`: one row per trial, columns
sweep, batch_size, trial_id, steps_to_goal (empty: not at the goal), max_steps), which keeps of a
sweep only what the check reads, so that sweeps too large to ship can be checked from a clone.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nqm.curve import ScalingCurve
from nqm.scaling import fit_mccandlish
from realnets import store
from realnets.sweeps.curve import b_crit_resampled, build_curve
from realnets.sweeps.records import load_sweep
from realnets.sweeps.report import fmt
from realnets.sweeps.robustness import SEARCH_FACTORS, first_trials, search_interval
from realnets.sweeps.shortfall import DOUBLINGS, curve_of_steps, shortfall, with_shortfall

STEPS_COLUMNS = ("sweep", "batch_size", "trial_id", "steps_to_goal", "max_steps")


@dataclass(frozen=True)
class Sweep:
    """What the check reads of one sweep: its name, curve (trials run to their end) and budget."""

    name: str
    curve: ScalingCurve
    max_steps: int


@dataclass(frozen=True)
class CheckRow:
    """One sweep's line of the check; B_crit in examples, None where no fit.

    Attributes:
      name: the sweep.
      first, all_trials: the trials per batch size the estimate starts from (K), and the fewest
        the sweep has at any batch size.
      b_first, lo, hi: B_crit from the first K and its 16-84% resampled-trials interval.
      b_ext, ext_lo, ext_hi: the extrapolation to 4K trials and the interval with the shortfall.
      b_all: B_crit from the first 4K trials per batch size (the value checked against; None
        when all_trials < 4K).
      search: `robustness.search_interval` of b_first (None unless K is its trial count).
    """

    name: str
    first: int
    all_trials: int
    b_first: float | None
    lo: float | None
    hi: float | None
    b_ext: float | None
    ext_lo: float | None
    ext_hi: float | None
    b_all: float | None
    search: tuple[float, float] | None = None

    def inside(self, lo, hi) -> bool | None:
        if self.b_all is None or lo is None or hi is None:
            return None
        return lo <= self.b_all <= hi

    @property
    def closer(self) -> bool | None:
        """B_ext closer to B_all than B_first in |ln| (None without the three)."""
        if None in (self.b_all, self.b_ext, self.b_first):
            return None
        return abs(math.log(self.b_ext / self.b_all)) < abs(math.log(self.b_first / self.b_all))


def sweep_of_dir(path: Path) -> Sweep:
    """A sweep directory's Sweep (its trials must have run to their end: `--full-trials`)."""
    config, records = load_sweep(path)
    if not config.full_trials:
        raise ValueError(f"{path}: its trials stopped at another's goal step (no --full-trials): "
                         "the shortfall needs every trial's own steps")
    return Sweep(Path(path).name, build_curve(records, config), int(config.max_steps))


def steps_rows(sweep: Sweep) -> list[dict]:
    """The steps CSV's rows of one sweep."""
    return [{"sweep": sweep.name, "batch_size": p.batch_size, "trial_id": t["trial_id"],
             "steps_to_goal": t["steps_to_goal"], "max_steps": sweep.max_steps}
            for p in sweep.curve.points for t in p.trials]


def write_steps_csv(path: Path, sweeps: list[Sweep]) -> None:
    """The steps of `sweeps` as one CSV (STEPS_COLUMNS), written atomically."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=STEPS_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for s in sweeps:
        for row in steps_rows(s):
            writer.writerow({**row, "steps_to_goal": "" if row["steps_to_goal"] is None
                             else row["steps_to_goal"]})
    store.write_text_atomic(Path(path), out.getvalue())


def read_steps_csv(path: Path) -> list[Sweep]:
    """The sweeps of a steps CSV, in the order they first appear.

    Raises ValueError naming the file and line: other columns, a value that is not an integer,
    max_steps < 1, steps_to_goal outside 1..max_steps, a trial given twice, or no rows."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != STEPS_COLUMNS:
            raise ValueError(f"{path}: expected the columns {', '.join(STEPS_COLUMNS)}")
        rows: dict[str, list[dict]] = {}
        budgets: dict[str, int] = {}
        seen: set[tuple] = set()
        for n, r in enumerate(reader, start=2):
            where = f"{path} line {n}"
            if None in r or None in r.values():
                raise ValueError(f"{where}: expected {len(STEPS_COLUMNS)} fields")
            try:
                row = {"batch_size": int(r["batch_size"]), "trial_id": int(r["trial_id"]),
                       "steps_to_goal": int(r["steps_to_goal"]) if r["steps_to_goal"] else None}
                budget = int(r["max_steps"])
            except ValueError:
                raise ValueError(f"{where}: batch_size, trial_id, max_steps must be integers and "
                                 "steps_to_goal an integer or empty") from None
            if budget < 1 or budgets.setdefault(r["sweep"], budget) != budget:
                raise ValueError(f"{where}: max_steps must be >= 1 and the same on every row "
                                 f"of sweep {r['sweep']!r}, got {budget}")
            if row["batch_size"] < 1:
                raise ValueError(f"{where}: batch_size must be >= 1, got {row['batch_size']}")
            if row["steps_to_goal"] is not None and not 1 <= row["steps_to_goal"] <= budget:
                raise ValueError(f"{where}: steps_to_goal must be in 1..max_steps ({budget}) "
                                 f"or empty, got {row['steps_to_goal']}")
            key = (r["sweep"], row["batch_size"], row["trial_id"])
            if key in seen:
                raise ValueError(f"{where}: trial {row['trial_id']} at batch size "
                                 f"{row['batch_size']} of sweep {r['sweep']!r} given twice")
            seen.add(key)
            rows.setdefault(r["sweep"], []).append(row)
    if not rows:
        raise ValueError(f"{path}: no trials")
    return [Sweep(name, curve_of_steps(r), budgets[name]) for name, r in rows.items()]


def read_sweeps(paths: list[Path]) -> list[Sweep]:
    """The sweeps of sweep directories and steps CSVs."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out.append(sweep_of_dir(p))
        elif p.is_file():
            out.extend(read_steps_csv(p))
        else:
            raise ValueError(f"{p}: neither a sweep directory nor a steps CSV")
    return out


def check_row(sweep: Sweep, first: int) -> CheckRow:
    """The check on one sweep from its first `first` trials per batch size (>= 2)."""
    if first < 2:
        raise ValueError(f"--first must be >= 2, got {first}")
    most = min(len(p.trials) for p in sweep.curve.points)
    if most < first:
        raise ValueError(f"{sweep.name}: {most} trials at some batch size, fewer than "
                         f"--first {first}")
    part = first_trials(sweep.curve, first)
    interval = b_crit_resampled(part)
    lo, hi = interval.get("p16"), interval.get("p84")
    ext = shortfall(part, sweep.max_steps)
    ext_lo, ext_hi = with_shortfall(lo, hi, ext["b_ext"])
    to = first * 2 ** DOUBLINGS
    larger = first_trials(sweep.curve, to)      # the search the statement checks against: 4K
    b_all = fit_mccandlish(larger.batch_sizes, larger.steps).b_crit if most >= to else None
    return CheckRow(sweep.name, first, most, ext["b_crit"], lo, hi, ext["b_ext"], ext_lo, ext_hi,
                    b_all, search_interval(ext["b_crit"], first))


def _yes(x) -> str:
    return "-" if x is None else ("yes" if x else "no")


def table(rows: list[CheckRow]) -> str:
    """The check as a Markdown table, then the counts."""
    k = rows[0].first if rows else 0
    f = SEARCH_FACTORS.get(k, {}).get("factor")
    search = "no search factor" if f is None else f"inside x{f:.3f}"
    lines = [f"| sweep | B_crit, first {k} (16-84%) | extrapolated to {k * 4} | with the "
             f"shortfall | B_crit, first {k * 4} | inside plain | inside with the shortfall | "
             f"extrapolation closer | {search} |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r.search or (None, None)
        lines.append(f"| {r.name} | {fmt(r.b_first)} ({fmt(r.lo)}-{fmt(r.hi)}) | {fmt(r.b_ext)} | "
                     f"{fmt(r.ext_lo)}-{fmt(r.ext_hi)} | {fmt(r.b_all)} | "
                     f"{_yes(r.inside(r.lo, r.hi))} | {_yes(r.inside(r.ext_lo, r.ext_hi))} | "
                     f"{_yes(r.closer)} | {_yes(r.inside(*s))} |")
    checked = [r for r in rows if r.b_all is not None]
    if checked:
        plain = sum(bool(r.inside(r.lo, r.hi)) for r in checked)
        wide = sum(bool(r.inside(r.ext_lo, r.ext_hi)) for r in checked)
        closer = sum(bool(r.closer) for r in checked)
        widths = [r.ext_hi / r.ext_lo for r in checked if r.ext_lo and r.ext_hi]
        plain_w = [r.hi / r.lo for r in checked if r.lo and r.hi]
        lines += ["", f"of {len(checked)} sweeps with at least {k * 4} trials: B_crit from the "
                      f"first {k * 4} inside the plain interval on {plain}, inside the interval "
                      f"with the shortfall on {wide}; the extrapolation closer than the first "
                      f"{k}'s value on {closer}; median width (hi / lo) {_median(plain_w)} plain, "
                      f"{_median(widths)} with the shortfall"]
        if any(r.search for r in checked):
            inside = sum(bool(r.inside(*r.search)) for r in checked if r.search)
            lines[-1] += f"; inside x{f:.3f} of the first {k}'s value on {inside}"
    return "\n".join(lines)


def _median(xs) -> str:
    return f"{np.median(xs):.3g}" if xs else "-"
