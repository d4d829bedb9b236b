"""How much a sparser noise-scale cadence costs in accuracy on one device, against its speed.

Run: `python benchmarks/noise_cadence.py` (about 2 min; `--quick`: 3 seeds, 600 steps, ~40 s).

On one device the trainer measures B_simple = tr(Sigma) / |G|^2 from the two halves of the batch
and averages numerator and denominator separately (moving averages, decay 0.99 per step,
`realnets.training.gradient_noise`). Measuring only every k-th step makes training cheaper but the
averages then hold fewer measurements: (1 + d) / (1 - d) with d = 0.99^k, i.e. ~199 at k = 1,
~25 at k = 8, ~12 at k = 16. At a small batch the |G|^2 estimate is dominated by noise, so the
ratio of the averages is biased upward and can even come out undefined (a negative |G|^2
average: b_simple None) when they hold few measurements.

For each seed and cadence, mnist_mlp trains at B = 16 (momentum 0.9, lr 0.02) and the estimate at
the last step is set against the truth at that run's own final parameters, from per-example
gradients over the whole training set (`realnets.calibration.gradient_stats.gradient_statistics`). The runs of one
seed make the same updates up to float rounding (a measuring step averages two half-batch
gradients, the others take one full-batch gradient), so they drift apart over the steps: each run
gets its own truth. The moving average also spans the last ~100 steps, so even k = 1 differs from
it. Printed: each estimate and truth, and per cadence the median |log10(estimate / truth)| and how
many estimates were undefined. Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import jax
import numpy as np

from realnets.calibration import gradient_stats

from realnets import workloads
from realnets.training.trainer import RunConfig, TrialSpec, run_trials

BATCH_SIZE, LEARNING_RATE, MOMENTUM = 16, 0.02, 0.9
CADENCES = (1, 4, 8, 16)


def final_estimate(task, seed: int, steps: int, every: int, params_out=None):
    """The trainer's B_simple at the last step (None if undefined) and the run's wall time."""
    config = RunConfig(batch_size=BATCH_SIZE, max_steps=steps, goal=-1.0, optimizer="momentum",
                       seed=seed, eval_resolution=1.0, noise_every=every)
    start = time.perf_counter()
    (record,) = run_trials(task, config, [TrialSpec(0, LEARNING_RATE, MOMENTUM)],
                           devices=jax.devices()[:1], final_params=params_out)
    return record["noise_scale"]["b_simple"][-1], time.perf_counter() - start


def truth(task, params, train) -> float:
    return float(gradient_stats.gradient_statistics(task.loss_fn, params, train,
                                               chunk_rows=512).b_simple)


def log_error(estimate, reference):
    if estimate is None or reference is None or estimate <= 0 or reference <= 0:
        return None
    return abs(math.log10(estimate / reference))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, 600 steps")
    args = parser.parse_args()
    seeds, steps = (range(3), 600) if args.quick else (range(8), 1500)
    task = workloads.get("mnist_mlp").build()
    train = {k: np.asarray(v) for k, v in task.train.items()}
    final_estimate(task, 0, 2, 1)                       # compile outside the timings
    final_estimate(task, 0, 2, 2)
    print(f"mnist_mlp, B = {BATCH_SIZE}, {steps} steps, lr {LEARNING_RATE}, momentum {MOMENTUM}; "
          f"B_simple at the last step (moving averages, decay 0.99 per step)")
    print(f"{'seed':>4} " + " ".join(f"{'k=' + str(k) + ' est/truth':>18}" for k in CADENCES))
    errors = {k: [] for k in CADENCES}
    undefined = {k: 0 for k in CADENCES}
    times = {k: [] for k in CADENCES}
    for seed in seeds:
        cells = []
        for k in CADENCES:
            params = []
            value, wall = final_estimate(task, seed, steps, k, params)
            times[k].append(wall)
            true = truth(task, params[0], train)
            error = log_error(value, true)
            if error is None:
                undefined[k] += 1
            else:
                errors[k].append(error)
            cells.append(f"{'-' if value is None else f'{value:.0f}'}/{true:.0f}")
        print(f"{seed:>4} " + " ".join(f"{c:>18}" for c in cells))
    print(f"\n{'cadence':>8} {'vs truth':>9} {'undefined':>10} {'wall s/run':>11}")
    for k in CADENCES:
        median = statistics.median(errors[k]) if errors[k] else float("nan")
        print(f"{'k=' + str(k):>8} {median:9.2f} {undefined[k]:>6}/{len(seeds)} "
              f"{statistics.median(times[k]):11.2f}")
    print("(median |log10(estimate / truth)|: 0.30 is a factor of 2)")


if __name__ == "__main__":
    main()
