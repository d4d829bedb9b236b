"""The noisy quadratic model: curvature spectrum, gradient-noise model, start and target.

Loss `L(theta) = 1/2 sum_i h_i theta_i^2` in the eigenbasis of H; a stochastic gradient at batch
size B is `H theta + eps` with `eps ~ N(0, C f(B))`, C diagonal with entries `c_i` (the variance of
one example's gradient) and `f(B) = noise_factor(B, N)`: 1 / B for an unlimited supply of examples,
times the finite-population correction (N - B) / (N - 1) when each batch is drawn without
replacement from a training set of N examples (docs/design.md, 'The NQM').

References:
  Zhang et al. 2019, "Which algorithmic choices matter at which batch sizes? Insights from a
  noisy quadratic model", section 3 (defaults: d = 10^4, h_i = 1/i, c_i = h_i, theta_0 ~ N(0, I)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nqm import validation
NOISE_MODELS = ("curvature", "power", "constant")
MAX_DIM = 10_000_000


def noise_factor(batch_size, train_size: float | None = None) -> np.ndarray:
    """Variance of a batch-mean gradient as a multiple of one example's: f(B) = 1 / B, times
    (N - B) / (N - 1) for a batch drawn without replacement from N examples.

    Every place in the engine where the noise depends on the batch size goes through here. Each
    step's batch is modelled as a fresh draw, independent of the other steps' (the correlations
    inside an epoch are not modelled). f(N) = 0: the full batch has no noise.

    Args:
      batch_size: B >= 1, any shape (need not be an integer).
      train_size: N >= 2, or None for an unlimited supply (no correction). B <= N is required.

    Returns:
      float64 array of the shape of `batch_size`.
    """
    b = np.asarray(batch_size, dtype=np.float64)
    if train_size is None:
        return 1.0 / b
    n = float(train_size)
    validation.check_all_in_range("batch_size", b, 1.0, n)
    return (n - b) / (b * (n - 1.0))


def check_train_size(train_size) -> float | None:
    """None, or a whole number of examples N >= 2 (returned as float)."""
    if train_size is None:
        return None
    return float(validation.check_whole("train_size", train_size, 2))


@dataclass(frozen=True)
class Problem:
    """The arrays the engine works on, all of shape (d,).

    Attributes:
      curvature_D: Hessian eigenvalues h_i > 0.
      noise_D: per-example gradient variances c_i > 0 along the same eigenvectors.
      init_second_moment_D: E[theta_i^2] at step 0, >= 0.
      target: the loss to reach, > 0.
      train_size: N, the number of training examples batches are drawn from (without
        replacement), or None for an unlimited supply; see `noise_factor`.
    """

    curvature_D: np.ndarray
    noise_D: np.ndarray
    init_second_moment_D: np.ndarray
    target: float
    train_size: float | None = None

    def noise_factor(self, batch_size) -> np.ndarray:
        """f(B) of this problem: the batch gradient's noise variance is c_i f(B)."""
        return noise_factor(batch_size, self.train_size)

    def check_batch_sizes(self, batch_sizes, name: str = "batch_sizes") -> None:
        """Raises ValueError naming `name` when a batch size exceeds the training set."""
        if self.train_size is not None:
            validation.check_all_in_range(name, batch_sizes, 1.0, self.train_size)

    @property
    def dim(self) -> int:
        return int(self.curvature_D.shape[0])

    def initial_loss(self) -> float:
        """E[L(theta_0)] = 1/2 sum_i h_i E[theta_i^2]."""
        return float(0.5 * np.dot(self.curvature_D, self.init_second_moment_D))

    def lower_bound_steps(self, batch_sizes) -> np.ndarray:
        """The estimator bound `S(B) >= sum_i(c_i / h_i) / (2 target B)` (docs/design.md,
        'The NQM').

        No method reaches the target in fewer steps: an unbiased estimate of theta from S B
        fresh samples has loss at least this. It assumes an unlimited supply of examples: with a
        finite training set (`train_size`) the bound does not hold. Returns float steps, shape
        of `batch_sizes`.
        """
        batch = np.asarray(batch_sizes, dtype=np.float64)
        return float(np.sum(self.noise_D / self.curvature_D)) / (2.0 * self.target * batch)


@dataclass(frozen=True)
class NQMConfig:
    """A noisy quadratic problem, as plain hashable values (usable as a cache key, JSON-ready).

    Attributes:
      dim: number of dimensions d (ignored when `curvature` is given).
      spectrum_exponent: a in h_i = i^-a, i = 1..d.
      noise: 'curvature' (c_i = noise_scale * h_i), 'power' (c_i = noise_scale * i^-noise_exponent)
        or 'constant' (c_i = noise_scale).
      noise_exponent: b in c_i = i^-b for noise='power'.
      noise_scale: factor on the per-example gradient variance.
      init_second_moment: E[theta_i^2] at start for every i (1: theta_0 ~ N(0, I)).
      target: the loss to reach.
      curvature, noise_variance, init_second_moments: arrays given by the caller (e.g. measured
        on a network) that replace the power laws above; each of length d.
      train_size: N, the training set that batches are drawn from without replacement (the
        finite-population correction of the noise), or None for an unlimited supply.
    """

    dim: int = 10_000
    spectrum_exponent: float = 1.0
    noise: str = "curvature"
    noise_exponent: float = 1.0
    noise_scale: float = 1.0
    init_second_moment: float = 1.0
    target: float = 0.01
    curvature: tuple[float, ...] | None = field(default=None, repr=False)
    noise_variance: tuple[float, ...] | None = field(default=None, repr=False)
    init_second_moments: tuple[float, ...] | None = field(default=None, repr=False)
    train_size: int | None = None

    def problem(self) -> Problem:
        """Builds and validates the arrays; raises ValueError naming any bad parameter."""
        if self.curvature is not None:
            h = validation.check_array("curvature", self.curvature)
            dim = h.shape[0]
        else:
            dim = validation.check_whole("dim", self.dim, 1, MAX_DIM)
            a = validation.check_in_range("spectrum_exponent", self.spectrum_exponent, 0.0, 10.0)
            h = np.arange(1, dim + 1, dtype=np.float64) ** -a
            if np.any(h <= 0):
                raise ValueError(
                    f"spectrum_exponent {a:g} with dim {dim} underflows the smallest curvature to 0;"
                    " lower one of them")
        scale = validation.check_positive("noise_scale", self.noise_scale)
        if self.noise_variance is not None:
            c = validation.check_array("noise_variance", self.noise_variance)
            if c.shape[0] != dim:
                raise ValueError(f"noise_variance must have length d = {dim}, got {c.shape[0]}")
            c = scale * c
        elif self.noise == "curvature":
            c = scale * h
        elif self.noise == "power":
            b = validation.check_in_range("noise_exponent", self.noise_exponent, 0.0, 10.0)
            c = scale * np.arange(1, dim + 1, dtype=np.float64) ** -b
        elif self.noise == "constant":
            c = np.full(dim, scale)
        else:
            raise ValueError(f"noise must be one of {', '.join(NOISE_MODELS)}, got {self.noise!r}")
        if self.init_second_moments is not None:
            x0 = validation.check_array("init_second_moments", self.init_second_moments,
                                        positive=False, nonnegative=True)
            if x0.shape[0] != dim:
                raise ValueError(f"init_second_moments must have length d = {dim}, got {x0.shape[0]}")
        else:
            m = validation.check_finite("init_second_moment", self.init_second_moment)
            if m < 0:
                raise ValueError(f"init_second_moment must be >= 0, got {m:g}")
            x0 = np.full(dim, m)
        target = validation.check_positive("target", self.target)
        return Problem(curvature_D=h, noise_D=c, init_second_moment_D=x0, target=target,
                       train_size=check_train_size(self.train_size))

    def to_dict(self) -> dict:
        """JSON-ready description (arrays abbreviated to their length)."""
        out = {k: getattr(self, k) for k in ("dim", "spectrum_exponent", "noise", "noise_exponent",
                                              "noise_scale", "init_second_moment", "target")}
        for k in ("curvature", "noise_variance", "init_second_moments", "train_size"):
            v = getattr(self, k)
            if v is not None:
                out[k] = list(v) if isinstance(v, tuple) else v
        return out


def preconditioned(curvature_D: np.ndarray, noise_D: np.ndarray, power: float):
    """The (h, c) that plain SGD sees under the preconditioner P = H^-p.

    With update `theta <- theta - a P g`, direction i contracts by `1 - a h_i^(1-p)` and receives
    noise of variance `a^2 c_i h_i^(-2p) / B` (docs/design.md, 'The NQM'). The loss keeps the
    true h.

    Returns:
      (h_eff_D, c_eff_D), both shape (d,).
    """
    power = validation.check_in_range("precond_power", power, 0.0, 1.0)
    if power == 0.0:
        return curvature_D, noise_D
    return curvature_D ** (1.0 - power), noise_D * curvature_D ** (-2.0 * power)
