"""What the calibrated NQM predicts: its tuned curve and its curve at the sweep's own trials, each
with the analysis the measured curve gets, and the reference NQM of a workload built from one."""

from __future__ import annotations

import time

import numpy as np

from nqm.crossing import NOT_REACHED, steps_to_target
from nqm.curve import CurvePoint, ScalingCurve
from nqm.moments import dynamics
from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import tune_curve
from realnets.sweeps.records import SweepConfig, TrialRecord
from realnets.validation.settings import NQM_FAMILY, ValidationConfig
from realnets.validation.targets import nqm_optimizer, nqm_search_space


def search_matched_curve(config: NQMConfig, sweep_config: SweepConfig, records: list[TrialRecord],
                         batch_sizes) -> ScalingCurve | None:
    """The NQM run with the sweep's own trials: per batch size, the fewest expected steps to the
    target over the metaparameters the sweep tried there, within the sweep's budget (None for
    adam, whose learning rate has no NQM counterpart)."""
    optimizer = sweep_config.optimizer
    if optimizer == "adam":
        return None
    problem = config.problem()
    budget = sweep_config.max_steps
    rows = [(r.batch_size, r.learning_rate, r.momentum or 0.0)
            for r in records if r.batch_size in set(int(b) for b in batch_sizes)]
    rows = sorted(set(rows))
    batch = np.array([r[0] for r in rows], float)
    lr = np.array([r[1] for r in rows])
    mom = np.array([r[2] for r in rows]) if optimizer != "sgd" else np.zeros(len(rows))
    steps = steps_to_target(dynamics(problem, batch, lr, mom), problem.target, budget)
    points = []
    for b in sorted(set(int(x) for x in batch_sizes)):
        here = np.flatnonzero((batch == b) & (steps != NOT_REACHED))
        if here.size == 0:
            points.append(CurvePoint(b, None))
            continue
        i = here[np.argmin(steps[here])]
        points.append(CurvePoint(b, int(steps[i]), learning_rate=float(lr[i]),
                                 momentum=float(mom[i]) if optimizer != "sgd" else None))
    return ScalingCurve(points=tuple(points), source="nqm",
                        config={"optimizer": "sgd" if optimizer == "sgd" else "momentum",
                                "max_steps": budget, "target": problem.target,
                                "search": "the sweep's trial metaparameters"})


def curve_summary(curve: ScalingCurve | None) -> dict | None:
    if curve is None:
        return None
    analysis = analyse_curve(curve)
    config = {k: v for k, v in curve.config.items() if k != "problem"}   # no d-long arrays
    out = {"points": [{k: v for k, v in p.to_dict().items() if k != "trials"}
                      for p in curve.points], "config": config}
    out.update(analysis.to_dict())
    return out


def predict(config: NQMConfig, sweep_config: SweepConfig, records: list[TrialRecord], batch_sizes,
            vcfg: ValidationConfig, search_matched: bool = True) -> dict:
    """The calibrated NQM's tuned curve (inside the sweep's search space) and, unless
    `search_matched` is False, its search-matched curve, each with its analysis."""
    family = NQM_FAMILY[sweep_config.optimizer]
    t0 = time.perf_counter()
    space = nqm_search_space(sweep_config.search)
    tuned = tune_curve(config, nqm_optimizer(family, space), batch_sizes,
                       max_steps=vcfg.nqm_max_steps, space=space, certify=vcfg.certify)
    t1 = time.perf_counter()
    matched = (search_matched_curve(config, sweep_config, records, batch_sizes)
               if search_matched else None)
    return {"family": family, "tuned": curve_summary(tuned),
            "search_matched": curve_summary(matched),
            "search_matched_note": None if matched is not None else
            "not computed for adam (the NQM's mean-field Adam is tuned, not run at the sweep's "
            "trials)" if search_matched else "not computed for this rule",
            "seconds": {"tuned": t1 - t0, "search_matched": time.perf_counter() - t1}}


def reference_nqm(workload: str) -> NQMConfig | None:
    """The NQM a workload was built from, when there is one (the `nqm` workload): the calibrated
    NQM can then be checked against the truth."""
    from realnets.workloads import NQM_WORKLOAD

    return NQM_WORKLOAD if workload == "nqm" else None
