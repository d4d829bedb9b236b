"""nqm.validation: every check returns the value it accepts (normalised) and answers anything else
with one line naming the parameter, the value and the allowed range."""

import math

import numpy as np
import pytest

from nqm import validation


@pytest.mark.parametrize("value, expected", [
    (3, 3), (np.int64(3), 3), (3.0, 3), (np.float32(7.0), 7), (10 ** 12, 10 ** 12)])
def test_check_whole_accepts_whole_numbers_as_ints(value, expected):
    out = validation.check_whole("steps", value, 0)
    assert out == expected and type(out) is int


@pytest.mark.parametrize("value, low, high, message", [
    (2.5, 1, None, "steps must be a whole number >= 1, got 2.5"),
    (0, 1, None, "steps must be a whole number >= 1, got 0"),
    (-1, 0, None, "steps must be a whole number >= 0, got -1"),
    (11, 1, 10, "steps must be a whole number in [1, 10], got 11"),
    (0, 1, 10, "steps must be a whole number in [1, 10], got 0"),
    (True, 0, None, "steps must be a whole number >= 0, got True"),
    (None, 1, None, "steps must be a whole number >= 1, got None"),
    ("4", 1, None, "steps must be a whole number >= 1, got '4'"),
    (math.inf, 1, None, "steps must be a whole number >= 1, got inf"),
    (math.nan, 1, None, "steps must be a whole number >= 1, got nan"),
])
def test_check_whole_names_parameter_value_and_range(value, low, high, message):
    with pytest.raises(ValueError) as err:
        validation.check_whole("steps", value, low, high)
    assert str(err.value) == message


def test_check_whole_bounds_are_inclusive():
    assert validation.check_whole("k", 1, 1, 10) == 1
    assert validation.check_whole("k", 10, 1, 10) == 10


def test_check_whole_from_one_names_the_range():
    assert validation.check_whole("dim", 5.0, 1, 5) == 5
    with pytest.raises(ValueError, match=r"dim must be a whole number in \[1, 5\], got 6"):
        validation.check_whole("dim", 6, 1, 5)
    with pytest.raises(ValueError, match="dim must be a whole number >= 1, got 0"):
        validation.check_whole("dim", 0, 1)


def test_check_range_pair_accepts_ordered_pairs_inside_the_bounds():
    assert validation.check_range_pair("lr-range", [1e-3, 3], 0.0, 1e6) == (1e-3, 3.0)
    assert validation.check_range_pair("lr-range", (0.5, 0.5), 0.0, 1.0) == (0.5, 0.5)
    assert validation.check_range_pair("r", (0.1, 1.0), 0.0, 1.0) == (0.1, 1.0)   # hi = bound


@pytest.mark.parametrize("value, shown", [
    ((1.0, 0.1), "got 1,0.1"),            # reversed
    ((0.0, 0.5), "got 0,0.5"),            # the low bound is open (log scales)
    ((0.1, 2.0), "got 0.1,2"),            # above the high bound
    ((0.1, math.inf), "got 0.1,inf"),
    ((0.1,), "got (0.1,)"),               # not a pair
    ("abc", "got 'abc'"),
    ((0.1, "x"), "got (0.1, 'x')"),
])
def test_check_range_pair_names_the_allowed_range(value, shown):
    with pytest.raises(ValueError) as err:
        validation.check_range_pair("lr-range", value, 0.0, 1.0)
    assert str(err.value) == f"lr-range must be LO,HI with 0 < LO <= HI <= 1, {shown}"


def test_check_choice():
    assert validation.check_choice("optimizer", "sgd", ("sgd", "adam")) == "sgd"
    with pytest.raises(ValueError) as err:
        validation.check_choice("optimizer", "lbfgs", ("sgd", "adam"))
    assert str(err.value) == "optimizer must be one of sgd, adam, got 'lbfgs'"


def test_check_in_range_open_closed_and_unbounded():
    assert validation.check_in_range("m", 0.0, 0.0, 1.0, closed_high=False) == 0.0
    with pytest.raises(ValueError, match=r"m must be in \[0, 1\), got 1"):
        validation.check_in_range("m", 1.0, 0.0, 1.0, closed_high=False)
    with pytest.raises(ValueError, match=r"r must be in \(0, 1\), got 0"):
        validation.check_in_range("r", 0.0, 0.0, 1.0, closed_low=False, closed_high=False)
    # an infinite upper end: any finite value above the lower one
    assert validation.check_in_range("floor", 1e300, 0.0, math.inf, closed_high=False) == 1e300
    with pytest.raises(ValueError) as err:
        validation.check_in_range("floor", -1.0, 0.0, math.inf, closed_high=False)
    assert str(err.value) == "floor must be in [0, inf), got -1"
    with pytest.raises(ValueError, match="floor must be a finite number, got inf"):
        validation.check_in_range("floor", math.inf, 0.0, math.inf, closed_high=False)



def test_check_all_in_range_agrees_with_check_in_range_entry_by_entry():
    """The vectorised check accepts exactly what the scalar one accepts, on a grid of edge cases."""
    values = [-1.0, 0.0, 1e-300, 0.5, 1.0 - 1e-16, 1.0, 2.0, math.inf, -math.inf, math.nan]
    for closed_low in (True, False):
        for closed_high in (True, False):
            for v in values:
                try:
                    validation.check_in_range("m", v, 0.0, 1.0, closed_low=closed_low,
                                              closed_high=closed_high)
                    scalar_ok = True
                except ValueError:
                    scalar_ok = False
                try:
                    validation.check_all_in_range("m", [0.5, v], 0.0, 1.0, closed_low=closed_low,
                                                  closed_high=closed_high)
                    array_ok = True
                except ValueError:
                    array_ok = False
                assert scalar_ok == array_ok, (v, closed_low, closed_high)


def test_check_all_in_range_returns_float_array_of_the_input_shape():
    out = validation.check_all_in_range("b", [[1, 2], [3, 4]], 1.0, math.inf)
    assert out.dtype == np.float64 and out.shape == (2, 2)
    assert validation.check_all_in_range("b", 3, 1.0, math.inf).shape == ()


@pytest.mark.parametrize("values, kwargs, message", [
    (0.5, {}, "batch_size must be in [1, inf), got 0.5"),              # a scalar: no position
    ([4, 0, 8], {}, "batch_size must be in [1, inf), got 0 at index 1"),
    ([4, math.inf], {}, "batch_size must be in [1, inf), got inf at index 1"),
    ([[4, 4], [4, math.nan]], {}, "batch_size must be in [1, inf), got nan at index (1, 1)"),
    ([0.1, -0.1], dict(index_name="step"), "batch_size must be in [1, inf), got 0.1 at step 0"),
    ("abc", {}, "batch_size must be a number or an array of numbers, got 'abc'"),
])
def test_check_all_in_range_names_the_first_bad_entry_and_where(values, kwargs, message):
    with pytest.raises(ValueError) as err:
        validation.check_all_in_range("batch_size", values, 1.0, math.inf, **kwargs)
    assert str(err.value) == message


def test_check_whole_array_accepts_whole_numbers_as_int64():
    out = validation.check_whole_array("steps", [0, 3.0, np.int32(7), 10 ** 12])
    assert out.dtype == np.int64 and out.tolist() == [0, 3, 7, 10 ** 12]
    assert validation.check_whole_array("steps", 5).tolist() == [5]      # a scalar is one entry


@pytest.mark.parametrize("values, message", [
    ([0, 2.5], "steps must be whole numbers >= 0, got 2.5 at index 1"),
    ([3, -1], "steps must be whole numbers >= 0, got -1 at index 1"),
    ([math.inf], "steps must be whole numbers >= 0, got inf at index 0"),
    ([math.nan], "steps must be whole numbers >= 0, got nan at index 0"),
    ([[1, 2]], "steps must be whole numbers >= 0 in a 1-D list, got shape (1, 2)"),
    (["a"], "steps must be whole numbers >= 0, got ['a']"),
    ([True], "steps must be whole numbers >= 0, got [True]"),
    (None, "steps must be whole numbers >= 0, got None"),
])
def test_check_whole_array_names_the_first_bad_entry(values, message):
    with pytest.raises(ValueError) as err:
        validation.check_whole_array("steps", values, 0)
    assert str(err.value) == message
