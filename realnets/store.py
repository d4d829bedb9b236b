"""Crash-safe files of a sweep directory: atomic JSON documents and an append-only JSON-lines log.

- `write_json_atomic`: write to a temporary file in the same directory, fsync, `os.replace`:
  a reader sees the old file or the new one, never half of one.
- `updating(path)`: a lock held by one process at a time around a read-modify-write of `path`
  (the validated workloads' summary, which several `validate` runs may update at once).
- `append_jsonl`: one record a line, flushed and fsynced before returning. A process killed in
  the middle of a write leaves at most one final line without its newline; `read_jsonl` ignores
  it and `repair_jsonl` cuts it off before the next append.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

from filelock import FileLock

from nqm.curve import to_json


def write_json_atomic(path: Path, obj, indent: int | None = 1) -> None:
    write_text_atomic(path, to_json(obj, indent=indent) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """`text` to `path` through a temporary file, fsynced and renamed over it: a reader sees the
    old file or the new one, never a part."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def write_atomic(path: Path, write: Callable) -> None:
    """`write(f)` (f a binary file) to `path` through a temporary file, fsynced and renamed over
    it: a reader sees the old file or the new one, never a part."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)     # mkstemp makes 0600; results are for everyone to read
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def updating(path: Path) -> FileLock:
    """A lock on `path` for a read-modify-write (`with store.updating(path): ...`): another
    process taking it waits until the first is done, so neither loses the other's change. The
    lock is the hidden file ".NAME.lock" beside `path` (left in place, as filelock does on
    POSIX); it works across processes on one host and on file systems with POSIX locks."""
    path = Path(path)
    return FileLock(str(path.with_name(f".{path.name}.lock")))


def read_json(path: Path, what: str) -> dict:
    """A JSON object from `path`; ValueError naming `what` if it is missing or corrupt."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{what}: {path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{what}: {path} is not valid JSON ({err})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what}: {path} must hold a JSON object")
    return obj


def read_jsonl(path: Path) -> list[dict]:
    """Every complete line of `path` as a dict ([] if absent); a final line without newline (a
    write cut short) is ignored; any other bad line is a ValueError naming file and line."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    with path.open("r", encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith("\n"):
                break
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path} line {number} is not valid JSON ({err})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path} line {number} must be a JSON object")
            records.append(record)
    return records


def repair_jsonl(path: Path) -> None:
    """Cuts a final partial line (no newline) off `path`, if there is one."""
    path = Path(path)
    if not path.exists():
        return
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep != len(data):
        with path.open("r+b") as f:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())


def append_jsonl(path: Path, records: list[dict]) -> None:
    with Path(path).open("a", encoding="utf-8") as f:
        for record in records:
            f.write(to_json(record) + "\n")
        f.flush()
        os.fsync(f.fileno())
