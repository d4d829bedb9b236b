"""nqm.sgd_tuning: derivatives against finite differences, the Newton optimum against a brute-force
scan of step sizes with exact first crossings, the tuner's SGD curve against the envelope search it
replaces, and a `python -m nqm curve` for SGD that never imports numba nor scipy.
"""

import subprocess
import sys

import numpy as np
import pytest

from nqm import sgd_tuning, tuning
from nqm.problem import NQMConfig, preconditioned
from nqm.tuning import OptimizerSpec, tune_curve

SMALL = NQMConfig(dim=300, target=0.02)


def arrays(config, power=0.0):
    p = config.problem()
    h, c = preconditioned(p.curvature_D, p.noise_D, power)
    return h, c, 0.5 * p.curvature_D, p.init_second_moment_D


def loss_at(h, c, w, x0, batch, lr_N, t_N):
    """E[L] of SGD after t_N steps for step sizes lr_N, by the plain closed form, (N,)."""
    a = np.asarray(lr_N, dtype=float)[:, None]
    s = a * c / (batch * h * (2.0 - a * h))
    q = (1.0 - a * h) ** (2 * np.asarray(t_N)[:, None])
    return (w * (s + q * (x0 - s))).sum(axis=1)


def crossings(h, c, w, x0, batch, lr_N, target, horizon):
    """Exact first step with E[L] <= target per step size (bisection; E[L] decreases in t
    because x0 >= s here), horizon + 1 where not reached."""
    lo = np.zeros(len(lr_N), dtype=np.int64)
    hi = np.full(len(lr_N), horizon + 1, dtype=np.int64)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        below = loss_at(h, c, w, x0, batch, lr_N, mid) <= target
        hi, lo = np.where(below, mid, hi), np.where(below, lo, mid)
    return hi


@pytest.mark.parametrize("power", [0.0, 0.5])
def test_derivatives_match_finite_differences(power):
    h, c, w, x0 = arrays(NQMConfig(dim=500), power)
    inv_b = np.array([1 / 4, 1 / 1024, 2.0 ** -20])
    u = np.log([0.05, 0.6, 1.7]) - power
    v = np.log([300.0, 60.0, 20.0])
    eps = 1e-5

    def f(du, dv):
        return sgd_tuning.loss_derivatives(h, c, w, x0, inv_b, u + du, v + dv)

    loss, l_u, l_v, l_uu, l_uv = f(0, 0)
    np.testing.assert_allclose((f(eps, 0)[0] - f(-eps, 0)[0]) / (2 * eps), l_u, rtol=1e-6)
    np.testing.assert_allclose((f(0, eps)[0] - f(0, -eps)[0]) / (2 * eps), l_v, rtol=1e-6)
    np.testing.assert_allclose((f(eps, 0)[1] - f(-eps, 0)[1]) / (2 * eps), l_uu, rtol=1e-6)
    np.testing.assert_allclose((f(0, eps)[1] - f(0, -eps)[1]) / (2 * eps), l_uv, rtol=1e-6)
    # the value itself is the closed form at integer T
    t_int = np.exp(v).round()
    loss_int = sgd_tuning.loss_derivatives(h, c, w, x0, inv_b, u, np.log(t_int))[0]
    for k in range(3):
        ref = loss_at(h, c, w, x0, 1 / inv_b[k], np.exp(u[k:k + 1]), t_int[k:k + 1].astype(int))
        assert loss_int[k] == pytest.approx(ref[0], rel=1e-10)


@pytest.mark.parametrize("batch", [4.0, 64.0, 4096.0, 2.0 ** 20])
def test_newton_optimum_beats_every_step_size_of_a_fine_scan(batch):
    """Brute force: 1000 step sizes over the stable range, each with its exact first crossing;
    ceil(T*) at the Newton step size is never beaten, and the scan's best comes within 0.2%."""
    h, c, w, x0 = arrays(SMALL)
    target = SMALL.target
    lrs = np.geomspace(1e-3, 2.0 / h.max() * (1 - 1e-9), 1000)
    scan = crossings(h, c, w, x0, batch, lrs, target, 10 ** 6)
    best = int(scan.min())
    assert best <= 10 ** 6
    # Started, like the tuner, from the best point of a grid of ~6 step sizes per decade.
    k = 50 * int(np.argmin(scan[::50]))
    lr, t_star, solved = sgd_tuning.newton_optimum(h, c, w, x0, np.array([batch]),
                                                   lrs[k:k + 1], scan[k:k + 1], target,
                                                   (1e-8, 2.0 / h.max() * (1 - 1e-9)))
    assert solved[0]
    steps = crossings(h, c, w, x0, batch, lr, target, 10 ** 6)[0]
    assert steps == int(np.ceil(t_star[0] - 1e-9))    # a* reaches the target at ceil(T*)
    assert steps <= best                             # and no scanned step size does it sooner
    assert steps >= best - max(2, 2e-3 * best)       # the scan is fine enough to come close


def test_tuned_sgd_curve_equals_envelope_search_reference(monkeypatch):
    """The Newton path gives the same tuned steps as the general envelope search (the
    straightforward reference: compass search over the step size at each candidate T)."""
    batch = (4, 32, 256, 4096, 65536, 2 ** 20)
    for power in (0.0, 0.5):
        fast = tune_curve(SMALL, OptimizerSpec("sgd", power), batch)
        with monkeypatch.context() as m:
            def never(h, c, w, x0, batch_n, lr_n, steps_n, target, bounds, train_size=None):
                return lr_n, steps_n, np.zeros(len(lr_n), dtype=bool)
            m.setattr(tuning.sgd_tuning, "newton_optimum", never)
            slow = tune_curve(SMALL, OptimizerSpec("sgd", power), batch)
        fast_steps = [p.steps for p in fast.points]
        slow_steps = [p.steps for p in slow.points]
        assert all(f <= s for f, s in zip(fast_steps, slow_steps)), (fast_steps, slow_steps)
        assert sum(slow_steps) - sum(fast_steps) <= 1e-4 * sum(slow_steps)


def test_newton_gives_up_where_it_cannot_prove_the_answer():
    """Start below every stationary moment (E[L] not monotone in t): rows are left unsolved."""
    h, c, w, _ = arrays(SMALL)
    x0 = np.full_like(h, 1e-12)
    lr, t, solved = sgd_tuning.newton_optimum(h, c, w, x0, np.array([4.0, 64.0]),
                                              np.array([0.1, 0.5]), np.array([100.0, 50.0]),
                                              1e-20, (1e-8, 1.9))
    assert not solved.any()
    np.testing.assert_array_equal(lr, [0.1, 0.5])


def test_sgd_curve_command_imports_neither_numba_nor_scipy():
    code = ("import sys; from nqm.cli import main; "
            "main(['curve', '--dim', '200', '--batch-sizes', '4,64,1024']); "
            "print('LOADED', sorted(m for m in ('numba', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().splitlines()[-1] == "LOADED []"
