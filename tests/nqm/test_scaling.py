"""nqm.scaling: the McCandlish fit on synthetic curves, and regimes derived by hand
(docs/design.md, 'Critical batch size')."""

import numpy as np
import pytest

from nqm import scaling
from nqm.curve import CurvePoint, ScalingCurve

BATCH = 2.0 ** np.arange(0, 16)


def mccandlish(s_min, b_crit, batch=BATCH):
    return s_min * (1.0 + b_crit / batch)


@pytest.mark.parametrize("s_min, b_crit", [(1000.0, 300.0), (37.0, 5.0), (2e4, 3e3), (500.0, 1.5)])
def test_fit_recovers_exact_curve(s_min, b_crit):
    fit = scaling.fit_mccandlish(BATCH, mccandlish(s_min, b_crit))
    assert fit.s_min == pytest.approx(s_min, rel=1e-8)
    assert fit.b_crit == pytest.approx(b_crit, rel=1e-8)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert fit.points_used == BATCH.size
    np.testing.assert_allclose(fit.predict([1, 64, 2 ** 20]), mccandlish(s_min, b_crit, np.array([1, 64, 2 ** 20])),
                               rtol=1e-8)


@pytest.mark.parametrize("seed", range(5))
def test_fit_with_multiplicative_noise(seed):
    """2% log-normal noise on every point: S_min and B_crit within a few %, R^2 still ~ 1."""
    rng = np.random.default_rng(seed)
    steps = mccandlish(1000.0, 300.0) * np.exp(rng.normal(0.0, 0.02, BATCH.size))
    fit = scaling.fit_mccandlish(BATCH, steps)
    assert fit.s_min == pytest.approx(1000.0, rel=0.04)
    assert fit.b_crit == pytest.approx(300.0, rel=0.06)
    assert 0.999 < fit.r2 < 1.0


def test_fit_ignores_unreached_points_and_needs_two():
    steps = mccandlish(1000.0, 300.0)
    steps[:4] = np.nan                                   # small batches ran out of budget
    fit = scaling.fit_mccandlish(BATCH, steps)
    assert fit.points_used == 12
    assert fit.s_min == pytest.approx(1000.0, rel=1e-8) and fit.b_crit == pytest.approx(300.0, rel=1e-8)
    # Two points determine the curve by hand: 10 = s (1 + b), 6 = s (1 + b / 2) -> s = 2, b = 4.
    two = scaling.fit_mccandlish([1, 2], [10.0, 6.0])
    assert two.s_min == pytest.approx(2.0, rel=1e-8) and two.b_crit == pytest.approx(4.0, rel=1e-8)
    assert two.r2 is None
    one = scaling.fit_mccandlish(BATCH, np.where(BATCH == 8, 100.0, np.nan))
    assert (one.s_min, one.b_crit, one.r2, one.points_used) == (None, None, None, 1)
    assert np.all(np.isnan(one.predict([1, 2])))


def test_analyse_hand_made_curve():
    """B:      1     2    4     8     16    32    64
    S:      1000  500  260   149   100   90    88
    perfect if S <= 1.2 * 1000 / B: 1200, 600, 300, 150 ok; 75 < 100 stops -> cbs20 = 8.
    maximal if S <= 1.1 * 88 = 96.8: first at B = 32.
    efficiency 1000 / (S B)."""
    batch = np.array([1, 2, 4, 8, 16, 32, 64])
    steps = np.array([1000, 500, 260, 149, 100, 90, 88], dtype=float)
    out = scaling.analyse(batch, steps)
    assert out.cbs20 == 8
    assert out.maximal_from == 32
    assert out.regimes == ("perfect",) * 4 + ("diminishing", "maximal", "maximal")
    np.testing.assert_allclose(out.efficiency, 1000 / (steps * batch), rtol=1e-15)
    assert out.efficiency[0] == 1.0 and out.efficiency[1] == 1.0
    d = out.to_dict()
    assert d["regimes"]["cbs20"] == 8 and d["regimes"]["maximal_from"] == 32
    assert d["regimes"]["perfect_threshold"] == 1.2 and d["regimes"]["maximal_threshold"] == 1.1


def test_analyse_threshold_boundaries_are_inclusive():
    """Thresholds exactly representable: 1.5 * 1000 / 4 = 375 counts as perfect (1.5 * 1000 / 8 =
    187.5 < 200 ends the run); with maximal 1.25 (1.25 * 160 = 200), S = 200 counts as maximal."""
    batch = np.array([1, 2, 4, 8, 16])
    steps = np.array([1000, 700, 375, 200, 160], dtype=float)
    out = scaling.analyse(batch, steps, scaling.Thresholds(perfect=1.5, maximal=1.25))
    assert out.cbs20 == 4
    assert out.maximal_from == 8
    assert out.regimes == ("perfect", "perfect", "perfect", "maximal", "maximal")
    default = scaling.analyse(batch, steps)
    # 1.2 * 1000 / 2 = 600 < 700: the perfect run stops at B = 1; maximal needs S <= 176.
    assert default.cbs20 == 1 and default.maximal_from == 16
    assert default.regimes == ("perfect", "diminishing", "diminishing", "diminishing", "maximal")


def test_analyse_unreached_small_batches():
    """S(B0) unknown: no efficiency and no cbs20; regimes still from the reached points.
    min S = 100, 1.1 * 100 = 110: maximal from B = 16 (S = 109)."""
    batch = np.array([1, 2, 4, 8, 16, 32])
    steps = np.array([np.nan, np.nan, 400, 200, 109, 100])
    out = scaling.analyse(batch, steps)
    assert out.cbs20 is None
    assert out.maximal_from == 16
    assert np.all(np.isnan(out.efficiency))
    assert out.regimes == ("not reached", "not reached", "diminishing", "diminishing", "maximal", "maximal")


def test_analyse_unreached_point_breaks_perfect_run():
    """B = 4 would satisfy the 20% rule, but B = 2 was not reached: the run from B0 ends at 1."""
    batch = np.array([1, 2, 4, 8])
    steps = np.array([1000, np.nan, 260, 200])
    out = scaling.analyse(batch, steps)
    assert out.cbs20 == 1
    assert out.maximal_from == 8                 # 1.1 * 200 = 220 < 260
    np.testing.assert_allclose(out.efficiency, [1.0, np.nan, 1000 / 1040, 1000 / 1600])
    assert out.regimes == ("perfect", "not reached", "diminishing", "maximal")


def test_analyse_nothing_reached():
    out = scaling.analyse([1, 2, 4], [np.nan, np.nan, np.nan])
    assert out.cbs20 is None and out.maximal_from is None and out.fit.s_min is None
    assert out.regimes == ("not reached",) * 3
    assert np.all(np.isnan(out.efficiency))


def test_analyse_on_mccandlish_curve_matches_closed_form_regimes():
    """On S = S_min (1 + B_crit / B) exactly: S(B) B / (S(1) 1) = (B + B_crit) / (1 + B_crit) <= 1.2
    iff B <= 1.2 + 0.2 B_crit, and S <= 1.1 S_min (1 + B_crit / 2^15) iff B >= ~10 B_crit."""
    b_crit = 300.0
    steps = mccandlish(1000.0, b_crit)
    out = scaling.analyse(BATCH, steps)
    assert out.cbs20 == 32                               # 1.2 + 60 = 61.2: 32 <= 61.2 < 64
    floor = 1000.0 * (1 + b_crit / BATCH[-1])
    b_max = b_crit / (1.1 * floor / 1000.0 - 1.0)        # S(B) = 1.1 * floor
    assert out.maximal_from == int(BATCH[BATCH >= b_max][0]) == 4096
    assert out.fit.b_crit == pytest.approx(b_crit, rel=1e-8)


def test_analyse_curve_uses_points():
    curve = ScalingCurve(points=(CurvePoint(4, 260), CurvePoint(1, 1000), CurvePoint(2, None)))
    out = scaling.analyse_curve(curve)
    assert out.cbs20 == 1 and out.maximal_from == 4
    assert out.regimes == ("perfect", "not reached", "maximal")


@pytest.mark.parametrize("batch, steps", [
    ([1, 2, 2, 4], [10, 8, 8, 7]),
    ([4, 2, 8], [5, 6, 4]),
    ([1, 2, 4], [10, 8]),
    ([[1, 2]], [[10, 8]]),
])
def test_analyse_bad_batch_sizes_raise(batch, steps):
    with pytest.raises(ValueError, match="batch_sizes"):
        scaling.analyse(batch, steps)


@pytest.mark.parametrize("kw", [dict(perfect=0.9), dict(maximal=0.5), dict(perfect=np.inf),
                                dict(maximal=np.nan)])
def test_bad_thresholds_raise(kw):
    with pytest.raises(ValueError, match="threshold"):
        scaling.Thresholds(**kw)


B = np.array([16.0, 32, 64, 128, 256, 512, 1024])


@pytest.mark.parametrize("b_crit", [3.0, 50.0, 300.0, 2000.0, 6000.0, 1e5])
def test_bound_on_mccandlish_curves_holds_and_appears_only_without_a_bend(b_crit):
    """On exact curves S = S_min (1 + B_crit / B): a lower bound exactly when the curve still
    scales perfectly at B_max (B_crit >= 5 B_max - 6 B_0 = 5024 here), an upper bound exactly
    when it is within 10% of flat from B_0 (B_crit <= 0.1 / (1 / 16 - 1.1 / 1024) = 1.63), and
    the true B_crit always on the bound's side."""
    steps = 100.0 * (1.0 + b_crit / B)
    bound = scaling.b_crit_bound(B, steps)
    if b_crit > 5024:
        assert bound.side == "lower" and bound.value == pytest.approx(5024.0)
        assert b_crit >= bound.value
    else:
        assert bound is None
    flat = scaling.b_crit_bound(B, 100.0 * (1.0 + 1.0 / B))   # B_crit = 1
    assert flat.side == "upper" and 1.0 <= flat.value == pytest.approx(0.1 / (1 / 16 - 1.1 / 1024))


def test_bound_ignores_a_curve_without_its_smallest_batch_size():
    steps = np.array([np.nan, 50, 25, 12.5, 6.25, 3.2, 1.6])
    assert scaling.b_crit_bound(B, steps) is None
    assert scaling.b_crit_bound(B[:1], [100.0]) is None
