"""nqm.problem: the NQM arrays built from a config (docs/design.md, 'The NQM') and its errors
('Errors')."""

import json
import math

import numpy as np
import pytest

from nqm.problem import NQMConfig, preconditioned


def test_defaults_are_zhang_et_al():
    cfg = NQMConfig()
    assert (cfg.dim, cfg.target) == (10_000, 0.01)
    prob = cfg.problem()
    i = np.arange(1, 10_001)
    assert prob.dim == 10_000
    np.testing.assert_allclose(prob.curvature_D, 1.0 / i, rtol=1e-15)
    np.testing.assert_array_equal(prob.noise_D, prob.curvature_D)          # c = h
    np.testing.assert_array_equal(prob.init_second_moment_D, np.ones(10_000))
    assert prob.target == 0.01
    # 1/2 H_10000 = 1/2 (ln 10^4 + gamma + 1/(2 10^4) - ...) = 4.8938...
    harmonic = math.log(1e4) + 0.5772156649015329 + 1 / 2e4 - 1 / (12 * 1e8)
    assert prob.initial_loss() == pytest.approx(0.5 * harmonic, rel=1e-12)
    assert round(prob.initial_loss(), 2) == 4.89


def test_lower_bound_steps_default():
    """c = h: sum(c / h) = d, so S(B) >= d / (2 target B) = 10^4 / (0.02 B) = 5e5 / B."""
    prob = NQMConfig().problem()
    batch = np.array([1, 4, 2 ** 21])
    np.testing.assert_allclose(prob.lower_bound_steps(batch), 5e5 / batch, rtol=1e-12)
    assert prob.lower_bound_steps(8) == pytest.approx(62_500.0, rel=1e-12)


def test_lower_bound_steps_general():
    cfg = NQMConfig(curvature=(2.0, 0.5, 0.1), noise_variance=(1.0, 1.0, 0.3), target=0.2)
    # sum(c / h) = 0.5 + 2 + 3 = 5.5; / (2 * 0.2 * B) = 13.75 / B
    np.testing.assert_allclose(cfg.problem().lower_bound_steps([1, 10]), [13.75, 1.375], rtol=1e-14)


def test_power_spectrum_and_noise():
    cfg = NQMConfig(dim=100, spectrum_exponent=1.5, noise="power", noise_exponent=0.5,
                    noise_scale=3.0, init_second_moment=2.0, target=0.1)
    prob = cfg.problem()
    i = np.arange(1, 101, dtype=float)
    np.testing.assert_allclose(prob.curvature_D, i ** -1.5, rtol=1e-14)
    np.testing.assert_allclose(prob.noise_D, 3.0 * i ** -0.5, rtol=1e-14)
    assert prob.initial_loss() == pytest.approx(np.sum(i ** -1.5), rel=1e-13)   # 1/2 h * 2


def test_constant_and_scaled_curvature_noise():
    const = NQMConfig(dim=20, noise="constant", noise_scale=0.7).problem()
    np.testing.assert_array_equal(const.noise_D, np.full(20, 0.7))
    scaled = NQMConfig(dim=20, noise_scale=4.0).problem()
    np.testing.assert_allclose(scaled.noise_D, 4.0 / np.arange(1, 21), rtol=1e-15)


def test_user_arrays():
    cfg = NQMConfig(dim=999, curvature=(3.0, 1.0, 0.25), noise_variance=(0.5, 0.5, 2.0),
                    init_second_moments=(0.0, 1.0, 4.0), noise_scale=2.0)
    prob = cfg.problem()
    assert prob.dim == 3                                  # dim ignored when curvature is given
    np.testing.assert_array_equal(prob.curvature_D, [3.0, 1.0, 0.25])
    np.testing.assert_array_equal(prob.noise_D, [1.0, 1.0, 4.0])
    assert prob.initial_loss() == pytest.approx(0.5 * (0 + 1 + 1), rel=1e-15)
    # noise follows a user curvature too
    np.testing.assert_array_equal(NQMConfig(curvature=(3.0, 1.0)).problem().noise_D, [3.0, 1.0])
    power = NQMConfig(curvature=(3.0, 1.0, 0.5, 0.1), noise="power", noise_exponent=2.0).problem()
    np.testing.assert_allclose(power.noise_D, [1.0, 0.25, 1 / 9, 1 / 16], rtol=1e-15)


def test_config_is_hashable_and_json_ready():
    cfg = NQMConfig(dim=50, curvature=(1.0, 0.5))
    assert hash(cfg) == hash(NQMConfig(dim=50, curvature=(1.0, 0.5)))
    data = json.loads(json.dumps(cfg.to_dict(), allow_nan=False))
    assert data["dim"] == 50 and data["curvature"] == [1.0, 0.5] and "noise_variance" not in data
    assert NQMConfig(**data).problem().dim == 2


@pytest.mark.parametrize("power", [0.0, 0.25, 0.5, 1.0])
def test_preconditioned(power):
    h = np.array([4.0, 1.0, 0.25, 1e-4])
    c = np.array([2.0, 1.0, 0.5, 1e-3])
    h_eff, c_eff = preconditioned(h, c, power)
    # h^(1-p) and c h^(-2p), by hand for p = 1/2: (2, 1, 1/2, 1e-2) and (1/2, 1, 2, 10).
    np.testing.assert_allclose(h_eff, h ** (1 - power), rtol=1e-14)
    np.testing.assert_allclose(c_eff, c * h ** (-2 * power), rtol=1e-14)
    if power == 0.5:
        np.testing.assert_allclose(h_eff, [2.0, 1.0, 0.5, 1e-2], rtol=1e-15)
        np.testing.assert_allclose(c_eff, [0.5, 1.0, 2.0, 10.0], rtol=1e-14)
    if power == 1.0:
        np.testing.assert_array_equal(h_eff, np.ones(4))


@pytest.mark.parametrize("power", [-0.1, 1.5, np.nan])
def test_preconditioned_bad_power(power):
    with pytest.raises(ValueError, match="precond_power"):
        preconditioned(np.ones(3), np.ones(3), power)


@pytest.mark.parametrize("kw, name", [
    (dict(dim=0), "dim"), (dict(dim=-5), "dim"), (dict(dim=2.5), "dim"), (dict(dim="10"), "dim"),
    (dict(dim=True), "dim"), (dict(dim=10 ** 9), "dim"),
    (dict(curvature=()), "curvature"), (dict(curvature=(1.0, np.nan)), "curvature"),
    (dict(curvature=(1.0, np.inf)), "curvature"), (dict(curvature=(1.0, 0.0)), "curvature"),
    (dict(curvature=(1.0, -2.0)), "curvature"), (dict(curvature=("a", 1.0)), "curvature"),
    (dict(curvature=((1.0, 2.0),)), "curvature"),
    (dict(noise="gaussian"), "noise"), (dict(noise=None), "noise"),
    (dict(target=0.0), "target"), (dict(target=-0.01), "target"), (dict(target=np.nan), "target"),
    (dict(target=np.inf), "target"),
    (dict(spectrum_exponent=-1.0), "spectrum_exponent"), (dict(spectrum_exponent=np.nan), "spectrum_exponent"),
    (dict(noise="power", noise_exponent=-1.0), "noise_exponent"),
    (dict(noise_scale=0.0), "noise_scale"), (dict(noise_scale=np.inf), "noise_scale"),
    (dict(init_second_moment=-1.0), "init_second_moment"),
    (dict(init_second_moment=np.nan), "init_second_moment"),
    (dict(noise_variance=(1.0, 1.0)), "noise_variance"),             # length != d = 10
    (dict(noise_variance=(1.0,) * 9 + (np.nan,)), "noise_variance"),
    (dict(init_second_moments=(1.0,) * 3), "init_second_moments"),
    (dict(init_second_moments=(1.0,) * 9 + (-1.0,)), "init_second_moments"),
])
def test_bad_config_raises_naming_parameter(kw, name):
    args = dict(dim=10)
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        NQMConfig(**args).problem()
