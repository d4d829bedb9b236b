"""Monte-Carlo simulation of the actual stochastic iterates of the NQM, for tests and teaching.

The engine (`nqm.moments`, `nqm.recurrence`) works on expected second moments; this module draws
the iterates themselves, so its sample mean of the loss is an independent check of those closed
forms. It is vectorised over runs x directions (arrays (R, d)) but costs O(steps R d) random
numbers: never on the engine's hot path.

Dynamics, per step t = 0..steps-1 (the same as `nqm.recurrence`, with samples for moments):

    theta_0 ~ N(0, diag(x0)),  v_0 = 0,  avg_0 = theta_0
    g_t = h_eff theta_t + eps_t,  eps_t ~ N(0, diag(c_eff) f(B)), fresh every step and direction
    v_{t+1} = b v_t + g_t,  theta_{t+1} = theta_t - a_t v_{t+1}
    avg_{t+1} = g avg_t + (1 - g) theta_{t+1}
    L_t = 1/2 sum_i h_i x_i^2,  x = avg if ema_decay > 0 else theta   (true h, not h_eff)

with (h_eff, c_eff) = `nqm.problem.preconditioned(h, c, p)`: the update theta <- theta - a P g with
P = H^-p is plain SGD on those arrays (docs/design.md, 'The NQM').

References:
  Zhang et al. 2019, "Which algorithmic choices matter at which batch sizes? Insights from a
  noisy quadratic model", section 3 (the NQM and its optimizers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nqm import validation
from nqm.problem import Problem, preconditioned

# Runs are simulated in chunks of at most this many (run, direction) entries, so memory stays at a
# few MB per array whatever runs x d is. The chunk layout is a function of (runs, d) only, so a
# seed still fixes the result.
CHUNK_ENTRIES = 1 << 18


@dataclass(frozen=True)
class MonteCarloResult:
    """Sample statistics of the loss over independent runs.

    Attributes:
      mean_T: sample mean of the loss at t = 0..steps, shape (steps + 1,); inf or nan where runs
        diverged.
      stderr_T: standard error of that mean, std(ddof=1) / sqrt(runs), shape (steps + 1,).
      runs: number of independent runs R.
      seed: the seed given to `np.random.default_rng`.
    """

    mean_T: np.ndarray
    stderr_T: np.ndarray
    runs: int
    seed: int


def check_learning_rates(learning_rates, steps: int) -> np.ndarray:
    """A step size > 0, or one per step (shape (steps,)): float64 (steps,)."""
    lrs = validation.check_all_in_range("learning_rates", learning_rates, 0.0, np.inf,
                                        closed_low=False, index_name="step")
    if lrs.ndim == 0:
        return np.full(steps, float(lrs))
    if lrs.shape != (steps,):
        raise ValueError(f"learning_rates must be a scalar or have shape (steps,) = ({steps},), "
                         f"got shape {lrs.shape}")
    return lrs


def _merge(count, mean, m2, n_b, mean_b, m2_b):
    """Chan et al.'s pairwise update of (count, mean, sum of squared deviations)."""
    total = count + n_b
    delta = mean_b - mean
    mean = mean + delta * (n_b / total)
    m2 = m2 + m2_b + delta * delta * (count * n_b / total)
    return total, mean, m2


def _simulate_chunk(rng, n, x0_D, h_D, h_eff_D, noise_std_D, lrs, momentum, ema_decay):
    """Loss of `n` runs at t = 0..steps, shape (steps + 1, n)."""
    steps = lrs.shape[0]
    d = h_D.shape[0]
    weight_D = 0.5 * h_D
    theta_RD = rng.standard_normal((n, d)) * np.sqrt(x0_D)
    v_RD = np.zeros_like(theta_RD)
    avg_RD = theta_RD.copy() if ema_decay > 0 else theta_RD
    loss_TR = np.empty((steps + 1, n))
    loss_TR[0] = (theta_RD * theta_RD) @ weight_D
    grad_RD = np.empty_like(theta_RD)
    for t in range(steps):
        # g = h_eff theta + eps, eps ~ N(0, c_eff / B): one fresh draw per run, direction, step.
        rng.standard_normal(out=grad_RD)
        grad_RD *= noise_std_D
        grad_RD += h_eff_D * theta_RD
        if momentum > 0:
            v_RD *= momentum
            v_RD += grad_RD
            theta_RD -= lrs[t] * v_RD
        else:
            theta_RD -= lrs[t] * grad_RD
        if ema_decay > 0:
            avg_RD *= ema_decay
            avg_RD += (1.0 - ema_decay) * theta_RD
        read_RD = avg_RD if ema_decay > 0 else theta_RD
        loss_TR[t + 1] = (read_RD * read_RD) @ weight_D
    return loss_TR


def simulate_losses(problem: Problem, steps: int, batch_size: float, learning_rates,
                    momentum: float = 0.0, ema_decay: float = 0.0, precond_power: float = 0.0,
                    runs: int = 1000, seed: int = 0) -> MonteCarloResult:
    """Sample mean and standard error of the loss of `runs` independent stochastic runs.

    Momentum and averaging may be combined (as in `nqm.recurrence`); the closed forms of
    `nqm.moments` cover one or the other.

    Args:
      problem: the NQM arrays (h, c, E theta_0^2), each shape (d,).
      steps: number of steps, a whole number >= 0.
      batch_size: B >= 1 (the noise variance is c f(B), `Problem.noise_factor`; need not be an
        integer).
      learning_rates: step size a > 0, a scalar or an array of shape (steps,) giving a_t for each
        step (a schedule).
      momentum: heavy-ball b in [0, 1), zero initial velocity.
      ema_decay: iterate-averaging decay g in [0, 1); when > 0 the loss is read at the average.
      precond_power: p in [0, 1], preconditioner P = H^-p.
      runs: number of independent runs R >= 2.
      seed: a whole number >= 0 for `np.random.default_rng`; the same inputs and seed give the
        same result bit for bit.

    Returns:
      A `MonteCarloResult` with the mean loss and its standard error at t = 0..steps. A run that
      diverges overflows to inf and makes the mean inf or nan from then on.
    """
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be an nqm.problem.Problem, got {type(problem).__name__}")
    steps = validation.check_whole("steps", steps, 0)
    runs = validation.check_whole("runs", runs, 2)
    seed = validation.check_whole("seed", seed, 0)
    batch_size = validation.check_in_range("batch_size", batch_size, 1.0, math.inf,
                                           closed_high=False)
    lrs = check_learning_rates(learning_rates, steps)
    momentum = validation.check_in_range("momentum", momentum, 0.0, 1.0, closed_high=False)
    ema_decay = validation.check_in_range("ema_decay", ema_decay, 0.0, 1.0, closed_high=False)
    h_eff_D, c_eff_D = preconditioned(problem.curvature_D, problem.noise_D, precond_power)
    problem.check_batch_sizes(batch_size, "batch_size")
    noise_std_D = np.sqrt(c_eff_D * problem.noise_factor(batch_size))

    rng = np.random.default_rng(seed)
    chunk = max(1, CHUNK_ENTRIES // problem.dim)
    count, mean_T, m2_T = 0, np.zeros(steps + 1), np.zeros(steps + 1)
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, runs, chunk):
            n = min(chunk, runs - start)
            loss_TR = _simulate_chunk(rng, n, problem.init_second_moment_D, problem.curvature_D,
                                      h_eff_D, noise_std_D, lrs, momentum, ema_decay)
            mean_b = loss_TR.mean(axis=1)
            m2_b = np.sum((loss_TR - mean_b[:, None]) ** 2, axis=1)
            count, mean_T, m2_T = _merge(count, mean_T, m2_T, n, mean_b, m2_b)
        stderr_T = np.sqrt(m2_T / (runs - 1) / runs)
    mean_T.setflags(write=False)
    stderr_T.setflags(write=False)
    return MonteCarloResult(mean_T=mean_T, stderr_T=stderr_T, runs=runs, seed=seed)
