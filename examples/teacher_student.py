"""A third own workload: a student MLP learning a fixed random teacher network's labels on
Gaussian inputs (synthetic: generated here from a seed, nothing is downloaded). Unlike every
other workload its data distribution is known exactly, and its validation set is large (4,096
rows) so that a goal on the error is not crossed by luck on a few rows.

    python -m realnets sweep --workload examples/teacher_student.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/teacher_student

Held out for the rules of docs/prediction_rule.md (session 35); `make_noisy_workload`, the
same student on a noisier teacher (logit scale 6, its own error 0.28), in session 36.
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import optax

from realnets.workloads.own import own_workload
from realnets.workloads.search_space import TrialSearchSpace

INPUT_DIM = 32
CLASSES = 10
TEACHER_WIDTH = 64
TEACHER_SCALE = 12.0      # logit scale; the best possible error is then 0.146 (the teacher's)
NOISY_SCALE = 6.0         # make_noisy_workload's: the teacher's own error is then 0.28
TRAIN_ROWS = 16384
VAL_ROWS = 4096


def teacher_data(rows: int, rng: np.random.Generator, w1: np.ndarray, w2: np.ndarray,
                 scale: float = TEACHER_SCALE):
    """Inputs float32 (rows, INPUT_DIM) ~ N(0, I); labels int32 (rows,) drawn from the softmax of
    the teacher's logits `scale * tanh(x w1) w2`, so the task has label noise."""
    x = rng.standard_normal((rows, INPUT_DIM)).astype(np.float32)
    logits = scale * np.tanh(x @ w1) @ w2
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    u = rng.random((rows, 1))
    y = np.minimum((p.cumsum(axis=1) < u).sum(axis=1), CLASSES - 1).astype(np.int32)
    return x, y


class StudentMLP(nn.Module):
    """Input float32 (B, 32); output (B, 10) logits. Two hidden layers of `width` units, ReLU."""

    width: int = 128

    @nn.compact
    def __call__(self, x):
        for _ in range(2):
            x = nn.relu(nn.Dense(self.width)(x))
        return nn.Dense(CLASSES)(x)


def make_workload(scale: float = TEACHER_SCALE, name: str = "teacher_student_mlp"):
    """The workload on the teacher of logit `scale` (the same teacher weights and inputs at any
    scale: only the labels' noise changes)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((INPUT_DIM, TEACHER_WIDTH)) / np.sqrt(INPUT_DIM)
    w2 = rng.standard_normal((TEACHER_WIDTH, CLASSES)) / np.sqrt(TEACHER_WIDTH)
    x, y = teacher_data(TRAIN_ROWS, rng, w1, w2, scale)
    xv, yv = teacher_data(VAL_ROWS, rng, w1, w2, scale)
    model = StudentMLP()

    def init_params(key):
        return model.init(key, x[:1])

    def loss(params, batch):                             # (B,) per-example cross-entropy
        logits = model.apply(params, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])

    def error(params, batch):                            # (B,) 1.0 where wrong
        logits = model.apply(params, batch["x"])
        return (jnp.argmax(logits, axis=-1) != batch["y"]).astype(jnp.float32)

    return own_workload(
        name, init_params=init_params, loss=loss, metric=error,
        metric_name="error", train={"x": x, "y": y}, val={"x": xv, "y": yv},
        optimizer="momentum", search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(16, 32, 64, 128, 256, 512, 1024, 2048, 4096), max_steps=3000,
        data="synthetic: Gaussian inputs (32-d), labels sampled from a fixed random teacher "
             "MLP 32-64-10 (tanh, logit scale "
             f"{scale:g}), 16,384 train / 4,096 validation",
        model="student MLP 32-128-128-10, ReLU (flax)")


def make_noisy_workload():
    """The same student and teacher with logit scale NOISY_SCALE: noisier labels."""
    return make_workload(NOISY_SCALE, "teacher_student_noisy_mlp")
