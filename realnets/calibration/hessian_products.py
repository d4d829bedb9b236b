"""The Hessian of the mean training loss over a sample as a matrix-free operator on flattened
parameter vectors (forward-over-reverse: `jax.jvp` of `jax.grad`; Pearlmutter 1994, section 3).
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from realnets.calibration import sharded_sample


class HessianOperator:
    """v -> H v for the Hessian H of the mean training loss over a sample (see `hvp`).

    Attributes:
      dim: P, the number of scalar parameters.
      num_rows: n, rows of the sample.
      params_P: the flattened parameters (float64 copy).
      unravel: flat vector (P,) -> parameter tree.
    """

    def __init__(self, loss_fn: Callable, params, batch: dict, *, chunk_rows: int | None = None,
                 devices=None):
        theta_P, unravel = ravel_pytree(params)
        self._theta_P = np.asarray(theta_P)
        self.dtype = self._theta_P.dtype
        self.dim = int(self._theta_P.shape[0])
        self.params_P = self._theta_P.astype(np.float64)
        self.unravel = unravel
        self.sample = sharded_sample.ShardedSample(batch, chunk_rows=chunk_rows, devices=devices)
        self.num_rows = self.sample.num_rows

        def flat_loss(t_P, rows):
            return loss_fn(unravel(t_P), rows)

        def hvp_rows(t_P, v_P, rows):
            # Forward-over-reverse (Pearlmutter's R-operator): d/de grad L(theta + e v) at e = 0.
            return jax.jvp(lambda t: jax.grad(flat_loss)(t, rows), (t_P,), (v_P,))[1]

        self._hvp_rows = hvp_rows
        self._grad_rows = jax.grad(flat_loss)
        self.num_matvecs = 0

    def __call__(self, v_P) -> np.ndarray:
        """H v: v float (P,) -> float64 (P,)."""
        v_P = np.asarray(v_P)
        if v_P.shape != (self.dim,):
            raise ValueError(f"vector must have shape ({self.dim},), got {v_P.shape}")
        self.num_matvecs += 1
        return self.sample.mean(self._hvp_rows, self._theta_P, v_P.astype(self.dtype))

    matvec = __call__

    def gradient(self) -> np.ndarray:
        """The mean gradient over the sample, float64 (P,)."""
        return self.sample.mean(self._grad_rows, self._theta_P)


def hvp(loss_fn: Callable, params, batch: dict, *, chunk_rows: int | None = None,
        devices=None) -> HessianOperator:
    """The Hessian of the mean training loss over a sample, as a matrix-free operator.

    H = (1/n) sum_j d^2 loss_j / d theta^2 over the n rows of `batch`; `H(v)` costs about two
    gradient evaluations over the sample (Pearlmutter 1994, section 3).

    Args:
      loss_fn: (params, batch) -> mean loss over the batch's rows (a `Task.loss_fn`).
      params: the parameter tree at which H is taken.
      batch: the sample, a dict of host arrays with a leading row axis n (e.g. `Task.train` or a
        slice of it, or `Task.draw_batch(rng, n)`).
      chunk_rows: rows per compiled call (None: the whole sample at once); a sample too big for
        device memory is cut into chunks whose products are averaged (weights rows / n).
      devices: devices to shard over (default all); each chunk of b rows uses gcd(b, #devices).

    Returns:
      A `HessianOperator`: call it on a float vector (P,) to get H v, float64 (P,).
    """
    return HessianOperator(loss_fn, params, batch, chunk_rows=chunk_rows, devices=devices)
