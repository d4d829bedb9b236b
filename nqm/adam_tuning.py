"""Mean-field Adam (`nqm.adam`) with its learning rate tuned per batch size: a ScalingCurve.

For each batch size the steps to target are minimised over the learning rate and over b1 in a
short list (b2 and epsilon fixed): per b1, a log grid of rates scanned for all batch sizes in one
vectorised march, then `refinements` rounds of a 5-point grid around each batch size's best rate,
each round a quarter as wide; then the best b1. Steps are integers, so the minimum is a plateau;
the reported rate is the geometric middle of the best rates of the last round.

b1 is tuned because the momentum family it is compared with (`nqm.tuning`) tunes its b: with b1
fixed at 0.9, Adam loses at large batch sizes for its momentum alone (docs/nqm_adam.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nqm import adam, validation
from nqm.curve import CurvePoint, ScalingCurve
from nqm.problem import NQMConfig, Problem


@dataclass(frozen=True)
class AdamSearch:
    """Learning-rate bounds (closed), scan density, refinement rounds and step budget."""

    learning_rate: tuple[float, float] = (1e-5, 1.0)
    grid_per_decade: int = 4
    refinements: int = 3
    max_steps: int = 10 ** 6

    def __post_init__(self):
        validation.check_range_pair("learning_rate", self.learning_rate, 0.0, np.inf)
        validation.check_whole("grid_per_decade", self.grid_per_decade, 1, 100)
        validation.check_whole("refinements", self.refinements, 0, 10)
        validation.check_whole("max_steps", self.max_steps, 1, 10 ** 9)


def _best(steps_NL, lr_NL):
    """Per row: (fewest steps (-1 none), geometric middle of the rates that reach it)."""
    s = np.where(steps_NL < 0, np.iinfo(np.int64).max, steps_NL)
    best = s.min(axis=1)
    at_best = (s == best[:, None]) & (steps_NL >= 0)
    log_lr = np.log(lr_NL)
    with np.errstate(invalid="ignore"):
        mid = 0.5 * (np.where(at_best, log_lr, np.inf).min(axis=1)
                     + np.where(at_best, log_lr, -np.inf).max(axis=1))
    found = at_best.any(axis=1)
    return np.where(found, best, -1), np.where(found, np.exp(mid), np.nan)


BETA1 = (0.0, 0.5, 0.9, 0.99)   # the b1 values tuned over (the default of OptimizerSpec too)
BETA2 = 0.999                   # b2, fixed (Kingma and Ba's default)


REFINE_RATES = 6                # rates per refinement round: a 5-point grid and its centre


def _grid_size(search: AdamSearch) -> int:
    """Rates of the first scan: `grid_per_decade` per decade of the bounds, ends included."""
    lo, hi = search.learning_rate
    return max(2, int(np.ceil(np.log10(hi / lo) * search.grid_per_decade)) + 1)


def _tune_rate(problem, batch, beta1, beta2, epsilon, search, growth, init_nodes,
               on_pass: Callable[[int], None]):
    """(steps (n,), learning rate (n,)) of the best rate per batch size at one b1; `on_pass(k)`
    after the scan and after each refinement round, k the rates it tried per batch size."""
    lo, hi = search.learning_rate
    n_grid = _grid_size(search)
    grid = np.geomspace(lo, hi, n_grid)
    width = np.log(grid[1] / grid[0])

    def run(lr_NL):
        b = np.repeat(batch, lr_NL.shape[1])
        s = adam.steps_to_target(problem, b, lr_NL.reshape(-1), beta1, beta2, epsilon,
                                 search.max_steps, growth, init_nodes, group_N=b)
        return s.reshape(lr_NL.shape)

    lr_NL = np.broadcast_to(grid, (batch.size, n_grid))
    steps, lr = _best(run(lr_NL), lr_NL)
    on_pass(n_grid)
    for _ in range(search.refinements):
        centre = np.where(np.isfinite(lr), lr, np.sqrt(lo * hi))
        cand = np.clip(centre[:, None] * np.exp(width * np.linspace(-1.0, 1.0, REFINE_RATES - 1))[None, :],
                       lo, hi)
        cand = np.concatenate([cand, centre[:, None]], axis=1)
        s_new, lr_new = _best(run(cand), cand)
        better = (s_new >= 0) & ((steps < 0) | (s_new <= steps))
        steps = np.where(better, s_new, steps)
        lr = np.where(better, lr_new, lr)
        width /= 4.0
        on_pass(REFINE_RATES)
    return steps, lr


def rate_edge(learning_rate: float, bounds: tuple[float, float]) -> tuple[str, ...]:
    """('learning_rate',) when the rate lies within 2% of a bound of the search, else ()."""
    lo, hi = bounds
    return ("learning_rate",) if (learning_rate <= lo * 1.02 or learning_rate >= hi / 1.02) else ()


def tune_adam_curve(config: NQMConfig | Problem, batch_sizes=tuple(2 ** k for k in range(0, 15)),
                    beta1=BETA1, beta2: float = BETA2, epsilon: float = 0.0,
                    search: AdamSearch = AdamSearch(), growth: float = adam.GROWTH,
                    init_nodes: int = adam.INIT_NODES,
                    progress: Callable[[int, int], None] | None = None) -> ScalingCurve:
    """Steps to target of mean-field Adam at each batch size, learning rate tuned per batch size.

    Args:
      config: the problem (NQMConfig or Problem arrays).
      batch_sizes: whole numbers >= 1.
      beta1: one value in [0, 1), or a sequence of them to choose from per batch size.
      beta2, epsilon: fixed.
      search: learning-rate bounds, grid, refinements, step budget.
      growth, init_nodes: the mean-field evaluation's settings (`nqm.adam`).
      progress: called as progress(done, total) after each pass over all batch sizes (a rate
        scan or a refinement round, for each b1), counted in rates tried per batch size (the
        work of a pass): total = (number of b1 values) x (scan rates + 6 x refinements).

    Returns:
      A ScalingCurve (source 'nqm'); each point's momentum field holds beta1, and its edge
      names 'learning_rate' when the best rate sits on a bound of the search.
    """
    problem = config.problem() if isinstance(config, NQMConfig) else config
    batch = validation.check_batch_sizes(batch_sizes).astype(np.float64)
    beta1s = np.atleast_1d(np.asarray(beta1, dtype=np.float64))
    if beta1s.ndim != 1 or beta1s.size == 0:
        raise ValueError(f"beta1 must be a number or a non-empty list of numbers, got {beta1!r:.80}")
    adam.check_adam(1.0, 1.0, beta1s, beta2, epsilon)
    steps = np.full(batch.size, -1, dtype=np.int64)
    lr = np.full(batch.size, np.nan)
    b1_best = np.full(batch.size, np.nan)
    total = beta1s.size * (_grid_size(search) + REFINE_RATES * search.refinements)
    done = [0]

    def on_pass(rates: int):
        done[0] += rates
        if progress is not None:
            progress(done[0], total)

    for b1 in beta1s:
        s_b, lr_b = _tune_rate(problem, batch, float(b1), beta2, epsilon, search, growth,
                               init_nodes, on_pass)
        better = (s_b >= 0) & ((steps < 0) | (s_b < steps))
        steps = np.where(better, s_b, steps)
        lr = np.where(better, lr_b, lr)
        b1_best = np.where(better, b1, b1_best)
    points = []
    for i, b in enumerate(batch):
        if steps[i] < 0:
            points.append(CurvePoint(int(b), None))
            continue
        points.append(CurvePoint(batch_size=int(b), steps=int(steps[i]),
                                 learning_rate=float(lr[i]), momentum=float(b1_best[i]),
                                 edge=rate_edge(float(lr[i]), search.learning_rate)))
    cfg = {"optimizer": "adam", "beta1": beta1s.tolist(), "beta2": beta2, "epsilon": epsilon,
           "max_steps": search.max_steps, "target": problem.target,
           "search": {"learning_rate": list(search.learning_rate),
                      "grid_per_decade": search.grid_per_decade,
                      "refinements": search.refinements},
           "mean_field": {"growth": growth, "init_nodes": init_nodes}}
    if isinstance(config, NQMConfig):
        cfg["problem"] = config.to_dict()
    return ScalingCurve(points=tuple(points), source="nqm", config=cfg)
