"""nqm.curve: the ScalingCurve type and its JSON form (docs/design.md, 'Formats')."""

import json

import numpy as np
import pytest

from nqm.curve import CurvePoint, ScalingCurve, to_json


def strict_loads(text):
    """json.loads that refuses the NaN / Infinity / -Infinity tokens Python would accept."""
    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def curve():
    return ScalingCurve(
        points=(
            CurvePoint(batch_size=np.int64(64), steps=np.int64(120), learning_rate=0.5, momentum=0.9,
                       edge=("momentum",)),
            CurvePoint(batch_size=4, steps=None),
            CurvePoint(batch_size=16, steps=480, learning_rate=np.float64(0.25), momentum=0.0,
                       ema_decay=0.99, trials=({"trial_id": 3, "status": "COMPLETE", "steps_to_goal": 480},)),
            CurvePoint(batch_size=1024, steps=100, learning_rate=float("nan"), momentum=float("inf")),
        ),
        source="measured",
        config={"target": 0.01, "budget": np.int64(10 ** 6), "seeds": np.arange(3),
                "fitted_scale": float("nan"), "nested": {"lo": -np.inf, "xs": (1.5, np.nan)}},
    )


def test_points_are_sorted(curve):
    assert [p.batch_size for p in curve.points] == [4, 16, 64, 1024]
    np.testing.assert_array_equal(curve.batch_sizes, [4, 16, 64, 1024])
    assert curve.batch_sizes.dtype == np.int64
    np.testing.assert_array_equal(curve.steps, [np.nan, 480, 120, 100])
    assert [p.reached for p in curve.points] == [False, True, True, True]


def test_json_round_trip(curve):
    text = to_json(curve.to_dict())
    for token in ("NaN", "Infinity"):
        assert token not in text
    data = strict_loads(text)
    back = ScalingCurve.from_dict(data)
    assert back.source == "measured"
    assert [p.batch_size for p in back.points] == [4, 16, 64, 1024]
    assert [p.steps for p in back.points] == [None, 480, 120, 100]
    assert back.points[:3] == curve.points[:3]                 # finite values survive exactly
    assert back.points[2].edge == ("momentum",)
    assert back.points[1].ema_decay == 0.99
    assert back.points[1].trials == ({"trial_id": 3, "status": "COMPLETE", "steps_to_goal": 480},)
    # Non-finite floats become null ("written as null"), everywhere.
    assert back.points[3].learning_rate is None and back.points[3].momentum is None
    assert back.config == {"target": 0.01, "budget": 10 ** 6, "seeds": [0, 1, 2],
                           "fitted_scale": None, "nested": {"lo": None, "xs": [1.5, None]}}
    # And the round trip is stable from then on.
    assert strict_loads(to_json(back.to_dict())) == data


def test_point_dict_has_design_fields(curve):
    data = strict_loads(to_json(curve.to_dict()))
    for p in data["points"]:
        assert {"batch_size", "steps", "learning_rate", "momentum", "reached"} <= set(p)
        assert p["reached"] == (p["steps"] is not None)
    assert data["points"][0] == {"batch_size": 4, "steps": None, "learning_rate": None,
                                 "momentum": None, "reached": False}


def test_to_json_cleans_numpy_and_non_finite():
    obj = {"a": np.float32(np.nan), "b": np.int64(7), "c": np.array([[1.0, np.inf], [-np.inf, 2.0]]),
           3: (np.float64(0.5), None, "x", True)}
    assert strict_loads(to_json(obj)) == {"a": None, "b": 7, "c": [[1.0, None], [None, 2.0]],
                                          "3": [0.5, None, "x", True]}
    assert to_json(float("nan")) == "null"
    assert json.loads(to_json({"k": 1}, indent=2)) == {"k": 1}


def test_from_dict_defaults_and_unsorted_input():
    back = ScalingCurve.from_dict({"points": [{"batch_size": 8, "steps": 10}, {"batch_size": 2, "steps": 35}]})
    assert back.source == "nqm" and back.config == {}
    np.testing.assert_array_equal(back.batch_sizes, [2, 8])
    np.testing.assert_array_equal(back.steps, [35, 10])


@pytest.mark.parametrize("bad, name", [
    ([], "points"),
    ({"points": 5}, "points"),
    ({"source": "nqm"}, "points"),
    ({"points": [{"steps": 3}]}, "batch_size"),
    ({"points": [{"batch_size": "x", "steps": 3}]}, "batch_size"),
    ({"points": [5]}, "batch_size"),
    ({"points": [{"batch_size": 0, "steps": 3}]}, "batch_size"),
    ({"points": [{"batch_size": -4, "steps": 3}]}, "batch_size"),
    ({"points": [{"batch_size": 2.5, "steps": 3}]}, "batch_size"),
    ({"points": [{"batch_size": 4, "steps": -5}]}, "steps"),
    ({"points": [{"batch_size": 4, "steps": 2.5}]}, "steps"),
    ({"points": [{"batch_size": 4, "steps": "abc"}]}, "steps"),
    ({"points": [{"batch_size": 4, "steps": [1]}]}, "steps"),
    ({"points": [{"batch_size": 4, "steps": 3}], "config": 5}, "config"),
])
def test_bad_dict_raises_value_error_naming_field(bad, name):
    with pytest.raises(ValueError, match=name):
        ScalingCurve.from_dict(bad)
