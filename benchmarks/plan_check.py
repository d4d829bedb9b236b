"""The plan against reality: the best trial of each batch size of a sweep, rerun alone on this
machine to its goal, timed, beside what `python -m realnets plan` predicts for it.

Run: `python benchmarks/plan_check.py --sweep sweeps/mnist_mlp` (about 2 minutes here).

1. The step time is measured as `python -m realnets throughput` does (one device, the sweep's
   batch sizes) and the plan is made from the sweep and that measurement (realnets.planning).
2. For each batch size, the sweep's best trial (its learning rate, momentum, trial id and so its
   initialisation, the sweep's data order) is rerun alone, twice over:
   a. for the steps the sweep measured, S, as a production run would be: evaluated at steps 1,
      2, 4, ... and S only, four times (the first run compiles; the next three, warm, are timed:
      the wall time of their training steps, evaluations left out as the plan leaves them out;
      `timing` of `run_trials`). Their median is the real seconds per step over a whole run;
      their range shows how much this machine's speed moves from run to run.
   b. to the goal, evaluated at the sweep's cadence: the steps this rerun needs, S'. A rerun need
      not cross the goal where the sweep's best trial did: S is the first crossing of a noisy
      metric, the best of the sweep's trials, and the rerun differs in floating point (one trial
      instead of a vmapped group, one gradient instead of the two half-batch gradients that
      measure the noise scale), which a noisy trajectory amplifies.
   The measured time to result is S' x (a)'s seconds per step.
3. Printed per batch size: S, the metric at S against the goal, S'; the plan's time
   (`time_to_result_s` = S x its step time) and the measured one, their ratio; the plan's step
   time against (a)'s; and what the plan leaves out (compilation, evaluations). The plan holds
   where the ratio of times is within 0.8..1.2.

Nothing is asserted by the test suite; docs/plan.md records a run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from realnets import workloads  # noqa: E402
from realnets.planning.plan import make_plan  # noqa: E402
from realnets.planning.throughput import measure_throughput  # noqa: E402
from realnets.sweeps.curve import best_trial, build_curve  # noqa: E402
from realnets.sweeps.records import load_sweep  # noqa: E402
from realnets.training.trainer import RunConfig, TrialSpec, run_trials  # noqa: E402

TOLERANCE = 0.2
WARM_RUNS = 3


def _spec(record) -> TrialSpec:
    return TrialSpec(record.trial_id, record.learning_rate, record.momentum,
                     record.final_lr_fraction)


def production_run(task, config, record) -> dict:
    """(a): the best trial for its S steps, evaluated at 1, 2, 4, ..., S; the warm run's timing
    and its metric at S. The budget is the sweep's, so a decaying schedule decays as there."""
    run = RunConfig(batch_size=record.batch_size, max_steps=config.max_steps, goal=-1e30,
                    optimizer=config.optimizer, seed=config.seed, eval_resolution=1.0,
                    max_rows_per_device=config.max_rows_per_device, noise_every=0,
                    stop_after=record.steps_to_goal)
    cold: dict = {}
    run_trials(task, run, [_spec(record)], timing=cold)
    per_step, warm = [], {}
    for _ in range(WARM_RUNS):
        [out] = run_trials(task, run, [_spec(record)], timing=warm)
        per_step.append((warm["first_step_seconds"] + warm["train_seconds"])
                        / (warm["train_steps"] + 1))
    return {"metric": out["eval"]["metric"][-1], "seconds_per_step": float(np.median(per_step)),
            "spread": (min(per_step), max(per_step)), "eval_seconds": warm["eval_seconds"],
            "compile_seconds": cold["first_step_seconds"] - warm["first_step_seconds"]}


def steps_to_goal(task, config, record) -> int | None:
    """(b): the best trial rerun alone to the goal at the sweep's evaluation cadence."""
    run = RunConfig(batch_size=record.batch_size, max_steps=config.max_steps, goal=config.goal,
                    optimizer=config.optimizer, seed=config.seed,
                    eval_resolution=config.eval_resolution,
                    max_rows_per_device=config.max_rows_per_device, noise_every=0)
    [out] = run_trials(task, run, [_spec(record)])
    return out["steps_to_goal"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default=str(ROOT / "sweeps" / "mnist_mlp"))
    parser.add_argument("--batch-sizes", help="a subset, e.g. 16,256 (default: every reached)")
    args = parser.parse_args(argv)
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    start = time.perf_counter()
    config, records = load_sweep(Path(args.sweep))
    curve = build_curve(records, config)
    task = workloads.get(config.workload).build(text_file=config.text_file)
    reached = [p.batch_size for p in curve.points if p.steps is not None]
    if args.batch_sizes:
        wanted = {int(b) for b in args.batch_sizes.split(",")}
        reached = [b for b in reached if b in wanted]
    throughput = measure_throughput(task, config.workload, config.optimizer, reached, [1],
                                    max_rows_per_device=config.max_rows_per_device)
    plan = make_plan(curve, throughput, train_size=task.train_size)
    predicted = {p.batch_size: p for p in plan.points if p.devices == 1}
    print(f"{config.workload}: goal {config.goal:g}, sweep {args.sweep}, one device "
          f"({throughput.platform})")
    print(f"{'B':>6} {'S':>6} {'metric@S':>8} {'S_rerun':>7} {'plan_s':>8} {'measured_s':>10} "
          f"{'ratio':>6} {'plan_ms':>8} {'run_ms':>7} {'run_range_ms':>13} {'eval_s':>7} "
          f"{'compile_s':>9}")
    ratios, measured_s = [], {}
    for b in reached:
        best = best_trial([r for r in records if r.batch_size == b])
        run = production_run(task, config, best)
        again = steps_to_goal(task, config, best)
        plan_s = predicted[b].time_to_result_s
        measured = None if again is None else again * run["seconds_per_step"]
        ratio = None if measured is None else measured / plan_s
        if measured is not None:
            measured_s[b] = measured
        ratios.append(ratio)
        cell = (lambda x, f: "-" if x is None else format(x, f))
        print(f"{b:>6} {best.steps_to_goal:>6} {run['metric']:>8.4g} {cell(again, 'd'):>7} "
              f"{plan_s:>8.3g} {cell(measured, '.3g'):>10} {cell(ratio, '.3f'):>6} "
              f"{predicted[b].seconds_per_step * 1e3:>8.3g} {run['seconds_per_step'] * 1e3:>7.3g} "
              f"{run['spread'][0] * 1e3:>6.3g}-{run['spread'][1] * 1e3:<6.3g} "
              f"{run['eval_seconds']:>7.3g} {run['compile_seconds']:>9.3g}")
    inside = sum(r is not None and abs(r - 1.0) <= TOLERANCE for r in ratios)
    print(f"measured / plan time within {1 - TOLERANCE:.1f}..{1 + TOLERANCE:.1f} at {inside} of "
          f"{len(ratios)} batch sizes; the plan recommends {plan.recommendation.reason}")
    rec = plan.recommendation.batch_size
    if measured_s and rec in measured_s:
        fastest = min(measured_s, key=measured_s.get)
        print(f"measured: the recommended B = {rec} took {measured_s[rec]:.3g} s; the fastest "
              f"measured, B = {fastest}, {measured_s[fastest]:.3g} s "
              f"({measured_s[rec] / measured_s[fastest]:.2f}x; one device, so cost goes as time)")
    print(f"({time.perf_counter() - start:.0f} s; load average before: {load_before})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
