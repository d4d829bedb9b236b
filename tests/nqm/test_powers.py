"""nqm.powers: closed forms of 2x2 matrix powers against their defining recurrences.

References are computed with mpmath at 60 digits from the defining recurrence / sum, so they
carry no cancellation of their own; errors are measured against the envelope of the sequence
(the same sum with |roots|), which bounds |p_t| and is what double precision can resolve.
"""

import mpmath
import numpy as np
import pytest

from nqm.powers import LucasSequence, divided_power, signed_power

mpmath.mp.dps = 60


def momentum_sequence(ah, b):
    """LucasSequence of the momentum map with (a h, b), gap as moments.MomentumDynamics computes it."""
    ah = np.asarray(ah, float)
    b = np.asarray(b, float)
    tau = 1.0 - ah + b
    sqrt_b = np.sqrt(b)
    gap = np.where(tau >= 0, (1.0 - sqrt_b) ** 2 - ah, ah - (1.0 + sqrt_b) ** 2)
    return LucasSequence(np.abs(tau), b, gap, tau < 0)


def lucas_reference(ah, b, steps):
    """p_0..p_steps of p_{t+1} = tau p_t - b p_{t-1}, tau = 1 - a h + b, in 60-digit arithmetic."""
    b = mpmath.mpf(float(b))
    tau = 1 - mpmath.mpf(float(ah)) + b
    p = [mpmath.mpf(0), mpmath.mpf(1)]
    for _ in range(steps - 1):
        p.append(tau * p[-1] - b * p[-2])
    return np.array([float(x) for x in p[:steps + 1]])


def envelope(m1, m2, steps):
    """E_t = sum_{s<t} m1^s m2^(t-1-s) for m1, m2 >= 0 (positive terms: no cancellation)."""
    out = np.zeros(steps + 1)
    power = 1.0
    for t in range(steps):
        out[t + 1] = power + m2 * out[t]
        power *= m1
    return out


def lucas_envelope(ah, b, steps):
    tau = 1.0 - ah + b
    roots = np.roots([1.0, -tau, b]) if b > 0 else np.array([tau, 0.0])
    m1, m2 = np.abs(roots)
    return envelope(m1, m2, steps)


def assert_lucas_matches(ah, b, steps, rtol):
    got = momentum_sequence(ah, b)(np.arange(steps + 1))
    ref = lucas_reference(ah, b, steps)
    scale = lucas_envelope(ah, b, steps)
    assert got[0] == 0.0 and got[1] == 1.0
    err = np.abs(got - ref) / np.maximum(scale, 1e-300)
    assert np.max(err) < rtol, (ah, b, int(np.argmax(err)), np.max(err))


@pytest.mark.parametrize("seed", range(4))
def test_lucas_random_roots_match_recurrence(seed):
    """Random (a h, b) over the whole stable range: complex and real roots, both signs of tau."""
    rng = np.random.default_rng(seed)
    kinds = {"complex": 0, "real": 0, "negative": 0}
    for _ in range(25):
        b = rng.uniform(0.0, 0.999)
        ah = rng.uniform(0.0, 2.0 * (1.0 + b))
        tau = 1.0 - ah + b
        kinds["complex" if abs(tau) < 2 * np.sqrt(b) else "real"] += 1
        kinds["negative"] += tau < 0
        assert_lucas_matches(ah, b, 300, rtol=1e-11)
    assert all(v > 0 for v in kinds.values()), kinds


@pytest.mark.parametrize("ah", [0.0, 0.3, 1.0, 1.7, 2.0])
def test_lucas_b_zero_is_plain_power(ah):
    """b = 0: p_t = tau^(t-1) for t >= 1, tau = 1 - a h (includes tau = 0 and tau = -1)."""
    steps = 40
    got = momentum_sequence(ah, 0.0)(np.arange(steps + 1))
    tau = 1.0 - ah
    want = np.array([0.0] + [tau ** (t - 1) for t in range(1, steps + 1)])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    assert_lucas_matches(ah, 0.0, steps, rtol=1e-13)


@pytest.mark.parametrize("b", [0.01, 0.5, 0.9, 0.9999])
@pytest.mark.parametrize("side", ["positive", "negative"])
@pytest.mark.parametrize("delta", [0.0, 1e-13, -1e-13, 1e-7, -1e-7])
def test_lucas_at_and_near_critical_damping(b, side, delta):
    """|tau| = 2 sqrt(b) (1 + ...): roots (nearly) equal; the closed form must not divide by the gap.

    Near critical damping p_t is ill-conditioned in a h (relative sensitivity ~ t^2 eps): the
    tolerance is the change of the exact p_t when a h moves by one ulp, times 4, plus 1e-11.
    An eigen-decomposition formula would be off by ~eps / gap instead, i.e. by O(1) here.
    """
    if side == "positive":   # tau = 2 sqrt(b) at a h = (1 - sqrt b)^2
        ah = (1.0 - np.sqrt(b)) ** 2 * (1.0 + delta)
    else:                    # tau = -2 sqrt(b) at a h = (1 + sqrt b)^2
        ah = (1.0 + np.sqrt(b)) ** 2 * (1.0 + delta)
    steps = 1500
    got = momentum_sequence(ah, b)(np.arange(steps + 1))
    ref = lucas_reference(ah, b, steps)
    scale = np.maximum(lucas_envelope(ah, b, steps), 1e-300)
    one_ulp = np.max(np.abs(lucas_reference(np.nextafter(ah, 4.0), b, steps) - ref) / scale)
    err = np.max(np.abs(got - ref) / scale)
    assert err < 1e-11 + 4 * one_ulp, (err, one_ulp)


def test_lucas_exactly_critical_is_t_times_power():
    """Gap exactly 0: p_t = t l^(t-1) with the double root l = sqrt(b) (or -sqrt(b))."""
    b = 0.64
    t = np.arange(0, 500)
    for sign, ah in ((1.0, (1.0 - 0.8) ** 2), (-1.0, (1.0 + 0.8) ** 2)):
        seq = LucasSequence(2 * 0.8, b, 0.0, sign < 0)
        want = t * (sign * 0.8) ** np.maximum(t - 1, 0)
        np.testing.assert_allclose(seq(t), want, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(momentum_sequence(ah, b)(t), want, rtol=1e-10, atol=1e-300)


def test_lucas_large_t_underflows_to_zero_without_nan():
    seq = momentum_sequence(np.array([0.01, 0.5, 3.0, (1 - 0.9) ** 2]), np.array([0.81, 0.9, 0.6, 0.81]))
    values = seq(np.array([10 ** 6])[:, None])
    assert np.all(np.isfinite(values)) and np.all(np.abs(values) < 1e-200)


def test_lucas_broadcasts_and_take_selects_rows():
    ah = np.array([0.05, 0.5, 2.5, 3.5])
    b = np.array([0.9, 0.0, 0.8, 0.9])
    seq = momentum_sequence(ah, b)
    t = np.arange(60)[:, None]
    table = seq(t)                                   # (60, 4)
    for k in range(4):
        np.testing.assert_allclose(table[:, k], lucas_reference(ah[k], b[k], 59), rtol=1e-11,
                                   atol=1e-14 * np.max(np.abs(table[:, k])))
    sub = seq.take(np.array([3, 1]))
    np.testing.assert_array_equal(sub(t), table[:, [3, 1]])


# ---------------------------------------------------------------- divided_power


def divided_reference(r, g, steps):
    """sum_{s<t} r^s g^(t-1-s) for t = 0..steps, by D_{t+1} = r^t + g D_t in 60 digits."""
    r, g = mpmath.mpf(float(r)), mpmath.mpf(float(g))
    out = [mpmath.mpf(0)]
    power = mpmath.mpf(1)
    for _ in range(steps):
        out.append(power + g * out[-1])
        power *= r
    return np.array([float(x) for x in out])


R_G_CASES = [
    (0.9, 0.5), (0.5, 0.9), (0.7, 0.7), (-0.7, -0.7), (0.99, 0.99 * (1 + 1e-12)),
    (0.99, 0.99 * (1 - 1e-8)), (0.3, 0.3 + 1e-15), (-0.5, 0.9), (0.9, -0.5), (-0.99, 0.99),
    (-0.6, -0.2), (-0.2, -0.6), (0.8, 0.0), (0.0, 0.8), (-0.8, 0.0), (0.0, 0.0), (1.0, 1.0),
    (-1.0, 1.0), (1.0, 0.999), (0.0, 1.0),
]


@pytest.mark.parametrize("r, g", R_G_CASES)
def test_divided_power_equals_sum(r, g):
    steps = 300
    got = divided_power(r, g, np.arange(steps + 1))
    ref = divided_reference(r, g, steps)
    scale = envelope(abs(r), abs(g), steps)
    assert got[0] == 0.0
    err = np.abs(got - ref) / np.maximum(scale, 1e-300)
    assert np.max(err) < 1e-12, (int(np.argmax(err)), np.max(err))


def test_divided_power_small_t_by_hand():
    t = np.arange(4)
    # t = 0: 0; t = 1: 1; t = 2: r + g; t = 3: r^2 + r g + g^2
    for r, g in ((0.5, 0.25), (0.5, 0.5), (-0.5, 0.25), (0.5, 0.0), (0.0, 0.0)):
        want = [0.0, 1.0, r + g, r * r + r * g + g * g]
        np.testing.assert_allclose(divided_power(r, g, t), want, rtol=1e-15, atol=0)


def test_divided_power_broadcasts():
    r = np.array([0.9, -0.5, 0.3])
    g = np.array([[0.9], [0.0]])
    t = 7
    got = divided_power(r, g, t)
    assert got.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            assert got[i, j] == pytest.approx(divided_reference(r[j], g[i, 0], t)[t], rel=1e-13, abs=1e-300)


# ---------------------------------------------------------------- signed_power


@pytest.mark.parametrize("base", [-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0])
def test_signed_power_matches_python_power(base):
    t = np.arange(0, 12)
    want = np.array([base ** int(k) for k in t])   # Python: 0.0 ** 0 == 1.0
    np.testing.assert_array_equal(signed_power(base, t), want)


def test_signed_power_sign_and_extremes():
    assert signed_power(-0.5, 3) == -0.125
    assert signed_power(-0.5, 4) == 0.0625
    assert signed_power(0.0, 0) == 1.0
    assert signed_power(-0.9, 10 ** 6) == 0.0 and signed_power(-0.9, 10 ** 6 + 1) == 0.0
    big = signed_power(np.array([-3.0, 3.0]), 1001)
    assert big[0] == -np.inf and big[1] == np.inf
