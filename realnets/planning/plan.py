"""The plan: time to result and device-hours for each batch size and device count, the Pareto
front of time against cost, and a recommendation in words (docs/plan.md).

Steps to result S(B) come from a sweep: at a measured batch size the measured steps ('measured');
between measured batch sizes the sweep's fit S(B) = S_min (1 + B_crit / B) ('fit'); beyond them,
up to `EXTRAPOLATE` times the largest, the same fit ('fit (extrapolated)'); never at a batch size
the sweep ran that missed the goal. Or, without a sweep over batch sizes, from its two-point
estimate (`python -m realnets two-point`, SWEEP_DIR/two_point.json, read into a `TwoPointCurve`
by `realnets.validation.two_point.plan_curve`): the curve through its two measured ends,
S_2pt(B) = S_min (1 + B_2pt / B), S_min the median full-batch end of B_2pt'(med) (else S_fb^N,
the best), at the powers of two from B_ref to the training-set size
('two-point'), with the curve at the reruns' 16th and 84th percentiles beside it (`steps_lo`,
`steps_hi`). Seconds per step come
from a throughput record (measured where that pair was measured, else its model). Then

    time_to_result_s = S(B) * t(B, n);   device_hours = n * time_to_result_s / 3600;
    cost = device_hours * price_per_device_hour (None without a price).

Time to result leaves out compilation and evaluations (the throughput record says so).

Recommendation: with a deadline, the cheapest point that meets it; with a budget, the fastest
that fits it; otherwise the fastest point on the front whose cost is at most `COST_FACTOR` times
the cheapest point's. The default echoes the critical batch size (McCandlish et al. 2018): there
both the steps and the examples are twice their minimum, so trading up to twice the least cost
for time is the usual bargain; past it each saving in time costs more than it buys.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from nqm import validation
from nqm.curve import ScalingCurve
from nqm.scaling import Fit, analyse_curve
from realnets.planning.step_time import ThroughputRecord

COST_FACTOR = 2.0
EXTRAPOLATE = 2


@dataclass(frozen=True)
class PlanPoint:
    """One (batch size, devices) option; times in seconds, cost in the price's currency."""

    batch_size: int
    devices: int
    steps: float
    seconds_per_step: float
    time_to_result_s: float
    device_hours: float
    cost: float | None
    source: str
    step_time_source: str
    steps_lo: float | None = None      # the two-point curve at the reruns' 16th percentile
    steps_hi: float | None = None      # ... and 84th (None: from a sweep, or infinite)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Recommendation:
    batch_size: int
    devices: int
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    """`to_dict()` is the JSON of `python -m realnets plan --format json`."""

    points: tuple[PlanPoint, ...]
    front: tuple[PlanPoint, ...]
    recommendation: Recommendation
    workload: str
    goal: float
    price_per_device_hour: float | None
    deadline_s: float | None
    budget: float | None
    excludes: str
    steps_from: str = "sweep"          # or "two-point"
    steps_note: str = ""               # the two-point condition's verdict

    def to_dict(self) -> dict:
        return {"workload": self.workload, "goal": self.goal,
                "steps_from": self.steps_from, "steps_note": self.steps_note,
                "price_per_device_hour": self.price_per_device_hour,
                "deadline_s": self.deadline_s, "budget": self.budget,
                "excludes": self.excludes,
                "points": [p.to_dict() for p in self.points],
                "front": [p.to_dict() for p in self.front],
                "recommendation": self.recommendation.to_dict()}


def steps_to_result(curve: ScalingCurve) -> list[tuple[int, float, str]]:
    """(batch size, steps, source) over the measured range and beyond it (module docstring):
    measured points that reached the goal, and powers of two between and up to EXTRAPOLATE times
    the largest measured batch size from the curve's McCandlish fit (`nqm.scaling`, the fit its
    curve.json holds), when there is one."""
    measured = {p.batch_size: float(p.steps) for p in curve.points if p.steps is not None}
    if not measured:
        raise ValueError("sweep: no batch size reached the goal, so there are no steps to plan "
                         "with")
    out = {b: (b, s, "measured") for b, s in measured.items()}
    # a batch size the sweep ran that missed the goal within its budget gets no fitted steps
    missed = {p.batch_size for p in curve.points if p.steps is None}
    fit = analyse_curve(curve).fit
    if fit.s_min is not None and fit.b_crit is not None and fit.b_crit > 0:
        lo, hi = min(measured), max(measured)
        between = [2 ** k for k in range(math.ceil(math.log2(lo)),
                                         math.floor(math.log2(EXTRAPOLATE * hi)) + 1)]
        for b, steps in zip(between, fit.predict(between)):
            if b not in missed:
                out.setdefault(b, (b, float(steps), "fit" if b <= hi else "fit (extrapolated)"))
    return [out[b] for b in sorted(out)]


@dataclass(frozen=True)
class TwoPointCurve:
    """The two-point estimate's two measured ends, as the plan reads them.

    b_ref: the reference batch size (examples); s_fb: the full-batch end S_min in steps on the
    whole training set (B_2pt'(med)'s median over initialisations, or S_fb^N, the fewest);
    s_ref, s_ref_p16, s_ref_p84: the reference trial's reruns' steps to the goal at B_ref,
    median, 16th and 84th percentiles (the last two None or infinite where unknown); rows: the rows of the full-batch descents (the training-set size, or the fresh
    rows of a task with unlimited data); note: the estimate's condition in words."""

    b_ref: int
    s_fb: float
    s_ref: float
    s_ref_p16: float | None
    s_ref_p84: float | None
    rows: int
    note: str = ""

    def fit(self, s_ref: float) -> Fit:
        """S(B) = s_fb (1 + B_crit / B) through (B_ref, s_ref): the McCandlish form with
        S_min = s_fb (the curve's full-batch end) and B_crit = B_ref (s_ref / s_fb - 1)."""
        return Fit(s_min=self.s_fb, b_crit=self.b_ref * (s_ref / self.s_fb - 1.0), r2=None,
                   points_used=2)


def two_point_steps(curve: TwoPointCurve, max_batch: int | None = None
                    ) -> list[tuple[int, float, str, float | None, float | None]]:
    """(batch size, steps, source, steps_lo, steps_hi) at the powers of two from B_ref to the
    curve's rows, at most `max_batch`: the module docstring's curve at the reruns' median, 16th
    and 84th percentiles (None where a percentile is unknown). ValueError where B_ref is above
    the largest batch size."""
    top = curve.rows if max_batch is None else min(curve.rows, max_batch)
    sizes = [2 ** k for k in range(math.ceil(math.log2(curve.b_ref)),
                                   math.floor(math.log2(top)) + 1)]
    if not sizes:
        raise ValueError(f"two-point: B_ref = {curve.b_ref} is above the largest batch size, "
                         f"{top}")

    def at(s_ref):
        if s_ref is None or not math.isfinite(s_ref) or s_ref <= curve.s_fb:
            return [None] * len(sizes)
        return [float(x) for x in curve.fit(s_ref).predict(sizes)]

    mid, lo, hi = at(curve.s_ref), at(curve.s_ref_p16), at(curve.s_ref_p84)
    return [(b, m, "two-point", low, high) for b, m, low, high in zip(sizes, mid, lo, hi)]


def pareto_front(points: list[PlanPoint]) -> list[PlanPoint]:
    """Points no other point beats on both time and device-hours, sorted by time."""
    ordered = sorted(points, key=lambda p: (p.time_to_result_s, p.device_hours))
    front, best_cost = [], math.inf
    for p in ordered:
        if p.device_hours < best_cost:
            front.append(p)
            best_cost = p.device_hours
    return front


def _money(p: PlanPoint) -> float:
    return p.device_hours if p.cost is None else p.cost


def _describe(p: PlanPoint) -> str:
    cost = f", cost {p.cost:.4g}" if p.cost is not None else ""
    return (f"B = {p.batch_size} on {p.devices} device{'s' if p.devices > 1 else ''}: "
            f"{p.time_to_result_s:.3g} s, {p.device_hours:.3g} device-hours{cost}")


def recommend(front: list[PlanPoint], points: list[PlanPoint], deadline_s: float | None,
              budget: float | None) -> Recommendation:
    """The recommendation rule of the module docstring, with its reason in words."""
    unit = "cost" if points[0].cost is not None else "device-hours"
    if deadline_s is not None:
        meets = [p for p in points if p.time_to_result_s <= deadline_s]
        if meets:
            pick = min(meets, key=lambda p: (_money(p), p.time_to_result_s))
            why = f"the cheapest option that meets the deadline of {deadline_s:.4g} s"
        else:
            pick = min(points, key=lambda p: (p.time_to_result_s, _money(p)))
            why = f"no option meets the deadline of {deadline_s:.4g} s; this is the fastest"
    elif budget is not None:
        fits = [p for p in points if _money(p) <= budget]
        if fits:
            pick = min(fits, key=lambda p: (p.time_to_result_s, _money(p)))
            why = f"the fastest option within the budget of {budget:.4g} {unit}"
        else:
            pick = min(points, key=lambda p: (_money(p), p.time_to_result_s))
            why = f"no option fits the budget of {budget:.4g} {unit}; this is the cheapest"
    else:
        cheapest = min(_money(p) for p in front)
        within = [p for p in front if _money(p) <= COST_FACTOR * cheapest]
        pick = min(within, key=lambda p: p.time_to_result_s)
        why = (f"the fastest option on the front that costs at most {COST_FACTOR:g}x the "
               "cheapest")
    faster = [p for p in front if p.time_to_result_s < pick.time_to_result_s]
    if faster:
        nxt = max(faster, key=lambda p: p.time_to_result_s)
        saving = 1.0 - nxt.time_to_result_s / pick.time_to_result_s
        ratio = _money(nxt) / _money(pick)
        then = (f"; B = {nxt.batch_size} on {nxt.devices} device{'s' if nxt.devices > 1 else ''} "
                f"saves {saving:.0%} of the time for {ratio:.3g}x the {unit}")
    else:
        then = "; nothing is faster"
    return Recommendation(pick.batch_size, pick.devices, f"{_describe(pick)} ({why}){then}")


def check_request(price_per_device_hour: float | None, deadline_s: float | None,
                  budget: float | None) -> None:
    """ValueError naming the field for a price, deadline or budget that is not a positive number,
    or a deadline and a budget together (the CLI and the app call it before any work)."""
    for name, value in (("price-per-device-hour", price_per_device_hour),
                        ("deadline", deadline_s), ("budget", budget)):
        if value is not None:
            validation.check_positive(name, value)
    if deadline_s is not None and budget is not None:
        raise ValueError("give at most one of the deadline and the budget")


def make_plan(curve: ScalingCurve, throughput: ThroughputRecord,
              price_per_device_hour: float | None = None, deadline_s: float | None = None,
              budget: float | None = None, train_size: int | None = None,
              two_point: TwoPointCurve | None = None) -> Plan:
    """The plan for a sweep's curve on the throughput record's devices (batch sizes above
    `train_size` left out), or, given `two_point` (from the sweep's two_point.json), for its
    two-point curve (`two_point_steps`). ValueError as `check_request`, and for a throughput
    record of another workload or optimizer."""
    check_request(price_per_device_hour, deadline_s, budget)
    if two_point is None:
        options = [(b, s, src, None, None) for b, s, src in steps_to_result(curve)]
    else:
        options = two_point_steps(two_point, train_size)
    for key, mine in (("workload", throughput.workload), ("optimizer", throughput.optimizer)):
        theirs = curve.config.get(key)
        if mine and theirs and mine != theirs:
            raise ValueError(f"throughput: measured for {key} {mine!r}, but the sweep's is "
                             f"{theirs!r}")
    points = []
    for b, steps, source, steps_lo, steps_hi in options:
        if train_size is not None and b > train_size:
            continue
        for n in throughput.device_counts():
            if b % n:
                continue
            sps, sps_source = throughput.seconds_per_step(b, n)
            seconds = steps * sps
            hours = n * seconds / 3600.0
            points.append(PlanPoint(
                batch_size=b, devices=n, steps=steps, seconds_per_step=sps,
                time_to_result_s=seconds, device_hours=hours,
                cost=None if price_per_device_hour is None else hours * price_per_device_hour,
                source=source, step_time_source=sps_source, steps_lo=steps_lo,
                steps_hi=steps_hi))
    if not points:
        raise ValueError("throughput: no measured device count divides any batch size of the "
                         "sweep")
    front = pareto_front(points)
    return Plan(points=tuple(points), front=tuple(front),
                recommendation=recommend(front, points, deadline_s, budget),
                workload=str(curve.config.get("workload", "")),
                goal=float(curve.config.get("goal", math.nan)),
                price_per_device_hour=price_per_device_hour, deadline_s=deadline_s,
                budget=budget, excludes=throughput.excludes,
                steps_from="sweep" if two_point is None else "two-point",
                steps_note="" if two_point is None else two_point.note)
