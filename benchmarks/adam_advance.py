"""The compiled mean-field Adam march (`MeanFieldAdam.advance`, `nqm.adam_kernels.advance_rows`)
against the numpy form it replaced (`MeanFieldAdam.advance_reference`), measured in the same run
on the tuning `python -m realnets validate` does for an Adam sweep.

Run: `python benchmarks/adam_advance.py` (495 s in the run docs/nqm_adam.md shows, on the busy
2-core machine; `--quick`: the small case alone, a few seconds). For each case the calibrated NQM a shipped report stores
(`reports/validation/<name>/validation.json`, its checkpoint's fitted NQM at the step-matched
target) is tuned by `tune_curve(..., certify=True)` over the sweep's batch sizes and search space,
as the validation tunes it: once with the compiled `advance` and once with
`adam.MeanFieldAdam.advance` swapped for `advance_reference` (`mock.patch`), after one warm-up
call that loads the kernels. Prints the wall time of each, the ratio new / old, and whether both
chose the same steps, learning rates and b1 at every batch size (compared exactly).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from unittest import mock

from nqm import adam, adam_kernels
from nqm.optimizer_spec import SearchSpace
from nqm.tuning import tune_curve
from realnets.validation.bootstrap import fitted_nqm
from realnets.validation.targets import nqm_optimizer

REPORTS = Path(__file__).resolve().parent.parent / "reports" / "validation"
CASES = (("digits_mlp_adam", "goal"), ("multilabel_mlp", "goal"), ("multilabel_mlp", "init"))


def tuning(report: str, checkpoint: str):
    """A function tuning the report's calibrated NQM at `checkpoint` as validate does, and its
    number of mean-field directions (d times the 4 start nodes)."""
    doc = json.loads((REPORTS / report / "validation.json").read_text())
    record = doc["checkpoints"][checkpoint]
    config = fitted_nqm(record["nqm"], record["predictions"]["step_matched"]["target"])
    search = doc["sweep_config"]["search"]
    space = SearchSpace(learning_rate=tuple(search["learning_rate"]),
                        one_minus_momentum=tuple(search["one_minus_momentum"]))
    spec = nqm_optimizer("adam", space)
    batch_sizes = doc["sweep_config"]["batch_sizes"]
    max_steps = doc["settings"]["nqm_max_steps"]

    def run():
        curve = tune_curve(config, spec, batch_sizes, max_steps=max_steps, space=space,
                           certify=True)
        return [(p.batch_size, p.steps, p.learning_rate, p.momentum) for p in curve.points]

    return run, 4 * config.dim


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the digits_mlp_adam case alone")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    warm, _ = tuning(*CASES[0])
    _, seconds = timed(warm)
    print(f"warm-up (kernel compile or cache load, one small tuning): {seconds:.1f} s")
    print(f"{'report':>16} {'checkpoint':>10} {'d x 4':>6} {'numpy_s':>8} {'compiled_s':>10} "
          f"{'new/old':>7} same_points")
    for report, checkpoint in CASES[:1] if args.quick else CASES:
        run, directions = tuning(report, checkpoint)
        new, t_new = timed(run)
        with mock.patch.object(adam.MeanFieldAdam, "advance", adam.MeanFieldAdam.advance_reference):
            old, t_old = timed(run)
        print(f"{report:>16} {checkpoint:>10} {directions:>6} {t_old:>8.1f} {t_new:>10.1f} "
              f"{t_new / t_old:>7.2f} {new == old}")
    print(f"({time.perf_counter() - start:.0f} s; numba {adam_kernels.numba.__version__})")


if __name__ == "__main__":
    main()
