"""validation.json: written atomically, read back with its required keys checked."""

from __future__ import annotations

from pathlib import Path

from realnets import store

VALIDATION_FILE = "validation.json"


def write_validation(out_dir: Path, doc: dict) -> Path:
    """DIR/validation.json, atomically; returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / VALIDATION_FILE
    store.write_json_atomic(path, doc)
    return path


def read_validation(out_dir: Path) -> dict:
    """The document of DIR/validation.json (ValueError naming the path if missing or corrupt)."""
    doc = store.read_json(Path(out_dir) / VALIDATION_FILE, "validation")
    for key in ("workload", "measured", "checkpoints", "comparison"):
        if key not in doc:
            raise ValueError(f"validation: {Path(out_dir) / VALIDATION_FILE} has no {key!r}")
    return doc
