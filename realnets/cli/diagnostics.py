"""The commands that read validation reports (and the summary beside them) or add records
beside them: `swap-optimizer`, `adam-basis`, `two-ends`, `miss-split`, `tuning-check` and
`summary`, with `two-point` (the two-point estimate on a sweep, written beside it), and their
helpers: finding a report's sweep, labelling table rows, running two-ends and miss-split on one
report (`_two_ends_of` and `_miss_split_of`, which `validate --rule-4` and `--retune` reuse)."""

from __future__ import annotations

import math
from pathlib import Path

from nqm.validation import check_whole, parse_range
from realnets.cli.common import (_command_line, _progress, _whole_list, _write_beside_report,
                                 is_writer, start_distributed)


def swap_command(args) -> str:
    """`python -m realnets swap-optimizer DIR`: the report's headline NQM and the same NQM tuned
    as `--optimizer` (`realnets.validation.optimizer_swap`)."""
    import json

    from nqm.tuning import SearchSpace
    from realnets.validation.files import read_validation
    from realnets.validation.optimizer_swap import (comparison_rows, monte_carlo_steps,
                                                    own_prediction, swapped_prediction)

    lr = parse_range(args.lr_range, "--lr-range")
    if args.optimizer == "sgd":
        if args.one_minus_momentum_range:
            raise ValueError("--one-minus-momentum-range does not apply to --optimizer sgd")
        space = SearchSpace(learning_rate=lr)
    else:
        if not args.one_minus_momentum_range:
            raise ValueError(f"--one-minus-momentum-range is required for --optimizer "
                             f"{args.optimizer} (LO,HI within (0, 1])")
        space = SearchSpace(learning_rate=lr, one_minus_momentum=parse_range(
            args.one_minus_momentum_range, "--one-minus-momentum-range"))
    if not (math.isfinite(args.start_scale) and args.start_scale > 0):
        raise ValueError(f"--start-scale must be a number > 0, got {args.start_scale:g}")
    if args.monte_carlo is not None:
        if args.optimizer != "adam":
            raise ValueError("--monte-carlo applies to --optimizer adam only (the other NQM "
                             "families are exact)")
        if args.monte_carlo < 2:
            raise ValueError(f"--monte-carlo must be a whole number >= 2, got {args.monte_carlo}")
    directory = Path(args.dir)
    if not directory.is_dir():
        raise ValueError(f"dir {args.dir!r} is not a directory (a validation report's)")
    doc = read_validation(directory).to_dict()
    own = own_prediction(doc)
    swapped = swapped_prediction(doc, args.optimizer, space, decay=args.decay,
                                 start_scale=args.start_scale)
    swapped = swapped if args.decay else (swapped,)
    rows = comparison_rows(doc, *swapped)
    monte_carlo = (None if args.monte_carlo is None
                   else monte_carlo_steps(swapped[0], args.monte_carlo))
    measured = doc["measured"]["fit"]["b_crit"]
    if args.format == "json":
        return json.dumps({"workload": doc["workload"], "measured_b_crit": measured,
                           "reference": {"batch_size": own["match"]["batch_size"],
                                         "steps": own["match"]["steps"]},
                           "rows": rows, "swapped": swapped[0].to_dict(),
                           **({} if monte_carlo is None else {"monte_carlo": {
                               "runs": args.monte_carlo, "steps": list(monte_carlo)}}),
                           **({"decay": swapped[1].to_dict()} if args.decay else {})}, indent=1)

    def num(x):
        return "-" if x is None else f"{x:.4g}"

    width = max(24, *(len(r["optimizer"]) for r in rows))
    lines = [f"{doc['workload']} ({directory}): measured B_crit {num(measured)}; reference "
             f"B_ref {own['match']['batch_size']}, S_ref {own['match']['steps']}; checkpoint "
             f"{own['checkpoint']}",
             f"the swapped NQM's start: E[L](0) = {swapped[0].initial_loss:.4g}"
             + ("" if args.start_scale == 1.0 else f" (E[theta_i^2] x {args.start_scale:g})"),
             "steps at B = " + " ".join(str(b) for b in swapped[0].batch_sizes),
             f"{'optimizer':<{width}} {'target':>9} {'B_crit':>9} {'ratio':>7} {'S_min':>7}  steps"]
    for r in rows:
        lines.append(f"{r['optimizer']:<{width}} {num(r['target']):>9} {num(r['b_crit']):>9} "
                     f"{num(r['ratio']):>7} {num(r['s_min']):>7}  "
                     + " ".join("-" if s is None else str(s) for s in r["steps"]))
    if monte_carlo is not None:
        lines.append(f"real Adam, Monte Carlo ({args.monte_carlo} runs), at the swapped curve's "
                     "points: " + " ".join("-" if s is None else str(s) for s in monte_carlo))
    if args.decay:
        points = swapped[1].to_dict()["points"]
        for name, key in (("final fraction f", "final_lr_fraction"),
                          ("learning rate a", "learning_rate"),
                          ("momentum b" if args.optimizer != "adam" else "b1", "momentum")):
            values = [p[key] for p in points]
            lines.append(f"decay's {name} at B = ...: " + " ".join(
                "-" if v is None else f"{v:.4g}" for v in values))
        # the NQM's decay spans its own run: its length is the tuned steps to the target
        lines.append("decay's length T (steps) at B = ...: " + " ".join(
            "-" if p["steps"] is None else str(p["steps"]) for p in points))
    return "\n".join(lines)


def _sweep_dir_of(doc, sweep: str | None, directory: Path) -> Path:
    """The directory of the sweep a validation report (read from `directory`) was made from:
    `sweep` (--sweep), else the one its provenance names, else sweeps/WORKLOAD; ValueError naming
    --sweep when it is not a directory."""
    sweep_dir = Path(sweep or (doc.provenance.sweep if doc.provenance else None)
                     or Path("sweeps") / doc.workload)
    if not sweep_dir.is_dir():
        raise ValueError(f"sweep: {sweep_dir} is not a directory (the sweep {directory}'s report "
                         "was made from; pass --sweep)")
    return sweep_dir


def _report_sweep(doc, sweep: str | None, directory: Path):
    """(directory, config, records) of the sweep a validation report (read from `directory`)
    was made from (`_sweep_dir_of`), as its predictions saw it: its first
    `predicted_from_trials` per batch size where the sweep was resumed after the validation
    (`realnets.validation.remeasure.prediction_sweep`); ValueError naming --sweep when it is
    missing or another sweep."""
    from realnets.sweeps.records import load_sweep
    from realnets.validation.files import made_from
    from realnets.validation.remeasure import prediction_sweep

    sweep_dir = _sweep_dir_of(doc, sweep, directory)
    config, records = load_sweep(sweep_dir)
    if not made_from(doc.sweep_config, config.to_dict()):
        raise ValueError(f"sweep: {sweep_dir} is not the sweep {directory}'s report was made "
                         "from (pass --sweep)")
    config, records = prediction_sweep(doc.to_dict(), config, records)
    return sweep_dir, config, records


def adam_basis_command(args, argv) -> str:
    """`python -m realnets adam-basis DIR`: `realnets.validation.adam_basis` on a report, its
    record written to DIR/adam_basis.json."""
    import json
    import time

    from realnets import store, workloads
    from realnets.validation import adam_basis
    from realnets.validation.files import read_validation
    from realnets.validation.quadratic_path import steps_text
    from realnets.validation.report import ADAM_BASIS_FILE
    from realnets.validation.rerun import calibration_sample, reference_checkpoints

    start = time.perf_counter()
    directory = Path(args.dir)
    if not directory.is_dir():
        raise ValueError(f"dir {args.dir!r} is not a directory (a validation report's)")
    doc = read_validation(directory)
    as_dict = doc.to_dict()
    why = adam_basis.refusal(as_dict)
    if why:
        raise ValueError(why)
    _, config, records = _report_sweep(doc, args.sweep, directory)
    say = _progress(args.no_progress)
    task = workloads.get(doc.workload).build(text_file=config.text_file)
    say("retraining the reference trial to its goal")
    init, goal_params = reference_checkpoints(task, config, records, as_dict["calibration_run"])
    sample = calibration_sample(task, doc.settings.sample_rows, doc.settings.seed)
    record = adam_basis.run_adam_basis(task, config, as_dict, init, goal_params, sample, log=say)
    record = {**record, "command": _command_line(argv),
              "wall_seconds": time.perf_counter() - start}
    store.write_json_atomic(directory / ADAM_BASIS_FILE, record)
    if args.format == "json":
        return json.dumps(record, indent=1)

    def num(x):
        return "-" if x is None else f"{x:.3g}"

    spec = record["spectrum"]
    lines = [f"{record['workload']} ({directory}): {record['num_params']} parameters, Hessian "
             f"eigenvalues {spec['bottom']:.3g} .. {spec['top']:.3g} ({spec['negative']} "
             f"negative), {spec['above_floor']} above the NQM's floor (NQM d = "
             f"{num(spec['nqm_dim'])}); target {record['target']:.4g}, lowest loss with the top "
             f"d only {num(record['top_d_floor'])}",
             f"{'B':>6} {'rate':>8} {'b1':>6} {'NQM':>5} {'sweep':>5} "
             f"{'q/weight':>11} {'q/eigen':>11} {'q/top d':>11} {'net/weight':>11} "
             f"{'net/eigen':>11} {'coord':>6} {'NQM/eig':>7} {'trunc':>6}"]
    for p in record["points"]:
        q, n = p["quadratic"], p["network"]
        lines.append(
            f"{p['batch_size']:>6} {p['learning_rate']:>8.3g} {p['momentum']:>6.3g} "
            f"{p['nqm_steps']:>5} {num(p['measured_steps']):>5} "
            f"{steps_text(q['per_weight']):>11} {steps_text(q['per_eigenvector']):>11} "
            f"{steps_text(q[adam_basis.TOP_D]) if adam_basis.TOP_D in q else '-':>11} "
            f"{steps_text(n['per_weight']):>11} {steps_text(n['per_eigenvector']):>11} "
            f"{num(p['coordinates']):>6} {num(p['nqm_over_eigenvector']):>7} "
            f"{num(p.get('truncation')):>6}")
    lines += [record["reading"], f"written: {directory / ADAM_BASIS_FILE} "
              f"({record['wall_seconds']:.0f} s); the report shows it once written again "
              f"(python -m realnets rerender {directory})"]
    return "\n".join(lines)


def two_ends_command(args, argv) -> str:
    """`python -m realnets two-ends DIR ...`: `realnets.validation.two_ends` on each report (its
    record written to DIR/two_ends.json), or with --stored the stored records, as one table."""
    import json

    from realnets import store
    from realnets.validation import two_ends
    from realnets.validation.files import TWO_ENDS_FILE, VALIDATION_FILE, read_validation

    if args.sweep and len(args.dirs) > 1:
        raise ValueError("sweep: give --sweep with one DIR only")
    if args.chunk_rows is not None:
        check_whole("chunk-rows", args.chunk_rows, 1)
    directories, say = _report_directories(args.dirs), _progress(args.no_progress)
    if args.stored and args.goal_metric:
        raise ValueError("goal-metric: runs on the stored records; give it without --stored")
    if args.coordinator and (args.stored or args.curve):
        raise ValueError("coordinator: --stored and --curve run nothing; give them without it")
    if args.full_batch_inits is not None:
        if args.stored or args.goal_metric or args.curve:
            raise ValueError("full-batch-inits: runs on the stored records; give it without "
                             "--stored, --goal-metric or --curve")
        from realnets.validation.full_batch_inits import check_seeds

        seeds = check_seeds(_whole_list(args.full_batch_inits, "full-batch-inits"))
        for d in directories:        # every directory checked before any descent
            _check_inits_input(d, args, seeds)
        start_distributed(args)
        got = [_full_batch_inits(d, args, seeds, say) for d in directories]
        if args.format == "json":
            return json.dumps(got, indent=1)
        return "\n".join(_full_batch_inits_line(d, r) for d, r in zip(directories, got))
    if args.curve:
        return _two_point_curve(directories, args.goal_metric, args.format)
    if not args.stored:
        start_distributed(args)
    records, missing, goals = [], [], []
    for directory in directories:
        if args.goal_metric:
            records.append(_goal_metric(directory, args, say))
            goals.append(_sweep_goal(read_validation(directory).to_dict()))
            continue
        if args.stored:
            if (directory / TWO_ENDS_FILE).exists():
                records.append(store.read_json(directory / TWO_ENDS_FILE,
                                               "two-ends record"))
                goals.append(_sweep_goal(read_validation(directory).to_dict())
                             if (directory / VALIDATION_FILE).is_file() else None)
            else:
                missing.append(str(directory))
            continue
        record = _two_ends_of(directory, args.sweep, argv, say, chunk_rows=args.chunk_rows)
        records.append(record)
        goals.append(_sweep_goal(read_validation(directory).to_dict()))
    if args.format == "json":
        return json.dumps(records, indent=1)
    return (two_ends.table(records, _row_labels(records, goals))
            + (f"\nno {TWO_ENDS_FILE} in: {', '.join(missing)}" if missing else "")
            + ("" if args.stored or args.goal_metric or not records else
               _written_line(TWO_ENDS_FILE)))


def _two_ends_of(directory: Path, sweep: str | None, argv, say, inits_next: bool = False,
                 chunk_rows: int | None = None) -> dict:
    """`two_ends.run_two_ends` on one report (the reference trial retrained to its goal), its
    record written to DIR/two_ends.json and returned; where the record it replaces had
    `full_batch_inits`, a warning to compute them again (not when `inits_next`: the caller
    does). `chunk_rows`: rows per compiled call in its descents (None: the report's setting)."""
    import sys
    import time

    from realnets import workloads
    from realnets.sweeps.records import read_repeats
    from realnets.validation import two_ends
    from realnets.validation.files import DESCENT_JOURNAL, TWO_ENDS_FILE, read_validation
    from realnets.validation.rerun import reference_checkpoints
    from realnets.validation.summary import summary_entry

    start = time.perf_counter()
    doc = read_validation(directory)
    sweep_dir, config, trials = _report_sweep(doc, sweep, directory)
    as_dict = doc.to_dict()
    task = workloads.get(doc.workload).build(text_file=config.text_file)
    say(f"{directory}: retraining the reference trial to its goal")
    _, goal_params = reference_checkpoints(task, config, trials, as_dict["calibration_run"])
    journal = directory / DESCENT_JOURNAL        # a killed run resumes its descents from it
    # the descents read their chunking from the document's settings
    computed = as_dict if chunk_rows is None else {
        **as_dict, "settings": {**as_dict["settings"], "chunk_rows": chunk_rows}}
    record = two_ends.run_two_ends(task, config, trials, computed, goal_params,
                                   read_repeats(sweep_dir), log=say, journal=journal)
    record = {**record, "compared": two_ends.compared(summary_entry(as_dict)),
              "command": _command_line(argv),
              "wall_seconds": time.perf_counter() - start}
    if not inits_next and "full_batch_inits" in _stored_or_empty(directory / TWO_ENDS_FILE):
        print(f"{directory}: the new record has no full_batch_inits (B_2pt'(med)): rerun "
              f"python -m realnets two-ends {directory} --full-batch-inits SEEDS",
              file=sys.stderr)
    _write_beside_report(directory, TWO_ENDS_FILE, record)
    if is_writer():
        journal.unlink(missing_ok=True)
    return record


def _stored_or_empty(path: Path) -> dict:
    """A record beside a report as stored, or {} when there is none or it does not read."""
    from realnets import store

    try:
        return store.read_json(path, "record") if path.is_file() else {}
    except ValueError:
        return {}


def _miss_split_of(directory: Path, argv, say) -> dict:
    """`miss_split.run_split` on one report with its two_ends.json, written to
    DIR/miss_split.json and returned; ValueError when the two_ends.json was not made from the
    report's document."""

    from realnets.validation import miss_split
    from realnets.validation.files import (MISS_SPLIT_FILE, TWO_ENDS_FILE, VALIDATION_FILE,
                                           read_validation, side_records)

    doc = read_validation(directory).to_dict()
    kept = side_records(directory, doc)
    if kept["two_ends"] is None:
        raise ValueError(f"dir {directory}: its {TWO_ENDS_FILE} was not made from its "
                         f"{VALIDATION_FILE} (an earlier validation, or unreadable): rerun "
                         f"python -m realnets two-ends {directory}")
    record = miss_split.run_split(doc, kept["two_ends"], log=say)
    record["command"] = _command_line(argv)
    _write_beside_report(directory, MISS_SPLIT_FILE, record)
    return record


def _two_point_curve(directories, goal_metric: bool, fmt: str) -> str:
    """`two-ends DIR ... --curve`: `realnets.validation.two_point_curve.check` on each report with
    a two_ends.json, as one table (nothing is run or written)."""
    import json

    from realnets import store
    from realnets.validation import two_point_curve
    from realnets.validation.files import (TWO_ENDS_FILE, VALIDATION_FILE, read_validation,
                                           side_records)

    if goal_metric:
        raise ValueError("curve: runs nothing; give it without --goal-metric")
    records, goals, missing = [], [], []
    for directory in directories:
        if not (directory / TWO_ENDS_FILE).exists() or not (directory / VALIDATION_FILE).is_file():
            missing.append(str(directory))
            continue
        doc = read_validation(directory).to_dict()
        kept = side_records(directory, doc)
        records.append(two_point_curve.check(
            store.read_json(directory / TWO_ENDS_FILE, "two-ends record"), doc,
            kept["miss_split"]))
        goals.append(_sweep_goal(doc))
    if fmt == "json":
        return json.dumps(records, indent=1)
    return (two_point_curve.table(records, _row_labels(records, goals))
            + (f"\nno {TWO_ENDS_FILE} or {VALIDATION_FILE} in: {', '.join(missing)}"
               if missing else ""))


def two_point_command(args, argv) -> str:
    """`python -m realnets two-point DIR`: `realnets.validation.two_point.estimate` on a sweep,
    then `with_median_end` (B_2pt'(med), the estimate of record; not with --best-end-only), its
    record written to DIR/two_point.json. Inputs are checked before any training."""
    import json
    import time

    from realnets import store, workloads
    from realnets.sweeps.records import load_sweep, read_repeats
    from realnets.validation import two_point
    from realnets.validation.files import DESCENT_JOURNAL, INITS_JOURNAL, TWO_POINT_FILE
    from realnets.validation.full_batch_inits import check_seeds, default_seeds
    from realnets.validation.remeasure import first_sweep, with_measured_two_point

    start = time.perf_counter()
    directory = Path(args.dir)

    seeds = None
    if args.full_batch_inits is not None:
        seeds = check_seeds(_whole_list(args.full_batch_inits, "full-batch-inits"))
    if args.chunk_rows is not None:
        check_whole("chunk-rows", args.chunk_rows, 1)
    whole = load_sweep(directory)
    k = whole[0].trials if args.prediction_trials is None else args.prediction_trials
    if not 1 <= k <= whole[0].trials:
        raise ValueError(f"prediction-trials must be in [1, {whole[0].trials}] (the sweep's "
                         f"trials per batch size), got {k}")
    # the estimate from the first k trials per batch size, held against B_crit from all
    config, records = first_sweep(*whole, k)
    if seeds is not None:
        seeds = check_seeds(seeds, config.seed)
    elif not args.best_end_only:        # B_2pt'(med), the estimate of record (session 42)
        seeds = default_seeds(config.seed)
    repeats = read_repeats(directory)
    two_point.check_inputs(config, records, repeats, args.batch_size)
    record = stored_inits = None
    if args.ends_from is not None:          # read and checked before any training
        record, stored_inits = two_point.stored_ends(Path(args.ends_from), config, records,
                                                     repeats, args.batch_size)
    start_distributed(args)         # every input checked: now the processes join (multi-host)
    say = _progress(args.no_progress)
    journal = directory / DESCENT_JOURNAL        # a killed run resumes its descents from it
    task = None
    if record is None or (seeds is not None and record["full_set"].get("steps") is not None
                          and not two_point.usable_inits(stored_inits, seeds, record)):
        task = workloads.get(config.workload).build(text_file=config.text_file)
    if record is None:
        record = two_point.estimate(task, config, records, repeats, args.batch_size,
                                    chunk_rows=args.chunk_rows, log=say, journal=journal)
    else:
        say(f"two-point: the two ends as measured in {args.ends_from}")
    if seeds is not None:
        if record["full_set"].get("steps") is not None \
                and not two_point.usable_inits(stored_inits, seeds, record):
            say(f"two-point: the fastest full-batch descent from {len(seeds)} initialisations")
        record = two_point.with_median_end(task, config, record, seeds, args.chunk_rows,
                                           journal=directory / INITS_JOURNAL, log=say,
                                           stored_inits=stored_inits)
    if k < whole[0].trials:
        measured = two_point.measured_b_crit(whole[1], whole[0])
        record = with_measured_two_point(record, *whole, measured, k)
    record = {**record, "command": _command_line(argv),
              "wall_seconds": time.perf_counter() - start}
    if is_writer():
        store.write_json_atomic(directory / TWO_POINT_FILE, record)
        journal.unlink(missing_ok=True)
        (directory / INITS_JOURNAL).unlink(missing_ok=True)
    if args.format == "json":
        return json.dumps(record, indent=1)
    return (two_point.text(record) + "\n" + _error_bar_line(record, args.summary)
            + f"\n{'written' if is_writer() else 'written by process 0'}: "
            f"{directory / TWO_POINT_FILE}")


def _error_bar_line(record: dict, summary: str) -> str:
    """The track record's error bar on a two-point record (`two_point_bar.error_bar`), or why
    there is none: no such summary, or one that does not read."""
    from realnets.validation.summary import read_summary
    from realnets.validation.two_point import chosen
    from realnets.validation.two_point_bar import error_bar, error_bar_line

    if not Path(summary).is_file():
        return (f"no error bar from the track record: {summary} not found (give --summary, "
                "e.g. the repository's reports/validation/summary.json)")
    chosen(record)       # a fault of the record's own is not the summary's (ValueError)
    try:       # after the estimate is written: a bad summary costs the bar, not the result
        bar = error_bar(record, read_summary(Path(summary)))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return f"no error bar from the track record: {summary} does not read ({err})"
    return error_bar_line(bar, summary)


def _sweep_goal(doc: dict) -> float | None:
    """The goal of the sweep a validation document (as a dict) was made from."""
    return doc.get("sweep_config", {}).get("goal")


def _row_labels(records: list[dict], goals: list) -> list[str]:
    """The tables' workload names for records made from sweeps with `goals` (one each): with the
    goal where a workload and optimizer come twice (`summary.workload_labels`)."""
    from realnets.validation.summary import workload_labels

    return workload_labels([{"workload": r["workload"], "optimizer": r["optimizer"], "goal": g}
                            for r, g in zip(records, goals)])


def _report_directories(dirs: list[str]) -> list[Path]:
    """The DIR arguments as paths, each checked to be a directory (ValueError naming it)."""
    for d in dirs:
        if not Path(d).is_dir():
            raise ValueError(f"dir {d!r} is not a directory (a validation report's)")
    return [Path(d) for d in dirs]


def _written_line(name: str) -> str:
    return (f"\nwritten: {name} in each directory (and its summary.json entry, where one sits "
            "beside it); report.md shows it once written again (python -m realnets rerender "
            "DIR ...)")


def miss_split_command(args, argv) -> str:
    """`python -m realnets miss-split DIR ...`: `realnets.validation.miss_split` on each report
    with a two_ends.json (its record written to DIR/miss_split.json), or with --stored the stored
    records, as one table. A DIR without the needed file is named below the table."""
    import json

    from realnets import store
    from realnets.validation import miss_split
    from realnets.validation.files import (MISS_SPLIT_FILE, TWO_ENDS_FILE, VALIDATION_FILE,
                                           read_validation, side_records)

    directories, say = _report_directories(args.dirs), _progress(args.no_progress)
    needed = MISS_SPLIT_FILE if args.stored else TWO_ENDS_FILE
    records, missing = [], [str(d) for d in directories if not (d / needed).exists()]
    stale, goals = [], []
    for directory in directories:
        if str(directory) in missing:
            continue
        doc = read_validation(directory).to_dict()
        kept = side_records(directory, doc)
        goals.append(_sweep_goal(doc))
        if args.stored:
            if kept["miss_split"] is None:
                stale.append(str(directory))
            records.append(store.read_json(directory / needed, "miss-split record"))
            continue
        records.append(_miss_split_of(directory, argv, say))
    if args.format == "json":
        return json.dumps(records, indent=1)
    return (miss_split.table(records, _row_labels(records, goals))
            + (f"\nno {needed} in: {', '.join(missing)}" if missing else "")
            + (f"\nnot made from the directory's {VALIDATION_FILE} or its {TWO_ENDS_FILE} "
               f"(left out of the summary, report and app): {', '.join(stale)}"
               if stale else "")
            + ("" if args.stored or not records else _written_line(MISS_SPLIT_FILE)))


def tuning_check_command(args) -> str:
    """`python -m realnets tuning-check DIR ...`: `realnets.validation.tuning_check` on each
    report's headline tuned curve, as one table (or JSON); nothing is written."""
    import json

    from realnets.validation import tuning_check
    from realnets.validation.files import read_validation, side_records

    directories = _report_directories(args.dirs)
    docs = [read_validation(d).to_dict() for d in directories]
    sides = [side_records(d, doc) for d, doc in zip(directories, docs)]
    records = [tuning_check.check_report(doc, side["two_ends"], side["miss_split"])
               for doc, side in zip(docs, sides)]
    if args.format == "json":
        return json.dumps(records, indent=1)
    return tuning_check.table(records, _row_labels(records, [_sweep_goal(d) for d in docs]))


def _chunk_rows(args, doc) -> int | None:
    """Rows per compiled call in a report's whole-set descents: --chunk-rows where given, else
    the report's own setting (validate's --chunk-rows is that setting)."""
    given = getattr(args, "chunk_rows", None)
    return doc.settings.chunk_rows if given is None else given


def _goal_metric(directory: Path, args, say) -> dict:
    """A stored two_ends record with its `goal_metric` diagnostic added (and written back)."""
    from realnets import store, workloads
    from realnets.sweeps.curve import build_curve
    from realnets.validation import two_ends
    from realnets.validation.files import TWO_ENDS_FILE, read_validation

    record = store.read_json(directory / TWO_ENDS_FILE, "two-ends record")
    doc = read_validation(directory)
    _, config, trials = _report_sweep(doc, args.sweep, directory)
    task = workloads.get(doc.workload).build(text_file=config.text_file)
    say(f"{directory}: the fastest whole-set descent with the validation metric")
    got = two_ends.goal_metric_descent(task, config, record, _chunk_rows(args, doc))
    largest = [p for p in build_curve(trials, config).points if p.reached][-1]
    got["largest_batch"] = {"batch_size": largest.batch_size, "steps": largest.steps}
    got["reading"] = two_ends.goal_metric_reading(record["full_set"]["steps"],
                                                  got["steps_to_goal"], largest.steps)
    record = {**record, "goal_metric": got}
    if is_writer():
        store.write_json_atomic(directory / TWO_ENDS_FILE, record)
    return record


def rerender_command(args) -> str:
    """`python -m realnets rerender DIR ...`: `report.rerender` on each directory, after checking
    that every one holds a validation.json (one line naming the first that does not)."""
    from realnets.validation.files import VALIDATION_FILE
    from realnets.validation.report import rerender

    directories = _report_directories(args.dirs)
    for d in directories:
        if not (d / VALIDATION_FILE).is_file():
            raise ValueError(f"dir {d}: no {VALIDATION_FILE} (not a validation report)")
    return "\n".join(f"written: {rerender(d)}" for d in directories)


def _check_inits_input(directory: Path, args, seeds) -> None:
    """ValueError (one line) unless `directory` holds a two_ends.json with a whole-set descent
    at the target and its sweep's own seed is not among `seeds`."""
    from realnets import store
    from realnets.validation.files import TWO_ENDS_FILE, read_validation
    from realnets.validation.full_batch_inits import check_seeds

    if not (directory / TWO_ENDS_FILE).is_file():
        raise ValueError(f"dir {directory}: no {TWO_ENDS_FILE} (python -m realnets two-ends "
                         f"{directory} first)")
    if (store.read_json(directory / TWO_ENDS_FILE, "two-ends record").get("full_set") or {}
            ).get("steps") is None:
        raise ValueError(f"dir {directory}: no whole-set descent of its {TWO_ENDS_FILE} reached "
                         "the target, so there is no configuration to descend again")
    check_seeds(seeds, _report_sweep(read_validation(directory), args.sweep, directory)[1].seed)


def _full_batch_inits(directory: Path, args, seeds, say) -> dict | None:
    """A stored two_ends record's `full_batch_inits` (B_2pt'(med), the two-point estimate of
    record), computed from the initialisations of `seeds` (None: `default_seeds` of the sweep's
    seed), written back into DIR/two_ends.json (the summary beside refreshed) with report.md
    written again, and returned; None, said, where no whole-set descent reached the target."""
    from realnets import store, workloads
    from realnets.validation.files import INITS_JOURNAL, TWO_ENDS_FILE, read_validation
    from realnets.validation.full_batch_inits import default_seeds, over_inits
    from realnets.validation.report import rerender

    record = store.read_json(directory / TWO_ENDS_FILE, "two-ends record")
    if record["full_set"].get("steps") is None:
        say(f"{directory}: B_2pt'(med) not computed: no whole-set descent reached the target")
        return None
    doc = read_validation(directory)
    _, config, _ = _report_sweep(doc, args.sweep, directory)
    seeds = default_seeds(config.seed) if seeds is None else seeds
    task = workloads.get(doc.workload).build(text_file=config.text_file)
    say(f"{directory}: the fastest whole-set descent from {len(seeds)} initialisations")
    journal = directory / INITS_JOURNAL          # a killed run resumes its descents from it
    got = over_inits(task, config, record, seeds, doc.settings.seed, _chunk_rows(args, doc),
                     journal=journal, log=say)
    _write_beside_report(directory, TWO_ENDS_FILE, {**record, "full_batch_inits": got})
    if is_writer():
        journal.unlink(missing_ok=True)
        rerender(directory)
    return got


def _full_batch_inits_line(directory: Path, got: dict) -> str:
    pct = got["percentiles"]

    def num(x):
        return "?" if x is None else f"{x:.3g}"

    return (f"{directory}: S_fb^N = {got['s_fb']} (trial {got['trial_id']}); from "
            f"{len(got['seeds'])} initialisations median {num(pct['50'])} (16-84%: "
            f"{num(pct['16'])} .. {num(pct['84'])}), {num(got['over_s_fb'])} x S_fb^N: "
            f"{got['reading']}; B_2pt'(med) {num(got['two_point'])} "
            f"(written: {directory}/two_ends.json, full_batch_inits)")


def summary_text(path: str, rebuild: bool = False) -> str:
    """`python -m realnets summary`: the summary file as the docs' Markdown table (rebuilt first
    from the validation documents beside it with `rebuild`)."""
    from realnets.validation.summary import (median_end_table, read_summary, rebuild_summary,
                                             reruns_table, rule_2_table, summary_table,
                                             two_ends_table)

    file = Path(path)
    if rebuild:
        if not file.parent.is_dir():
            raise ValueError(f"summary file {path!r}: its directory does not exist")
        rebuild_summary(file)
    if not file.is_file():
        raise ValueError(f"summary file {path!r} does not exist (python -m realnets validate "
                         "writes one beside its --out directory)")
    entries = read_summary(file)
    if not entries:
        raise ValueError(f"summary file {path!r} holds no workloads")
    reruns, rule_2 = reruns_table(entries), rule_2_table(entries)
    ends, median_end = two_ends_table(entries), median_end_table(entries)
    return (summary_table(entries)
            + (f"\n\nThe winners rerun under other seeds:\n\n{reruns}" if reruns else "")
            + (f"\n\nRule 2 and the two-point estimate (docs/prediction_rule.md), beside the "
               f"headline:\n\n{rule_2}"
               if rule_2 else "")
            + (f"\n\nBoth ends on the whole training set (python -m realnets two-ends) and "
               f"where the headline's miss sits (python -m realnets miss-split):\n\n{ends}"
               if ends else "")
            + (f"\n\nThe full-batch end over initialisations (python -m realnets two-ends "
               f"--full-batch-inits; docs/prediction_rule.md, session 41):\n\n{median_end}"
               if median_end else ""))


def headline_text(path: str, fmt: str = "table", measured: str = "sweep") -> str:
    """`python -m realnets headline`: the README's headline counts over the summary's
    workloads (`realnets.validation.headline`), as the README's table or JSON; with `measured`
    'reruns', against each entry's reruns' median curve instead of its sweep; runs nothing."""
    import json

    from realnets.validation.headline import against_reruns, headline, table
    from realnets.validation.summary import read_summary

    if not Path(path).is_file():
        raise ValueError(f"summary file {path!r} does not exist (python -m realnets validate "
                         "writes one beside its --out directory)")
    entries = read_summary(Path(path))
    h = headline(entries if measured == "sweep" else against_reruns(entries))
    return json.dumps(h, indent=1) if fmt == "json" else table(h)


def track_record_text(path: str, fmt: str = "table") -> str:
    """`python -m realnets track-record`: each predictor's record over the summary's real
    workloads (`realnets.validation.track_record`), as the docs' table or JSON; runs nothing."""
    import json

    from realnets.validation.summary import read_summary
    from realnets.validation.track_record import track_record, track_record_table

    if not Path(path).is_file():
        raise ValueError(f"summary file {path!r} does not exist (python -m realnets validate "
                         "writes one beside its --out directory)")
    records = track_record(read_summary(Path(path)))
    if fmt == "json":
        return json.dumps([r.to_dict() for r in records], indent=1)
    return track_record_table(records)
