"""`python -m realnets remeasure DIR ...`: a validation report's measured side rebuilt from its
sweep resumed with more trials, its predictions kept (`realnets.validation.remeasure`); the
records beside it, the sweep's two_point.json, the charts, report.md and the summary entry
follow. Nothing is trained."""

from __future__ import annotations

from pathlib import Path

from realnets.cli.common import _command_line


def remeasure_command(args, argv) -> str:
    """Every DIR is checked (its document, its sweep and that the sweep's first K trials made
    its predictions) before any file is written; then each is written, side records first and
    validation.json last, so a run stopped part-way is finished by running it again."""
    from realnets.cli.diagnostics import _report_directories, _sweep_dir_of
    from realnets.sweeps.records import load_sweep, read_repeats
    from realnets.validation.files import VALIDATION_FILE, read_validation, side_records
    from realnets.validation.remeasure import remeasured

    directories = _report_directories(args.dirs)
    if args.sweep and len(directories) > 1:
        raise ValueError("sweep: --sweep names one sweep; give one DIR with it")
    plans = []
    for d in directories:
        if not (d / VALIDATION_FILE).is_file():
            raise ValueError(f"dir {d}: no {VALIDATION_FILE} (not a validation report)")
        doc = read_validation(d)
        sweep_dir = _sweep_dir_of(doc, args.sweep, d)
        config, records = load_sweep(sweep_dir)
        repeats = read_repeats(sweep_dir)
        old = doc.to_dict()
        try:
            new = remeasured(old, config, records, repeats)
        except ValueError as err:
            raise ValueError(f"dir {d}: {sweep_dir}: {err}") from None
        # side records of the document before, or already of the new one (a run stopped between
        # its writes): each kept from whichever it belongs to
        before, after = side_records(d, old), side_records(d, new)
        sides = {k: before[k] if before[k] is not None else after[k] for k in before}
        plans.append((d, sweep_dir, config, records, old, new, sides))
    command = _command_line(argv)
    return "\n".join(_write(*plan, command) for plan in plans)


def _write(directory: Path, sweep_dir: Path, config, records, old: dict, new: dict, sides: dict,
           command: str) -> str:
    from realnets import store
    from realnets.validation import two_ends
    from realnets.validation.files import (TWO_ENDS_FILE, MISS_SPLIT_FILE, TWO_POINT_FILE,
                                           ValidationDocument, write_validation)
    from realnets.validation.miss_split import with_measured
    from realnets.validation.remeasure import predicted_from, with_measured_two_point
    from realnets.sweeps.report import fmt
    from realnets.validation.report import rerender
    from realnets.validation.summary import refresh_summary, summary_entry
    from realnets.validation.two_point import measured_b_crit
    from ui.validation_charts import export_charts

    new = {**new, "provenance": {**(new.get("provenance") or {}), "remeasured": command}}
    m = new["measured"]["fit"]["b_crit"]
    if sides["two_ends"] is not None:
        store.write_json_atomic(directory / TWO_ENDS_FILE, {
            **sides["two_ends"], "compared": two_ends.compared(summary_entry(new))})
    if sides["miss_split"] is not None:
        store.write_json_atomic(directory / MISS_SPLIT_FILE, with_measured(sides["miss_split"], m))
    point = ""
    if (sweep_dir / TWO_POINT_FILE).is_file():
        record = store.read_json(sweep_dir / TWO_POINT_FILE, "two-point record")
        record = with_measured_two_point(record, config, records, measured_b_crit(records, config),
                                         predicted_from(new))
        store.write_json_atomic(sweep_dir / TWO_POINT_FILE, record)
        point = f"; {sweep_dir / TWO_POINT_FILE} held against it"
    write_validation(directory, ValidationDocument.from_dict(new))
    export_charts(directory, new)
    rerender(directory)
    refresh_summary(directory)
    was, k = old["measured"]["fit"]["b_crit"], predicted_from(new)
    iv = new["measured"].get("interval") or {}
    span = f" ({fmt(iv['p16'])} .. {fmt(iv['p84'])})" if iv.get("available") else ""
    return (f"{directory}: measured B_crit {fmt(m)}{span} from {config.trials} trials per batch "
            f"size (was {fmt(was)} from {old['sweep_config']['trials']}); predictions kept, made "
            f"from the first {k}{point}")
