"""A full-batch descent killed part-way resumes from its saved state and ends as an
uninterrupted one does (`descent_checkpoint`, `quadratic_path.descend`)."""

import numpy as np
import optax
import pytest

from realnets.validation.descent_checkpoint import Checkpoint
from realnets.validation.quadratic_path import descend

H = np.array([1.0, 10.0, 30.0])


class Killed(Exception):
    pass


def _quadratic(calls, kill_at=None):
    """1/2 sum_i h_i theta_i^2 and its gradient; raises Killed on call `kill_at` (0-based)."""
    def value_and_grad(theta):
        if kill_at is not None and len(calls) == kill_at:
            raise Killed
        calls.append(np.array(theta))
        return 0.5 * float(H @ theta ** 2), H * theta
    return value_and_grad


def _run(checkpoint=None, kill_at=None, calls=None):
    calls = [] if calls is None else calls
    # Adam with momentum: a stateful optimizer whose state must come back exactly; the rate
    # makes the loss go up on the way (a first rise to restore too)
    return descend(_quadratic(calls, kill_at), np.array([1.0, -2.0, 0.5]),
                   optax.adam(0.4, b1=0.9), target=1e-3, step_limit=300,
                   checkpoint=checkpoint), calls


def test_a_killed_descent_resumes_at_its_last_save_and_ends_as_an_uninterrupted_one(tmp_path):
    (whole, whole_rise), whole_calls = _run()
    assert whole.status == "reached" and whole.steps_to_target > 40
    assert whole_rise is not None and whole_rise.step < 30      # the rise is in the saved state
    ck = Checkpoint(tmp_path / "d.partial.npz", {"trial_id": 2, "learning_rate": 0.4}, every=7)
    with pytest.raises(Killed):
        _run(ck, kill_at=38)
    assert ck.path.is_file()
    (resumed, rise), calls = _run(ck)
    # the last save before the kill was at the top of step 35: steps 35.. are computed again
    assert len(calls) == len(whole_calls) - 35
    np.testing.assert_array_equal(calls[0], whole_calls[35])
    assert resumed == whole
    assert rise.step == whole_rise.step and rise.rise == whole_rise.rise
    np.testing.assert_array_equal(rise.theta_P, whole_rise.theta_P)
    assert not ck.path.exists()                               # deleted when the descent ends


def test_a_checkpoint_of_another_descent_or_a_broken_file_is_not_resumed(tmp_path):
    path = tmp_path / "d.partial.npz"
    with pytest.raises(Killed):
        _run(Checkpoint(path, {"seed": 1}, every=5), kill_at=20)
    (other, _), calls = _run(Checkpoint(path, {"seed": 2}, every=5))
    assert len(calls) == other.steps_to_target + 1             # from step 0
    path.write_bytes(b"PK\x03\x04 cut short")
    (again, _), calls = _run(Checkpoint(path, {"seed": 1}, every=5))
    assert again == other and len(calls) == again.steps_to_target + 1


def test_every_must_be_a_positive_step_count(tmp_path):
    with pytest.raises(ValueError, match="every must be >= 1"):
        Checkpoint(tmp_path / "x.npz", {}, every=0)
