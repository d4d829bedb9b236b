"""The gradient noise scale B_simple measured while training, from two batch sizes of one step.

References:
  McCandlish et al. 2018, "An empirical model of large-batch training", appendix A.1: with
  E|G_b|^2 = |G|^2 + tr(Sigma) / b,
    |G|^2     ~ (B |G_B|^2 - b |G_b|^2) / (B - b),
    tr(Sigma) ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B),
  both unbiased; B_simple = tr(Sigma) / |G|^2 is taken as the ratio of their moving averages
  (averaging numerator and denominator separately keeps the ratio's bias small).

In a data-parallel step the small batch is one device's share (b = B / n) and the big batch the
all-reduced gradient; on one device the batch is split into two halves (b = B / 2).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from nqm.problem import noise_factor


def unbiased_terms(small_sq, big_sq, b_small, b_big, population: int = 0):
    """Unbiased estimates of (|G|^2, tr(Sigma)) from squared gradient norms.

    With batches drawn without replacement from a training set of N examples and Sigma the
    covariance of one uniformly drawn example's gradient,
    E|G_b|^2 = |G|^2 + tr(Sigma) (N - b) / (b (N - 1)) (the finite-population correction; it
    matters once B is a sizeable fraction of N, e.g. B = 4096 of MNIST's 9,003: without it
    |G|^2 comes out low by tr(Sigma) / (N - 1) and B_simple far too high). N = 0 means
    unlimited data, where the factor is 1 / b (McCandlish et al.'s form).

    Args:
      small_sq: |G_b|^2 for batches of b_small examples (averaged over the groups), any shape.
      big_sq: |G_B|^2 of the same step's full batch of b_big examples, same shape.
      b_small, b_big: batch sizes, b_small < b_big.
      population: N, the number of examples batches are drawn from (0: unlimited).

    Returns:
      (grad_sq, trace_cov), each the shape of `small_sq`.
    """
    n = population or None
    alpha_small, alpha_big = (float(noise_factor(b, n)) for b in (b_small, b_big))
    trace_cov = (small_sq - big_sq) / (alpha_small - alpha_big)
    grad_sq = big_sq - alpha_big * trace_cov
    return grad_sq, trace_cov


class NoiseEMA(NamedTuple):
    """Moving averages of the two unbiased terms and the number of updates folded in.

    Both averages start at 0 and share one decay, so their start-up bias cancels in the ratio.
    """

    grad_sq: jnp.ndarray
    trace_cov: jnp.ndarray
    count: jnp.ndarray

    @classmethod
    def zeros(cls) -> "NoiseEMA":
        return cls(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))

    def update(self, grad_sq, trace_cov, decay: float) -> "NoiseEMA":
        return NoiseEMA(decay * self.grad_sq + (1.0 - decay) * grad_sq,
                        decay * self.trace_cov + (1.0 - decay) * trace_cov, self.count + 1)

    def b_simple(self):
        """tr(Sigma) / |G|^2 from the averages (NaN before the first update)."""
        return jnp.where(self.count > 0, self.trace_cov / self.grad_sq, jnp.nan)
