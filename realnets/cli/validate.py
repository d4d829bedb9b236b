"""`python -m realnets validate`: a validation report made (`realnets.validation.pipeline`),
re-rendered from a stored one (`--reuse`, running only the transfer, quadratic path or rule 2
it lacks), tuned again (`--retune`) or completed with rule 4 (`--rule-4`); with
`validation_config`, the ValidationConfig made from its flags."""

from __future__ import annotations

from pathlib import Path

from realnets.cli.common import (_command_line, _progress, _write_beside_report, is_writer,
                                 start_distributed, wait_for_writer)
from realnets.cli.diagnostics import _full_batch_inits, _miss_split_of, _two_ends_of


def validation_config(args):
    """ValidationConfig from parsed flags."""
    from realnets.validation.settings import ValidationConfig

    checkpoints = tuple(c.strip() for c in args.checkpoints.split(",") if c.strip())
    return ValidationConfig(
        batch_size=args.batch_size, checkpoints=checkpoints, top_k=args.top_k,
        lanczos_steps=args.lanczos_steps, slq_steps=args.slq_steps, slq_probes=args.slq_probes,
        floor_ratio=args.floor_ratio, sample_rows=args.sample_rows, noise_rows=args.noise_rows,
        chunk_rows=args.chunk_rows, loss_floor=args.loss_floor, seed=args.seed,
        bootstrap=args.bootstrap, target_rule=args.target_rule,
        branch_repeats=args.branch_repeats, transfer=not args.no_transfer,
        certify=not args.no_certify)


def _reuse_mismatch(old, workload_key: str, vcfg) -> str:
    """What differs between a stored validation document and the one these options would
    make ('' when `--reuse` can re-render it): its workload, or its settings other than the
    transfer (a stored document gets a transfer it lacks), each as `--flag stored value`."""
    import dataclasses

    if old.workload != workload_key:
        return f"workload {old.workload!r}, not {workload_key!r}"
    stored = dataclasses.replace(old.settings, transfer=vcfg.transfer)

    def shown(x):
        return ",".join(x) if isinstance(x, tuple) else x

    parts = []
    for f in dataclasses.fields(stored):
        was, now = getattr(stored, f.name), getattr(vcfg, f.name)
        if was == now:
            continue
        if isinstance(was, bool):       # certify: the flag is --no-certify
            parts.append("--no-certify" if not was else "certify (without --no-certify)")
        else:
            parts.append(f"--{f.name.replace('_', '-')} {shown(was)} (here {shown(now)})")
    return "; ".join(parts)


def validate_command(args, argv) -> str:
    import dataclasses
    import time

    from realnets import workloads
    from realnets.sweeps.records import read_repeats
    from realnets.validation import files, pipeline, report as validation_report
    from realnets.validation.comparison import comparison
    from realnets.validation.noise_free_match import can_add
    from realnets.validation.predictions import reference_nqm
    from realnets.validation.quadratic_path import complete, path_reading
    from realnets.validation.reconciliation import reconciliation
    from realnets.validation.remeasure import first_sweep, remeasured
    from realnets.validation.rerun import ensure_sweep
    from realnets.validation.summary import SUMMARY_FILE, summary_entry, update_summary
    from realnets.validation.transfer import reading
    from ui.validation_charts import export_charts

    start = time.perf_counter()
    workload = workloads.get(args.workload)
    vcfg = validation_config(args)
    notes = None
    if args.notes:
        try:
            notes = Path(args.notes).read_text(encoding="utf-8")
        except OSError as err:
            raise ValueError(f"notes: cannot read {args.notes} ({err.strerror})") from None
    out = Path(args.out)
    sweep_dir = Path(args.sweep) if args.sweep else Path("sweeps") / workload.name
    say = _progress(args.no_progress)
    if args.rule_4 and not (sweep_dir.is_dir() and read_repeats(sweep_dir)):
        raise ValueError(f"rule-4: no reruns of the winners in {sweep_dir}; run python -m "
                         f"realnets repeat {sweep_dir} --seeds 1,2,3,4,5,6,7,8,9,10,11,12,13,14,"
                         "15,16 --inits 2 first")
    doc = None
    if args.retune and args.reuse:
        raise ValueError("retune: give --retune or --reuse, not both (--retune rewrites what "
                         "--reuse would re-render)")
    start_distributed(args)         # the options checked: now the processes join (multi-host)
    if args.retune:
        doc = _retuned(out, workload, vcfg, sweep_dir, argv, say)
    elif args.reuse and (out / files.VALIDATION_FILE).exists():
        old = files.read_validation(out)
        differs = _reuse_mismatch(old, workload.key, vcfg)
        if differs:         # not a silent fresh validation over the stored one
            raise ValueError(
                f"reuse: {out / files.VALIDATION_FILE} was made with {differs}; give the same "
                f"options (its command: {(old.provenance or files.Provenance()).command}) or "
                "leave out --reuse to validate again")
        # the same measurements whether or not a transfer is asked for: reuse them
        old, sweep = _refreshed_measured(old, sweep_dir, say)
        if vcfg.transfer and (old.transfer is None or "quadratic_path" not in old.transfer
                              or not complete(old.transfer["quadratic_path"])):
            say(f"reusing {out / files.VALIDATION_FILE}; running the "
                + ("transfer" if old.transfer is None else "quadratic path") + " it lacks")
            doc = _add_transfer(old, workload, sweep_dir, sweep, argv, say)
        elif vcfg.transfer:
            # the table and the transfer's reading are functions of the rest
            path = old.transfer["quadratic_path"]
            transfer = {**old.transfer, "reading": reading(old.transfer, old.to_dict()),
                        "quadratic_path": {**path, "reading": path_reading(path)}}
            doc = dataclasses.replace(old, comparison=comparison(old.to_dict()),
                                      transfer=transfer)
            say(f"reusing {out / files.VALIDATION_FILE}")
        else:
            doc = _with_transfer_time(dataclasses.replace(
                old, settings=vcfg, transfer=None, comparison=comparison(old.to_dict())), None)
            say(f"reusing {out / files.VALIDATION_FILE}"
                + (" without its transfer" if old.transfer else ""))
        if doc.full_batch is None and sweep is None:
            say("rule 2 not added: it needs the sweep's trials")
        elif doc.full_batch is None and can_add(doc.to_dict()):
            say("running rule 2 (the noise-free match), which it lacks")
            doc = _add_noise_free(doc, workload, sweep_dir, sweep, vcfg, say)
        _write_doc(out, doc)
    if doc is None:
        config, records = ensure_sweep(workload, sweep_dir, args.trials,
                                                progress=not args.no_progress, log=say)
        k = config.trials if args.prediction_trials is None else args.prediction_trials
        if not 1 <= k <= config.trials:
            raise ValueError(f"prediction-trials must be in [1, {config.trials}] (the sweep's "
                             f"trials per batch size), got {k}")
        task = workload.build(text_file=config.text_file)
        repeats = read_repeats(sweep_dir)
        # predicted from the first k trials per batch size, measured from all (session 45)
        pconfig, precords = first_sweep(config, records, k)
        made = pipeline.validate(task, pconfig, precords, vcfg, log=say,
                                 reference=reference_nqm(workload.name), repeats=repeats)
        if k < config.trials:
            made = remeasured(made, config, records, repeats)
        made["provenance"] = {"command": _command_line(argv),
                              "sweep": str(sweep_dir), "wall_seconds": time.perf_counter() - start}
        doc = files.ValidationDocument.from_dict(made)
        _write_doc(out, doc)
    if args.rule_4:
        say("rule 4: both ends on the network (two-ends), then the split (miss-split)")
        _two_ends_of(out, str(sweep_dir), argv, say, inits_next=True)
        # B_2pt'(med), the two-point estimate of record (session 42): its 16 descents
        _full_batch_inits(out, args, None, say)
        _miss_split_of(out, argv, say)
    if not is_writer():
        return f"validated; process 0 writes {out} (validation.json, report.md) and the summary"
    prov = doc.provenance or files.Provenance()
    as_dict = doc.to_dict()
    report = validation_report.write_report(out, as_dict, export_charts(out, as_dict), notes=notes,
                                            command=prov.command, wall_seconds=prov.wall_seconds)
    summary_path = Path(args.summary) if args.summary else out.resolve().parent / SUMMARY_FILE
    sides = files.side_records(out, as_dict)
    entry = summary_entry(as_dict, sides)
    update_summary(summary_path, entry)

    def number(x, width, digits):
        return f"{'nan' if x is None else format(float(x), f'.{digits}g'):>{width}}"

    def cell(x, digits=4):
        return "-" if x is None else format(float(x), f".{digits}g")

    lines = [f"{'reconciliation':<48} {'B':>10} {'se':>8} {'range':>19} {'ratio':>7}"]
    for row in reconciliation(as_dict, sides):
        value = (">=" if row["lower_bound"] else "") + cell(row["value"])
        span = "-" if row["lo"] is None else f"{cell(row['lo'])} .. {cell(row['hi'])}"
        lines.append(f"{row['estimate'][:48]:<48} {value:>10} {cell(row['se'], 2):>8} "
                     f"{span:>19} {cell(row['ratio'], 3):>7}")
    lines += ["", "diagnostics:", f"{'estimate':<76} {'checkpoint':>10} {'B':>10} {'ratio':>7}"]
    for row in doc.comparison:
        lines.append(f"{row['quantity']:<76} {row['checkpoint'] or '-':>10} "
                     f"{number(row['value'], 10, 4)} {number(row['ratio'], 7, 3)}")
    lines.append(record_bar_line(summary_path, entry))
    lines.append(f"report: {report}")
    lines.append(f"summary: {summary_path}")
    return "\n".join(lines)


def record_bar_line(summary_path: Path, entry: dict) -> str:
    """One line: the error bar the track record of the summary's other workloads puts on an
    entry's prediction of record (`track_record.error_bar` at 68%; its own 16-84% interval is
    too narrow, docs/validation.md), or why there is none."""
    from realnets.validation.summary import read_summary
    from realnets.validation.track_record import bar_line, error_bar

    predictor = str(entry.get("rule", "")).replace("_", " ")
    value = (entry.get("predicted") or {}).get("b_crit")
    if value is None or not value > 0:
        return "no error bar from the track record: no prediction of record"
    try:
        bar = error_bar(read_summary(summary_path), predictor, float(value), entry["workload"])
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return f"no error bar from the track record: {summary_path} does not read ({err})"
    if bar.entries == 0:
        return (f"no error bar from the track record: no other validated workload in "
                f"{summary_path}")
    return bar_line(bar, summary_path, "the 16-84% range above counts one source of error only")


def _retuned(out: Path, workload, vcfg, sweep_dir: Path, argv, say):
    """`validate --retune`: OUT's stored document with its NQM side tuned again under `vcfg`
    (`realnets.validation.retune`), the transfer and quadratic path run again on it, and the
    records beside it that belong to it (two_ends.json: rule 3 again, `two_ends.retune_two_ends`;
    miss_split.json: run again) rewritten; the document is written and returned. ValueError
    when OUT holds no document of this workload or its sweep is gone."""
    import dataclasses
    import time

    from realnets.sweeps.curve import build_curve
    from realnets.sweeps.records import read_repeats
    from realnets.validation import files, two_ends
    from realnets.validation.predictions import reference_nqm
    from realnets.validation.retune import check_settings, retune
    from realnets.validation.summary import summary_entry

    start = time.perf_counter()
    if not (out / files.VALIDATION_FILE).is_file():
        raise ValueError(f"retune: no {files.VALIDATION_FILE} in {out} to tune again")
    old = files.read_validation(out)
    if old.workload != workload.key:
        raise ValueError(f"retune: {out} holds a validation of {old.workload!r}, not "
                         f"{workload.key!r}")
    sides = files.side_records(out, old.to_dict())
    old, sweep = _refreshed_measured(old, sweep_dir, say, "--retune")
    if sweep is None:
        raise ValueError(f"retune: the sweep directory {sweep_dir} is needed (its trials)")
    config, records = sweep
    command = _command_line(argv)
    check_settings(old.settings, vcfg)
    batch_sizes = build_curve(records, config, read_repeats(sweep_dir)).batch_sizes
    doc = files.ValidationDocument.from_dict(retune(
        old.to_dict(), config, records, batch_sizes, vcfg, reference_nqm(workload.name), say))
    if vcfg.transfer:
        say("retune: the transfer and quadratic path again, with the new metaparameters")
        # the original command's phases and wall time stay; the retune's time is its own
        seconds, prov = doc.seconds, doc.provenance
        doc = _add_transfer(dataclasses.replace(doc, transfer=None), workload, sweep_dir, sweep,
                            argv, say)
        doc = dataclasses.replace(doc, seconds=seconds, provenance=prov)

    def stamped(d):
        return dataclasses.replace(d, provenance=dataclasses.replace(
            d.provenance or files.Provenance(), retuned=command,
            retune_seconds=time.perf_counter() - start))

    doc = stamped(doc)
    _write_doc(out, doc)       # the miss split below reads it from OUT
    if sides["two_ends"] is not None:
        say("retune: two_ends.json's rule 3 again")
        as_dict = doc.to_dict()
        record = two_ends.retune_two_ends(sides["two_ends"], as_dict, config, records, log=say)
        _write_beside_report(out, files.TWO_ENDS_FILE,
                             {**record, "compared": two_ends.compared(summary_entry(as_dict))})
        if sides["miss_split"] is not None:
            say("retune: miss_split.json again")
            _miss_split_of(out, argv, say)
    doc = stamped(doc)
    _write_doc(out, doc)
    return doc


def _refreshed_measured(old, sweep_dir: Path, say, flag: str = "--reuse"):
    """(document, (config, records)): a stored validation document with its measured part
    rebuilt from its sweep directory, trials and reruns (`realnets.sweeps.repeats`: reruns made
    after the validation give the measured B_crit an interval), and the sweep it read;
    (unchanged, None), with a line saying so, if the directory is gone. ValueError if the sweep
    is another study or has other points (resumed since)."""
    import dataclasses

    from realnets.sweeps.curve import build_curve
    from realnets.sweeps.records import load_sweep, read_repeats
    from realnets.validation.comparison import measured_summary
    from realnets.validation.files import made_from
    from realnets.validation.remeasure import prediction_sweep

    if not sweep_dir.is_dir():
        say(f"sweep directory {sweep_dir} not found: the stored measured curve is kept")
        return old, None
    config, records = load_sweep(sweep_dir)
    if not made_from(old.sweep_config, config.to_dict()):
        raise ValueError(f"sweep: {sweep_dir} is not the sweep this validation was made from "
                         f"(its config differs); rerun validate without {flag}")
    fresh = measured_summary(build_curve(records, config, read_repeats(sweep_dir)))
    if fresh["points"] != old.measured["points"]:
        raise ValueError(f"sweep: {sweep_dir}'s curve is not the one this validation was made "
                         f"from (trials were added since): python -m realnets remeasure on it "
                         f"first, or rerun validate without {flag}")
    # the predictions' side reads the trials they were made from (`remeasure`)
    return (dataclasses.replace(old, measured=fresh),
            prediction_sweep(old.to_dict(), config, records))


def _add_transfer(old, workload, sweep_dir: Path, sweep, argv, say):
    """A validation document made without the transfer, or with a transfer whose quadratic path
    is missing or incomplete (`quadratic_path.complete`), with what it lacks run on its stored
    measurements
    (`realnets.validation.transfer`, `realnets.validation.quadratic_path`: the reference trial
    is retrained to its goal for the latter). `sweep`: (config, records) of the sweep it was
    made from, as `_refreshed_measured` read and checked it (None: the directory is missing)."""
    import dataclasses
    import time

    from realnets.sweeps.records import load_sweep
    from realnets.validation.comparison import comparison
    from realnets.validation.quadratic_path import path_settings, run_quadratic_path
    from realnets.validation.rerun import calibration_sample, reference_checkpoints
    from realnets.validation.transfer import reading, run_transfer

    start = time.perf_counter()
    # a missing directory: load_sweep's one line says so
    config, records = sweep if sweep is not None else load_sweep(sweep_dir)
    task = workload.build(text_file=config.text_file)
    settings = dataclasses.replace(old.settings, transfer=True)
    as_dict = {**old.to_dict(), "settings": settings.to_dict()}
    sample = calibration_sample(task, settings.sample_rows, settings.seed)
    command = _command_line(argv)
    if old.transfer is None:
        transfer = {**run_transfer(task, config, as_dict, sample, log=say), "command": command}
    else:
        transfer = {**old.transfer, "reading": reading(old.transfer, as_dict)}
    with_transfer = {**as_dict, "transfer": transfer}
    path_start = time.perf_counter()
    init = goal_params = None
    if path_settings(with_transfer, config):
        # the reference trial again, to its goal (validate's own rerun counts as its "rerun"
        # phase; here it is part of the transfer's time)
        init, goal_params = reference_checkpoints(task, config, records,
                                                  as_dict["calibration_run"])
    path = run_quadratic_path(task, config, with_transfer, init, goal_params, sample, log=say)
    transfer = {**transfer, "quadratic_path": {
        **path, "seconds": time.perf_counter() - path_start, "command": command}}
    doc = dataclasses.replace(old, settings=settings, transfer=transfer,
                              comparison=comparison({**as_dict, "transfer": transfer}))
    # a stored path this one replaces leaves the transfer's time (when it recorded its own)
    before = 0.0 if old.transfer is None else old.seconds.get("transfer", 0.0) - (
        (old.transfer.get("quadratic_path") or {}).get("seconds") or 0.0)
    return _with_transfer_time(doc, before + time.perf_counter() - start)


def _add_noise_free(doc, workload, sweep_dir: Path, sweep, vcfg, say):
    """A stored validation document with rule 2 added on its stored fits
    (`realnets.validation.noise_free_match`); its wall time grows by the time taken. `sweep`:
    (config, records) as `_refreshed_measured` read them; `vcfg`: the document's settings."""
    import dataclasses
    import time

    from realnets.sweeps.records import read_repeats
    from realnets.validation import files
    from realnets.validation.comparison import comparison
    from realnets.validation.noise_free_match import add_noise_free_prediction
    from realnets.validation.rerun import calibration_sample

    start = time.perf_counter()
    config, records = sweep
    task = workload.build(text_file=config.text_file)
    sample = calibration_sample(task, vcfg.sample_rows, vcfg.seed)
    added = add_noise_free_prediction(doc.to_dict(), task, config, records, sample, vcfg,
                                      log=say, repeats=read_repeats(sweep_dir))
    added["comparison"] = comparison(added)
    new = files.ValidationDocument.from_dict(added)
    took = time.perf_counter() - start     # the phase's time includes building the task
    prov = new.provenance
    if prov is not None and prov.wall_seconds is not None:
        prov = dataclasses.replace(prov, wall_seconds=prov.wall_seconds + took)
    return dataclasses.replace(new, provenance=prov,
                               seconds={**new.seconds, "noise_free_match": took})


def _with_transfer_time(doc, seconds: float | None):
    """`doc` with its transfer phase's time set to `seconds` (None: no such phase), its wall
    time moved by the same amount."""
    import dataclasses

    phases = {k: v for k, v in doc.seconds.items() if k != "transfer"}
    if seconds is not None:
        phases["transfer"] = seconds
    prov = doc.provenance
    if prov is not None and prov.wall_seconds is not None:
        moved = (seconds or 0.0) - doc.seconds.get("transfer", 0.0)
        prov = dataclasses.replace(prov, wall_seconds=prov.wall_seconds + moved)
    return dataclasses.replace(doc, seconds=phases, provenance=prov)


def _write_doc(out: Path, doc) -> None:
    """OUT/validation.json written by process 0 of a multi-host job (the only process
    otherwise), every process waiting until it is there: later steps read it from OUT."""
    from realnets.validation import files

    if is_writer():
        files.write_validation(out, doc)
    wait_for_writer(str(out / files.VALIDATION_FILE))
