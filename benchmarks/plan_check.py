"""The plan against reality: the best trial of each batch size of a sweep, rerun alone on this
machine to its goal, timed, beside what `python -m realnets plan` predicts for it.

Run: `python benchmarks/plan_check.py --sweep sweeps/mnist_mlp` (about 2 minutes here).

1. The step time is measured as `python -m realnets throughput` does (one device, the sweep's
   batch sizes) and the plan is made from the sweep and that measurement (realnets.planning).
2. For each batch size, the sweep's best trial (its learning rate, momentum, trial id and so its
   initialisation, the sweep's data order) is trained alone for the steps the sweep measured,
   S, as a production run would be: evaluated at steps 1, 2, 4, ... and S only (the sweep's
   dense evaluations, every step early on, each wait for the step before it and slow the steps
   themselves). It runs twice: the first run compiles; the second, warm, is the one timed. Its
   time to result is the wall time of its training steps, first to last (evaluations left out,
   as the plan leaves them out; `timing` of `run_trials`).
3. Printed per batch size: the sweep's S and the metric the rerun reached at S against the goal;
   the measured time against the plan's (`time_to_result_s`) and against the plan's step-time
   model alone (model step time x S), their ratios; and what the plan leaves out (compilation,
   evaluations). The plan holds where the ratio is within 0.8..1.2.

Nothing is asserted by the test suite; docs/plan.md records a run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from realnets import workloads  # noqa: E402
from realnets.planning.plan import make_plan  # noqa: E402
from realnets.planning.throughput import measure_throughput  # noqa: E402
from realnets.sweeps.curve import best_trial, build_curve, curve_document  # noqa: E402
from realnets.sweeps.records import load_sweep  # noqa: E402
from realnets.training.trainer import RunConfig, TrialSpec, run_trials  # noqa: E402

TOLERANCE = 0.2


def rerun(task, config, record) -> dict:
    """The best trial trained alone for its steps to result, twice; the second (warm) run's
    timing and its metric at the last step."""
    spec = TrialSpec(record.trial_id, record.learning_rate, record.momentum,
                     record.final_lr_fraction)
    # the budget is the sweep's: a decaying schedule must decay as it did there
    run = RunConfig(batch_size=record.batch_size, max_steps=config.max_steps, goal=-1e30,
                    optimizer=config.optimizer, seed=config.seed, eval_resolution=1.0,
                    max_rows_per_device=config.max_rows_per_device, noise_every=0,
                    stop_after=record.steps_to_goal)
    cold: dict = {}
    run_trials(task, run, [spec], timing=cold)
    warm: dict = {}
    [out] = run_trials(task, run, [spec], timing=warm)
    return {"metric": out["eval"]["metric"][-1], "steps": out["steps_run"],
            "seconds": warm["first_step_seconds"]
            + warm["train_seconds"], "eval_seconds": warm["eval_seconds"],
            "compile_seconds": cold["first_step_seconds"] - warm["first_step_seconds"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default=str(ROOT / "sweeps" / "mnist_mlp"))
    parser.add_argument("--batch-sizes", help="a subset, e.g. 16,256 (default: every reached)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    config, records = load_sweep(Path(args.sweep))
    curve = build_curve(records, config)
    fit = curve_document(curve).fit
    task = workloads.get(config.workload).build(text_file=config.text_file)
    reached = [p.batch_size for p in curve.points if p.steps is not None]
    if args.batch_sizes:
        wanted = {int(b) for b in args.batch_sizes.split(",")}
        reached = [b for b in reached if b in wanted]
    throughput = measure_throughput(task, config.workload, config.optimizer, reached, [1],
                                    max_rows_per_device=config.max_rows_per_device)
    plan = make_plan(curve, fit, throughput, train_size=task.train_size)
    predicted = {p.batch_size: p for p in plan.points if p.devices == 1}
    print(f"{config.workload}: goal {config.goal:g}, sweep {args.sweep}, one device "
          f"({throughput.platform})")
    print(f"{'B':>6} {'steps':>6} {'metric':>8} {'plan_s':>8} {'measured_s':>10} {'ratio':>6} "
          f"{'model_s':>8} {'ratio':>6} {'eval_s':>7} {'compile_s':>9}")
    ratios = []
    for b in reached:
        best = best_trial([r for r in records if r.batch_size == b])
        got = rerun(task, config, best)
        plan_s = predicted[b].time_to_result_s
        model_s = float(throughput.model.seconds_per_step(b, 1)) * predicted[b].steps
        ratio = got["seconds"] / plan_s
        ratios.append(ratio)
        assert got["steps"] == best.steps_to_goal
        print(f"{b:>6} {best.steps_to_goal:>6} {got['metric']:>8.4g} {plan_s:>8.3g} "
              f"{got['seconds']:>10.3g} {ratio:>6.3f} {model_s:>8.3g} "
              f"{got['seconds'] / model_s:>6.3f} {got['eval_seconds']:>7.3g} "
              f"{got['compile_seconds']:>9.3g}")
    inside = sum(abs(r - 1.0) <= TOLERANCE for r in ratios)
    print(f"measured / plan within {1 - TOLERANCE:.1f}..{1 + TOLERANCE:.1f} at {inside} of "
          f"{len(ratios)} batch sizes; the plan recommends {plan.recommendation.reason}")
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
