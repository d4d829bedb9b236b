"""`python -m realnets {sweep, workloads, report, import-batch-science, validate, summary,
shortfall, swap-optimizer, adam-basis, two-ends, miss-split, tuning-check, rerender, remeasure,
two-point, branch,
throughput, plan}`.

All logic lives in the library (`realnets.sweeps.runner`, `realnets.sweeps.report`,
`realnets.sweeps.batch_science`, `realnets.validation` and its report);
this package parses flags, calls it and prints. Bad input prints one line `error: ...` and exits 2.
Multi-host: run the same command on every host with `--coordinator HOST:PORT --num-processes N
--process-id I` (see the README).

This module holds `main`, the dispatch from a subcommand to its handler; the parser is in
`realnets.cli.parser`, the commands in `realnets.cli.sweeps` (sweeps, reports, repeats,
branching), `realnets.cli.planning` (throughput, plan), `realnets.cli.validate` (validate) and
`realnets.cli.diagnostics` (the commands on validation reports and their summary),
`realnets.cli.remeasure` (a report's measured side from its resumed sweep), and helpers
several of them use in `realnets.cli.common`. Each imports the library inside its functions, so
that `python -m realnets --help` stays fast.
"""

from __future__ import annotations

import sys

from realnets.cli.diagnostics import (adam_basis_command, headline_text, miss_split_command,
                                      rerender_command, summary_text, swap_command,
                                      track_record_text, tuning_check_command, two_ends_command,
                                      two_point_command)
from realnets.cli.parser import build_parser
from realnets.cli.planning import plan_command, throughput_command
from realnets.cli.remeasure import remeasure_command
from realnets.cli.sweeps import (branch_command, import_text, repeat_command, report_text,
                                 run_sweep_command, shortfall_text, sweep_config, workloads_text)
from realnets.cli.validate import _refreshed_measured, validate_command

__all__ = ["main", "build_parser", "sweep_config", "_refreshed_measured"]

# subcommand -> handler(parsed flags, the command line's arguments) -> the text printed
COMMANDS = {
    "sweep": lambda args, argv: run_sweep_command(args),
    "workloads": lambda args, argv: workloads_text(args.format),
    "report": lambda args, argv: report_text(args.dir, args.format),
    "import-batch-science": lambda args, argv: import_text(args),
    "repeat": lambda args, argv: repeat_command(args),
    "shortfall": lambda args, argv: shortfall_text(args.paths, args.first, args.write_steps),
    "branch": lambda args, argv: branch_command(args),
    "throughput": lambda args, argv: throughput_command(args),
    "plan": lambda args, argv: plan_command(args),
    "validate": validate_command,
    "summary": lambda args, argv: summary_text(args.file, args.rebuild),
    "track-record": lambda args, argv: track_record_text(args.file, args.format),
    "headline": lambda args, argv: headline_text(args.file, args.format, args.measured),
    "swap-optimizer": lambda args, argv: swap_command(args),
    "adam-basis": adam_basis_command,
    "two-ends": two_ends_command,
    "miss-split": miss_split_command,
    "tuning-check": lambda args, argv: tuning_check_command(args),
    "rerender": lambda args, argv: rerender_command(args),
    "remeasure": remeasure_command,
    "two-point": two_point_command,
}


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        text = COMMANDS[args.command](args, list(sys.argv[1:] if argv is None else argv))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished trials are saved; rerun the same command to resume",
              file=sys.stderr)
        return 130
    print(text)
    return 0
