"""A journal of finished full-batch descents, so that a killed `two-ends` loses none of them.

`noise_free_match.full_batch_steps` descends from each trial in turn; on a whole training set of
a CNN that is minutes per trial (mnist_cnn: 3.5 s per step on 9,003 rows). With a journal each
finished trial's run is appended to a JSON-lines file (`store.append_jsonl`, fsynced) whose first
line is a header naming what the descents were for (workload, optimizer, target, step limit,
rows); a later call with the same header takes those runs as done instead of descending again.
A journal with another header is stale and started afresh. The caller deletes the journal once
its record is written. `full_batch_inits.over_inits` journals its descents the same way, keyed
by seed. The descent under way saves its state beside the journal (`checkpoint`,
`descent_checkpoint`), so a killed call also resumes the unfinished descent at its last save.
"""

from __future__ import annotations

import json
from pathlib import Path

from realnets import store
from realnets.training.mesh import is_writer
from realnets.validation.descent_checkpoint import Checkpoint


def rows_per_call(chunk_rows: int | None, rows: int) -> int:
    """Rows of a `rows`-row set per compiled call in chunks of `chunk_rows` (None: all)."""
    return rows if chunk_rows is None else min(int(chunk_rows), rows)


def chunking(chunk_rows: int | None, rows: int) -> dict:
    """A header's chunking: {"chunk_rows": N} where the set takes several calls, else {}, so
    that all rows in one call, however asked for, reads as a journal made before chunking."""
    per_call = rows_per_call(chunk_rows, rows)
    return {"chunk_rows": per_call} if per_call < rows else {}


def _normal(obj) -> dict:
    """obj as it reads back from JSON (tuples become lists, numpy scalars numbers)."""
    return json.loads(store.to_json(obj))


def open_journal(path: Path, header: dict, key: str = "trial_id") -> dict[str, dict]:
    """The runs already finished under `header`, keyed by str(run[key]) (the trial id, or the
    seed of `full_batch_inits`); where `path` is missing, unreadable or has another header, a
    new journal holding only `header` replaces it and {} is returned. Only the writing process
    (`mesh.is_writer`) repairs or replaces it; the others read what it holds at the start,
    which is the same: no process can finish a descent before every process has begun it."""
    wanted = {"header": _normal(header)}
    writer = is_writer()
    if path.is_file():
        if writer:
            store.repair_jsonl(path)
        try:
            rows = store.read_jsonl(path)
        except ValueError:
            rows = []
        if rows and rows[0] == wanted:
            return {str(r[key]): r for r in rows[1:] if key in r}
    if writer:
        store.write_text_atomic(path, store.to_json(wanted) + "\n")
    return {}


def append_run(path: Path, run: dict) -> None:
    """Adds one finished run (JSON-ready, with its key) to the journal (the writing process)."""
    if is_writer():
        store.append_jsonl(path, [run])


def reusable(run: dict | None, trial_id, learning_rate: float, momentum: float | None,
             step_limit: int) -> bool:
    """Whether a journalled run is the descent this call would make: the same trial, rate,
    momentum and cap (the cap depends on the trials before it, so a journal written in another
    order is not reused)."""
    return (run is not None and str(run.get("trial_id")) == str(trial_id)
            and run.get("learning_rate") == float(learning_rate)
            and run.get("momentum") == (None if momentum is None else float(momentum))
            and run.get("step_limit") == int(step_limit))


def checkpoint(journal: Path | None, header: dict, run: dict) -> Checkpoint | None:
    """Where the descent `run` (JSON-ready: its trial id or seed, rate, momentum, cap) of the
    journal `header` saves its state: `<journal>.partial.npz`, one file for the descent under
    way (None without a journal)."""
    if journal is None:
        return None
    return Checkpoint(Path(journal).with_suffix(".partial.npz"),
                      _normal({"header": header, "run": run}))
