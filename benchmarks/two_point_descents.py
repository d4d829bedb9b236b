"""The whole-set full-batch descents of `two-point` / `two-ends` (S_fb^N): the sweep's trials at
B_ref in trial order (the baseline, what the product does) against a candidate order, the
largest full-batch step first (`descent_order` below, not shipped: docs/performance.md), on a
shipped sweep, in the same run.

Run: `python benchmarks/two_point_descents.py [--sweep sweeps/teacher_student_mlp]` (about 1 min
on the 2-core machine for the default). Both orders must give the same S_fb^N; the benchmark
prints it, the wall time of each and the descent steps each allowed (the sum of the per-trial
caps, an upper bound on the steps run), with the ratios baseline / new.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from realnets import workloads
from realnets.sweeps.records import load_sweep, read_repeats, trial_order
from realnets.validation.noise_free_match import full_batch_steps, reference_reruns
from realnets.validation.reconciliation import rerun_percentiles
from realnets.validation.rerun import mean_loss, retrain
from realnets.validation.two_ends import descent_cap, whole_set
from realnets.validation.two_point import check_inputs


def descent_order(trials, optimizer: str) -> list:
    """The candidate: the largest full-batch step first (the rate, over 1 - momentum for
    heavy-ball and Nesterov), ties in trial order. S_fb^N does not depend on the order (each
    descent is capped at the fewest steps found so far, never below them); only the cost does."""
    def step(r):
        heavy = optimizer in ("momentum", "nesterov") and r.momentum is not None
        return r.learning_rate / (1.0 - r.momentum) if heavy else r.learning_rate

    return sorted(trials, key=lambda r: (-step(r), trial_order(r.trial_id)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="sweeps/teacher_student_mlp")
    args = parser.parse_args()
    config, records = load_sweep(Path(args.sweep))
    repeats = read_repeats(Path(args.sweep))
    trial, run, _ = check_inputs(config, records, repeats)
    task = workloads.get(config.workload).build(text_file=config.text_file)
    _, goal_params = retrain(task, config, trial)
    reruns = reference_reruns(repeats, run)
    cap = descent_cap(run["sweep_steps_to_goal"], reruns, rerun_percentiles(reruns)["84"])
    rows = whole_set(task, 0)
    target = mean_loss(task, goal_params, rows)
    at_ref = [r for r in records if r.batch_size == run["batch_size"]]
    out = {}
    for name, trials in (("trial order (baseline)",
                          sorted(at_ref, key=lambda r: trial_order(r.trial_id))),
                         ("largest step first (descent_order)",
                          descent_order(at_ref, config.optimizer))):
        start = time.perf_counter()
        fb = full_batch_steps(task, config, trials, rows, target, cap)
        out[name] = (fb["steps"], time.perf_counter() - start,
                     sum(t["step_limit"] for t in fb["trials"]))
    print(f"sweep {args.sweep}: B_ref = {run['batch_size']}, {len(at_ref)} trials, "
          f"{len(next(iter(rows.values())))} rows, cap {cap} steps")
    print(f"{'order':36s} {'S_fb^N':>7s} {'wall s':>8s} {'steps allowed':>14s}")
    for name, (steps, wall, allowed) in out.items():
        print(f"{name:36s} {steps!s:>7s} {wall:8.1f} {allowed:14d}")
    (s0, w0, a0), (s1, w1, a1) = out.values()
    print(f"same S_fb^N: {s0 == s1}; ratio baseline / new: wall {w0 / w1:.2f}x, "
          f"steps allowed {a0 / a1:.2f}x")


if __name__ == "__main__":
    main()
