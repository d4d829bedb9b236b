"""Helpers shared by several command modules of `python -m realnets`: where progress lines
go, the command line a record names, the check of --text-file, and writing a record beside a validation report (refreshing its
summary.json entry)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def _check_text_file(text_file: str | None, workload) -> None:
    if text_file is not None and workload.name != "text_transformer":
        raise ValueError("text-file applies only to --workload text_transformer")


def _progress(no_progress: bool):
    """Where progress lines go: stderr, or nowhere with --no-progress."""
    return (lambda _: None) if no_progress else (lambda m: print(m, file=sys.stderr, flush=True))


def _whole_list(text: str, name: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers (--seeds, --full-batch-inits)."""
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise ValueError(f"{name} must be whole numbers separated by commas, got {text!r}") from None


def _log(no_progress: bool):
    """The `log` argument of the engines that take one: None with --no-progress."""
    return None if no_progress else _progress(False)


def _command_line(argv: list[str]) -> str:
    """The command as recorded in a record's provenance: `python -m realnets` and argv, quoted."""
    return "python -m realnets " + shlex.join(argv)


def _write_beside_report(directory: Path, name: str, record: dict) -> None:
    """A record written beside a validation report (atomically), and the report's entry in the
    summary.json beside its directory refreshed (`summary.refresh_summary`); by process 0 alone
    in a multi-host job."""
    from realnets import store
    from realnets.validation.summary import refresh_summary

    if is_writer():
        store.write_json_atomic(directory / name, record)
        refresh_summary(directory)
    wait_for_writer(f"{directory / name}")      # the next step may read it, on every process


def start_distributed(args) -> None:
    """Joins this process to a multi-host job when `args.coordinator` is given (before anything
    touches a device); ValueError for a timeout below 1 s, or process flags without one."""
    if args.coordinator:
        if args.distributed_timeout < 1:
            raise ValueError(f"distributed-timeout must be >= 1 second, got "
                             f"{args.distributed_timeout}")
        from realnets.training import mesh

        mesh.initialize_distributed(args.coordinator, args.num_processes, args.process_id,
                                    timeout_seconds=args.distributed_timeout)
    elif args.num_processes != 1 or args.process_id != 0:
        raise ValueError("num-processes and process-id need --coordinator HOST:PORT (the address "
                         "of process 0)")


def is_writer() -> bool:
    """`realnets.training.mesh.is_writer`, imported when called (jax loads with it)."""
    from realnets.training.mesh import is_writer as writer

    return writer()


def wait_for_writer(name: str) -> None:
    """`realnets.training.mesh.wait_for_writer`, imported when called."""
    from realnets.training.mesh import wait_for_writer as wait

    wait(name)
