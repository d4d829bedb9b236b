"""The spread of a prediction: NQMs redrawn from the fitted numbers' uncertainties (a parametric
bootstrap) and the B_crit of each."""

from __future__ import annotations

import dataclasses

import numpy as np

from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import tune_curve
from realnets.calibration import power_tail
from realnets.sweeps.records import SweepConfig, TrialRecord
from realnets.validation.predictions import search_matched_curve
from realnets.validation.settings import NQM_FAMILY, ValidationConfig
from realnets.validation.targets import (StepMatch, nqm_optimizer, nqm_search_space,
                                        step_matched_target)


def fitted_nqm(fitted: dict, target: float) -> NQMConfig:
    """The NQM of a `nqm_fit.fit_nqm` record at its fitted values (no draw), with `target`: the
    calibrated NQM a validation document stores under `checkpoints.<name>.nqm`."""
    return resampled_nqm(fitted, target, rng=None)


def resampled_nqm(fitted: dict, target: float, rng: np.random.Generator | None) -> NQMConfig:
    """One NQM drawn from a `nqm_fit.fit_nqm` record's values and uncertainties (independent
    normals; positive quantities clipped at a tenth of their value): the top-k h, c and g, the
    tail's exponent, dimension, noise ratio and start. A parametric bootstrap for the spread of a
    prediction. The dimension's draw uses its standard error over SLQ probes only, not the
    quadrature's resolution (`dim_resolution`, reported beside it): where the SLQ density is not
    resolved at the floor that resolution can exceed d itself, and it bounds a discretisation
    error rather than giving a spread. With `rng` None nothing is drawn (`fitted_nqm`)."""
    top = fitted["top"]

    def normal(shape=()):
        return np.zeros(shape) if rng is None else rng.standard_normal(shape)

    def draw(m, positive=True):
        value = np.asarray(m["value"], float)
        err = np.nan_to_num(np.asarray(m["uncertainty"] if m["uncertainty"] is not None
                                       else np.zeros_like(value), float))
        x = value + err * normal(value.shape)
        return np.maximum(x, 0.1 * value) if positive else x

    h = draw(top["curvature"])
    c = draw(top["noise_variance"])
    g = draw(top["grad_components"], positive=False)
    curv, noise, init = [h], [c], [g ** 2 / h ** 2]
    tail = fitted.get("tail")
    if tail:
        k = tail["anchor_index"]
        a = float(draw(tail["exponent"]))
        sd = tail["dim"]["uncertainty"] or 0.0
        d = max(k + 1, int(round(tail["dim"]["value"] + sd * float(normal()))))
        rho = float(draw(tail["noise_ratio"]))
        m = float(draw(tail["init_second_moment"], positive=False))
        h_tail = power_tail.tail_curvature(np.arange(k + 1, d + 1), k, float(h.min()), a)
        curv.append(h_tail)
        noise.append(rho * h_tail)
        init.append(np.full(h_tail.shape, max(m, 0.0)))
    curv, noise, init = (np.concatenate(x) for x in (curv, noise, init))
    return NQMConfig(dim=int(curv.size), target=float(target),
                     curvature=tuple(curv.tolist()), noise_variance=tuple(noise.tolist()),
                     init_second_moments=tuple(init.tolist()),
                     train_size=fitted.get("train_size"))


def bootstrap_configs(fitted: dict, target: float, vcfg: ValidationConfig,
                      match: StepMatch | None = None) -> list[NQMConfig | None]:
    """The `vcfg.bootstrap` NQMs of `bootstrap_b_crit`, in its order and from its seed
    (`vcfg.seed`): each drawn by `resampled_nqm`, with its own step-matched target when `match` is
    given; None for a draw that failed (a ValueError while drawing or matching, or a target not
    below the draw's initial loss)."""
    rng = np.random.default_rng(vcfg.seed)
    out: list[NQMConfig | None] = []
    for _ in range(vcfg.bootstrap):
        try:
            config = resampled_nqm(fitted, target, rng)
            if match is not None:
                config = dataclasses.replace(config, target=step_matched_target(config, match)[0])
            if not config.problem().initial_loss() > config.target:
                raise ValueError("target above the initial loss")
        except ValueError:
            out.append(None)
            continue
        out.append(config)
    return out


def bootstrap_b_crit(fitted: dict, target: float, sweep_config: SweepConfig,
                     records: list[TrialRecord], batch_sizes, vcfg: ValidationConfig,
                     match: StepMatch | None = None, search_matched: bool = True) -> dict:
    """B_crit of the tuned and (unless `search_matched` is False) search-matched curves over
    `vcfg.bootstrap` resampled NQMs (`resampled_nqm`): their standard deviation and 16-84% range
    are the predictions' uncertainty. With `match`, each redrawn NQM gets its own step-matched
    target (the rule is applied to every draw, not only to the fitted NQM)."""
    family = NQM_FAMILY[sweep_config.optimizer]
    tuned, matched, failed = [], [], 0
    for config in bootstrap_configs(fitted, target, vcfg, match):
        if config is None:
            failed += 1
            continue
        space = nqm_search_space(sweep_config.search)
        curve = tune_curve(config, nqm_optimizer(family, space), batch_sizes,
                           max_steps=vcfg.nqm_max_steps, space=space, certify=vcfg.certify)
        tuned.append(analyse_curve(curve).fit.b_crit)
        if search_matched:
            m = search_matched_curve(config, sweep_config, records, batch_sizes)
            matched.append(None if m is None else analyse_curve(m).fit.b_crit)

    def spread(values):
        v = np.array([x for x in values if x is not None], float)
        if v.size < 2:
            return None
        return {"sd": float(np.std(v, ddof=1)), "p16": float(np.percentile(v, 16)),
                "p84": float(np.percentile(v, 84)), "draws": v.tolist()}

    return {"draws": vcfg.bootstrap, "failed": failed, "tuned": spread(tuned),
            "search_matched": spread(matched),
            "note": "parametric bootstrap: NQMs redrawn from the fitted numbers' uncertainties"}
