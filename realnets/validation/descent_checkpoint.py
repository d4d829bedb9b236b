"""The state of one full-batch descent, saved while it runs, so that a killed descent resumes at
the step it had reached instead of from its start.

`descent_journal` keeps the descents that finished; a single descent of the text model's whole
set is up to 949 steps at 6-7 s each, so losing an unfinished one can cost hours. While a
descent runs, `quadratic_path.descend` saves its state every `every` steps to a `.npz` file
(numpy arrays only, written to a temporary file and renamed over the old one; read back with
`allow_pickle=False`). The file names the descent it belongs to by a JSON key (the journal's
header with the trial or seed, its rate, momentum and cap); a file with another key, or with
arrays of other shapes, is ignored and replaced. `descend` deletes the file when the descent
ends, so it exists only while a descent is unfinished.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from realnets import store
from realnets.training.mesh import is_writer

# a descent's state is saved every this many steps (a whole-set step is seconds; a save of a
# few parameter vectors is milliseconds)
EVERY_STEPS = 5


@dataclass(frozen=True)
class Checkpoint:
    """Where and under which key a descent saves its state.

    Attributes:
      path: the `.npz` file.
      key: JSON-ready dict naming the descent (a file with another key is not resumed).
      every: steps between saves (>= 1).
    """

    path: Path
    key: dict
    every: int = EVERY_STEPS

    def __post_init__(self):
        if self.every < 1:
            raise ValueError(f"every must be >= 1, got {self.every}")


@dataclass(frozen=True)
class DescentState:
    """A descent at the top of its step `t`, before the loss of theta_t is computed.

    Attributes:
      t: the number of updates made.
      theta_P: the parameters (P,) float64.
      opt_state: the optimizer's state (an optax pytree).
      losses: the losses at steps 0 .. t-1 kept so far (None where not finite).
      first: the loss at step 0 (None when t = 0).
      previous: (theta_{t-1} (P,) float64, its loss), None when t = 0.
      rise: (step, rise or None, theta (P,) float64) of the first rise, None if none yet.
    """

    t: int
    theta_P: np.ndarray
    opt_state: object
    losses: tuple
    first: float | None
    previous: tuple | None
    rise: tuple | None


def _key_text(key: dict) -> str:
    return json.dumps(key, sort_keys=True, default=float)


def save(checkpoint: Checkpoint, state: DescentState) -> None:
    """Writes `state` under `checkpoint.key`, atomically (a reader sees the old file or the new
    one)."""
    leaves = jax.tree_util.tree_leaves(state.opt_state)
    arrays = {"key": np.array(_key_text(checkpoint.key)), "t": np.array(state.t, np.int64),
              "theta_P": np.asarray(state.theta_P, np.float64),
              # None (not finite) as NaN: a kept loss is otherwise always finite
              "losses": np.array([np.nan if x is None else x for x in state.losses], np.float64),
              "first": np.array(np.nan if state.first is None else state.first, np.float64),
              "leaves": np.array(len(leaves), np.int64)}
    for i, leaf in enumerate(leaves):
        arrays[f"leaf_{i}"] = np.asarray(leaf)
    if state.previous is not None:
        arrays["previous_theta"] = np.asarray(state.previous[0], np.float64)
        arrays["previous_loss"] = np.array(state.previous[1], np.float64)
    if state.rise is not None:
        arrays["rise_step"] = np.array(state.rise[0], np.int64)
        arrays["rise"] = np.array(np.nan if state.rise[1] is None else state.rise[1], np.float64)
        arrays["rise_theta"] = np.asarray(state.rise[2], np.float64)
    if is_writer():
        store.write_atomic(checkpoint.path, lambda f: np.savez(f, **arrays))


def load(checkpoint: Checkpoint, theta_P: np.ndarray, opt_state) -> DescentState | None:
    """The saved state of the descent `checkpoint.key` names, or None when there is none: no
    file, an unreadable one, another key, or arrays that do not match `theta_P` (the start,
    (P,)) and `opt_state` (the optimizer's initial state, whose tree the saved leaves fill)."""
    path = Path(checkpoint.path)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) != _key_text(checkpoint.key):
                return None
            fresh, tree = jax.tree_util.tree_flatten(opt_state)
            if int(z["leaves"]) != len(fresh) or z["theta_P"].shape != np.shape(theta_P):
                return None
            leaves = [z[f"leaf_{i}"] for i in range(len(fresh))]
            if any(a.shape != np.shape(b) for a, b in zip(leaves, fresh)):
                return None
            leaves = [np.asarray(a, dtype=np.asarray(b).dtype) for a, b in zip(leaves, fresh)]
            first = float(z["first"])
            previous = (None if "previous_theta" not in z
                        else (np.array(z["previous_theta"]), float(z["previous_loss"])))
            rise = None
            if "rise_step" in z:
                r = float(z["rise"])
                rise = (int(z["rise_step"]), None if np.isnan(r) else r, np.array(z["rise_theta"]))
            return DescentState(
                t=int(z["t"]), theta_P=np.array(z["theta_P"]),
                opt_state=jax.tree_util.tree_unflatten(tree, leaves),
                losses=tuple(None if np.isnan(x) else float(x) for x in z["losses"]),
                first=None if np.isnan(first) else first, previous=previous, rise=rise)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None


def remove(checkpoint: Checkpoint | None) -> None:
    """Deletes the checkpoint's file (the descent ended; the writing process)."""
    if checkpoint is not None and is_writer():
        Path(checkpoint.path).unlink(missing_ok=True)
