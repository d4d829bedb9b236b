"""Load the published batch_science archive (Shallue et al. 2018) as ScalingCurves.

The archive (`batch_science_data.tar.bz2`, described in google-research/google-research
`batch_science/README.md`) is laid out as

    dataset/model/optimizer/batch_size/study.json
    dataset/model/optimizer/batch_size/trial_id/metadata.json
    dataset/model/optimizer/batch_size/trial_id/measurements.csv

(a few workloads sit one level deeper, e.g. `mnist_subsets/mnist_6875/simple_cnn_base/...`).
A *workload* (dataset, model, optimizer) is one directory of *studies*, one per batch size; a study
is a metaparameter search made of *trials*. What the files hold:

- `study.json`: `batch_size`, `dataset`, `model`, `optimizer`, `early_stopping`, `train_steps`
  and `parameter_configs` (the search space). No goal: the paper's goals live in its notebook
  (e.g. `val/classification_error` 0.01 for mnist/simple_cnn_base, 0.1 for fashion_mnist, 0.3 for
  cifar_10/resnet_8, 0.25 for imagenet/resnet_50; `val/cross_entropy_error` 3.9 for lm1b), so
  `goal` must be given.
- `trial_id/metadata.json`: `parameters` (every metaparameter of the trial: `learning_rate`,
  `momentum`, schedule knobs such as `learning_rate_decay_steps`, `end_learning_rate_factor`...),
  `status` (COMPLETE, INCOMPLETE or INFEASIBLE), `steps` (steps trained), `trial_id`.
- `trial_id/measurements.csv`: one row per evaluation: `step`, then metrics such as
  `train/cross_entropy_error`, `train/classification_error`, `val/cross_entropy_error`,
  `val/classification_error`, `test/...`; the evaluation cadence need not be constant.

This module turns each workload into the same `ScalingCurve` our own sweeps write
(docs/design.md, 'Real nets' and 'Formats'), so `nqm.scaling.analyse_curve` and the app work on it
unchanged. Only JSON and CSV are read (csv module); nothing is unpickled.

References:
  Shallue et al. 2018, "Measuring the effects of data parallelism on neural network training"
  (JMLR 20(112), 2019), section 3: steps to result; data: google-research/google-research
  `batch_science/`.
"""

from __future__ import annotations

import csv
import json
import math
import numbers
import os
from pathlib import Path

from nqm import validation
from nqm.curve import CurvePoint, ScalingCurve
from realnets.sweeps.records import located

STATUSES = ("COMPLETE", "INCOMPLETE", "INFEASIBLE")
STEP_COLUMN = "step"
# Default metric, in order of preference (the paper's goals are mostly on validation error).
DEFAULT_METRICS = ("val/classification_error", "val/cross_entropy_error")
STUDY_FILE, TRIAL_FILE, MEASUREMENTS_FILE = "study.json", "metadata.json", "measurements.csv"
LAYOUT = "dataset/model/optimizer/batch_size/{study.json, trial_id/metadata.json, trial_id/measurements.csv}"


def load_batch_science(root, goal: float | None = None,
                       metric: str | None = None) -> list[ScalingCurve]:
    """One ScalingCurve per workload (dataset, model, optimizer) found under `root`.

    Steps to result for a batch size is the first evaluation step at which *any* trial's metric
    is <= goal (None if no trial gets there); the point's learning rate and momentum are those of
    that trial (ties at one step go to the lowest trial id). Every trial of the study is kept in
    `CurvePoint.trials`, in the trial-record format of our own sweeps (`trials.jsonl`):
    `{batch_size, trial_id, status, learning_rate, momentum, final_lr_fraction, steps_to_goal,
    steps_run, eval: {step: [...], metric: [...]}, seed: None, metaparameters: {...}}`, plus
    `decay_steps` when the trial's rate decays over a given number of steps. The published linear
    decay maps onto ours: `end_learning_rate_factor` -> final_lr_fraction (1.0 when absent: a
    constant rate), `learning_rate_decay_steps` -> decay_steps.

    Statuses are mapped onto ours (COMPLETE = reached the goal, INCOMPLETE = ran without reaching
    it, INFEASIBLE = diverged):
      - published INFEASIBLE (diverged at some point), or any `nan`/`inf` value in the trial's
        measurements -> INFEASIBLE, steps_to_goal None, never counted for steps to result (as in
        the paper's analysis, which leaves infeasible trials out);
      - otherwise (published COMPLETE or INCOMPLETE) -> COMPLETE if its metric reaches the goal at
        a measured step, else INCOMPLETE. A published INCOMPLETE trial (stopped early for some
        reason) that got to the goal before stopping did reach it, so it counts.
    Non-finite numbers become None; an empty cell is None too.

    Args:
      root: the archive root, or any directory inside it above the batch-size level (a dataset,
        dataset/model, or dataset/model/optimizer directory), or a single batch-size directory
        (then one curve of one point). Every `study.json` below `root` is a study; its parent
        directory is its workload. Hidden directories are skipped.
      goal: the target value of `metric` (lower is better). Required: the published study.json
        records no goal.
      metric: a measurements.csv column; default `val/classification_error` if the workload has
        it, else `val/cross_entropy_error`. Higher-is-better metrics (e.g. Open Images'
        `val/average_precision`) are not supported: `<= goal` would be the wrong test.

    Returns:
      Curves sorted by workload directory, `source="batch_science"`, `config` =
      {dataset, model, optimizer (from study.json), metric, goal, root (absolute), workload_dir
      (absolute path of the workload directory)}.

    Raises:
      ValueError: naming the parameter or path, for a missing root, no study under it, a missing
        or non-numeric goal, an unknown metric (the available columns are listed), corrupt JSON,
        an unknown status, a CSV without a `step` column or with a bad value, or a batch-size
        directory not named by a positive integer.
    """
    root_path = _check_root(root)
    goal = _check_goal(goal)
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise ValueError(f"metric must be a measurements.csv column name (a string), got {metric!r:.80}")
    workloads = _find_workloads(root_path)
    return [_load_workload(workload_dir, study_dirs, goal, metric, root_path)
            for workload_dir, study_dirs in workloads.items()]


# ----------------------------------------------------------------------------------------------
# Arguments and discovery


def _check_root(root) -> Path:
    try:
        path = Path(os.fspath(root))
    except TypeError:
        raise ValueError(f"root must be a path to a batch_science directory, got {root!r:.80}") from None
    if not path.exists():
        raise ValueError(f"root {str(path)!r} does not exist; expected a directory laid out as {LAYOUT}")
    if not path.is_dir():
        raise ValueError(f"root {str(path)!r} is not a directory; expected a directory laid out as {LAYOUT}")
    return path.resolve()


def _check_goal(goal) -> float:
    if goal is None:
        raise ValueError(
            "goal is required: the published batch_science study.json records no goal; pass "
            "goal=<target value of the metric> (the paper used e.g. val/classification_error 0.01 "
            "for mnist/simple_cnn_base, val/cross_entropy_error 3.9 for lm1b)")
    if isinstance(goal, bool) or not isinstance(goal, numbers.Real) or not math.isfinite(goal):
        raise ValueError(f"goal must be a finite number (target value of the metric), got {goal!r:.80}")
    return float(goal)


def _find_workloads(root: Path) -> dict[Path, list[Path]]:
    """{workload directory: [study directories]}, both sorted; raises if there is no study."""
    if (root / STUDY_FILE).is_file():
        study_dirs = [root]
    else:
        study_dirs = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            if STUDY_FILE in filenames:
                study_dirs.append(Path(dirpath))
                dirnames[:] = []  # below a study are only its trials
    if not study_dirs:
        raise ValueError(f"no studies found under root {str(root)!r}: no {STUDY_FILE} in any directory; "
                         f"expected the layout {LAYOUT}")
    workloads: dict[Path, list[Path]] = {}
    for study_dir in study_dirs:
        workloads.setdefault(study_dir.parent, []).append(study_dir)
    return {w: workloads[w] for w in sorted(workloads)}


def _batch_size_of(study_dir: Path) -> int:
    name = study_dir.name
    if not (name.isascii() and name.isdigit() and int(name) > 0):
        raise ValueError(f"batch-size directory {str(study_dir)!r} must be named by a positive integer "
                         f"(layout {LAYOUT}), got {name!r}")
    return int(name)


def _trial_dirs(study_dir: Path) -> list[Path]:
    """Trial subdirectories, numeric names in numeric order first, then the rest by name."""
    dirs = [p for p in study_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if not dirs:
        raise ValueError(f"study directory {str(study_dir)!r} has no trial directories "
                         f"(expected trial_id/{TRIAL_FILE} and trial_id/{MEASUREMENTS_FILE})")
    return sorted(dirs, key=lambda p: (0, int(p.name), "") if p.name.isdigit() else (1, 0, p.name))


# ----------------------------------------------------------------------------------------------
# Files


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"{str(path)!r} is missing (layout {LAYOUT})")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{str(path)!r} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{str(path)!r} must hold a JSON object, got {type(data).__name__}")
    return data


def _finite_or_none(value):
    """JSON-safe copy: non-finite floats to None, recursively."""
    if isinstance(value, dict):
        return {str(k): _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _number_or_none(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _csv_header(path: Path) -> list[str]:
    """The column names of a measurements.csv; raises if there is no `step` column."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), None)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ValueError(f"{str(path)!r} is not a readable CSV: {err}") from None
    header = [h.strip() for h in header or []]
    if STEP_COLUMN not in header:
        raise ValueError(f"{str(path)!r} has no {STEP_COLUMN!r} column (its columns: {header}); "
                         f"a measurements.csv needs one row per evaluation with its step")
    return header


def _parse_cell(text: str) -> tuple[float | None, bool]:
    """(value, non_finite): '' -> (None, False); 'nan'/'inf' -> (None, True); raises on junk."""
    text = text.strip()
    if not text:
        return None, False
    value = float(text)
    return (value, False) if math.isfinite(value) else (None, True)


def _read_measurements(path: Path, metric: str) -> tuple[list[str], list[int], list[float | None], bool]:
    """(header, steps, metric values, any non-finite value in any column), rows sorted by step.

    A file without a `metric` column gives None values (the caller decides whether that is fine).
    """
    header = _csv_header(path)
    i_step = header.index(STEP_COLUMN)
    i_metric = header.index(metric) if metric in header else None
    rows: list[tuple[int, float | None]] = []
    non_finite = False
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        next(reader)
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise ValueError(f"{str(path)!r} line {line}: {len(row)} fields, the header has {len(header)}")
            try:
                step = float(row[i_step])
            except ValueError:
                step = row[i_step]         # named as it is in the error below
            step = located(f"{str(path)!r} line {line}", validation.check_whole, "step", step, 0)
            value = None
            for i, cell in enumerate(row):
                if i == i_step:
                    continue
                try:
                    parsed, bad = _parse_cell(cell)
                except ValueError:
                    if i == i_metric:
                        raise ValueError(f"{str(path)!r} line {line}: {metric} must be a number, "
                                         f"got {cell!r}") from None
                    continue  # a non-numeric column we do not use
                non_finite |= bad
                if i == i_metric:
                    value = parsed
            rows.append((step, value))
    rows.sort(key=lambda r: r[0])  # stable: equal steps keep file order
    return header, [r[0] for r in rows], [r[1] for r in rows], non_finite


# ----------------------------------------------------------------------------------------------
# Workloads, studies, trials


def _choose_metric(workload_dir: Path, headers: list[list[str]], metric: str | None) -> str:
    available = sorted({c for h in headers for c in h} - {STEP_COLUMN})
    if metric is None:
        for candidate in DEFAULT_METRICS:
            if candidate in available:
                return candidate
        raise ValueError(f"metric: none of the default columns {list(DEFAULT_METRICS)} is in the "
                         f"measurements under {str(workload_dir)!r}; pass metric= one of {available}")
    if metric not in available:
        raise ValueError(f"metric {metric!r} is not a measurements.csv column under "
                         f"{str(workload_dir)!r}; available: {available}")
    return metric


def _load_workload(workload_dir: Path, study_dirs: list[Path], goal: float, metric: str | None,
                   root: Path) -> ScalingCurve:
    # Pass 1: study files, trial directories and CSV headers (to choose the metric).
    studies = []
    seen: dict[int, Path] = {}
    for study_dir in study_dirs:
        batch_size = _batch_size_of(study_dir)
        if batch_size in seen:
            raise ValueError(f"batch-size directories {str(seen[batch_size])!r} and {str(study_dir)!r} "
                             f"both hold batch size {batch_size}")
        seen[batch_size] = study_dir
        study = _read_json(study_dir / STUDY_FILE)
        recorded = study.get("batch_size", batch_size)
        if _number_or_none(recorded) != batch_size:
            raise ValueError(f"{str(study_dir / STUDY_FILE)!r}: batch_size {recorded!r} disagrees with "
                             f"its directory name {study_dir.name!r}")
        studies.append((batch_size, study_dir, study, _trial_dirs(study_dir)))
    headers = [_csv_header(t / MEASUREMENTS_FILE)
               for _, _, _, trials in studies for t in trials if (t / MEASUREMENTS_FILE).is_file()]
    metric = _choose_metric(workload_dir, headers, metric)

    # Pass 2: trials and points.
    points = [_load_study(batch_size, trial_dirs, goal, metric)
              for batch_size, _, _, trial_dirs in studies]

    names = {}
    for key, fallback in (("dataset", workload_dir.parent.parent.name),
                          ("model", workload_dir.parent.name), ("optimizer", workload_dir.name)):
        values = {str(s[2][key]) for s in studies if key in s[2]}
        if len(values) > 1:
            raise ValueError(f"the studies under {str(workload_dir)!r} disagree on {key}: {sorted(values)}")
        names[key] = values.pop() if values else fallback
    config = {**names, "metric": metric, "goal": goal, "root": str(root),
              "workload_dir": str(workload_dir)}
    return ScalingCurve(points=tuple(points), source="batch_science", config=config)


def _load_study(batch_size: int, trial_dirs: list[Path], goal: float, metric: str) -> CurvePoint:
    records = [_load_trial(batch_size, trial_dir, goal, metric) for trial_dir in trial_dirs]
    reached = [r for r in records if r["steps_to_goal"] is not None]
    if not reached:
        return CurvePoint(batch_size=batch_size, steps=None, trials=tuple(records))
    # min() keeps the first of equal steps: trials are in trial-id order, so the lowest id wins.
    best = min(reached, key=lambda r: r["steps_to_goal"])
    return CurvePoint(batch_size=batch_size, steps=best["steps_to_goal"],
                      learning_rate=best["learning_rate"], momentum=best["momentum"],
                      trials=tuple(records))


def _load_trial(batch_size: int, trial_dir: Path, goal: float, metric: str) -> dict:
    meta_path = trial_dir / TRIAL_FILE
    meta = _read_json(meta_path)
    published = meta.get("status")
    if published not in STATUSES:
        raise ValueError(f"{str(meta_path)!r}: status must be one of {list(STATUSES)}, got {published!r:.80}")
    parameters = meta.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ValueError(f"{str(meta_path)!r}: parameters must be a JSON object, got {parameters!r:.80}")
    parameters = _finite_or_none(parameters)

    csv_path = trial_dir / MEASUREMENTS_FILE
    if csv_path.is_file():
        header, steps, values, non_finite = _read_measurements(csv_path, metric)
        if metric not in header and published != "INFEASIBLE" and not non_finite:
            raise ValueError(f"{str(csv_path)!r} has no {metric!r} column (metric) although other "
                             f"trials of its workload do; its columns: {header}")
    elif published == "INFEASIBLE":
        steps, values, non_finite = [], [], True  # a diverged run may have left no measurements
    else:
        raise ValueError(f"{str(csv_path)!r} is missing (layout {LAYOUT})")

    steps_run = meta.get("steps")
    if steps_run is None:
        steps_run = steps[-1] if steps else 0
    else:
        steps_run = located(repr(str(meta_path)), validation.check_whole, "steps", steps_run, 0)

    momentum = _number_or_none(parameters.get("momentum"))
    if momentum is None and _number_or_none(parameters.get("one_minus_momentum")) is not None:
        momentum = 1.0 - parameters["one_minus_momentum"]
    final_lr_fraction, decay_steps = _linear_decay(parameters, meta_path)

    if published == "INFEASIBLE" or non_finite:
        status, steps_to_goal = "INFEASIBLE", None
    else:
        steps_to_goal = next((s for s, v in zip(steps, values) if v is not None and v <= goal), None)
        status = "INCOMPLETE" if steps_to_goal is None else "COMPLETE"

    trial_id = meta.get("trial_id", trial_dir.name)
    return {"batch_size": batch_size,
            "trial_id": str(trial_id),
            "status": status,
            "learning_rate": _number_or_none(parameters.get("learning_rate")),
            "momentum": momentum,
            "final_lr_fraction": final_lr_fraction,
            **({} if decay_steps is None else {"decay_steps": decay_steps}),
            "steps_to_goal": steps_to_goal,
            "steps_run": int(steps_run),
            "eval": {"step": steps, "metric": values},
            "seed": None,
            "metaparameters": parameters}


def _linear_decay(parameters: dict, meta_path: Path) -> tuple[float, int | None]:
    """(final_lr_fraction, decay_steps) of a trial's linear decay, in our trial-record names:
    the published `end_learning_rate_factor` (the rate ends at that fraction of
    `learning_rate`) and `learning_rate_decay_steps` (the steps it takes to get there); 1.0 and
    None for a constant rate (neither parameter present)."""
    where = repr(str(meta_path))
    final, steps = 1.0, None
    if "end_learning_rate_factor" in parameters:   # present but non-finite (None here) is refused
        final = located(where, validation.check_in_range, "end_learning_rate_factor",
                        parameters["end_learning_rate_factor"], 0.0, 1.0)
    if "learning_rate_decay_steps" in parameters:
        if "end_learning_rate_factor" not in parameters:
            raise ValueError(f"{where}: learning_rate_decay_steps needs an end_learning_rate_factor "
                             "(in [0, 1]): without one the rate is constant")
        steps = located(where, validation.check_whole, "learning_rate_decay_steps",
                        parameters["learning_rate_decay_steps"], 1)
    return float(final), steps
