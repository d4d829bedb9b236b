"""The workloads: data set + model + goal + default search space, budget and batch sizes.

Goals are chosen so that every default batch size reaches them within its budget for some
metaparameters in the search space (checked by pilot sweeps on this project's 2-core machine;
`goal_note` says how each was set). Pass `--goal` to study a tougher or easier target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from nqm.problem import NQMConfig
from realnets.workloads import datasets
from realnets.workloads.search_space import TrialSearchSpace

if TYPE_CHECKING:   # the builders import jax and flax only when a workload is built, so listing
    from realnets.workloads.tasks import Task   # the catalogue (every CLI call) stays light

TEXT_CONTEXT = 32

# The NQM trained as a workload: a flatter spectrum than the engine's default (h_i = i^-0.5) so
# that one run's loss stays within a few percent of its expectation (many directions share the
# loss), which lets one measured run be compared with the exact expected curve.
NQM_WORKLOAD = NQMConfig(dim=1000, spectrum_exponent=0.5, target=0.05)


@dataclass(frozen=True)
class Workload:
    """A named study.

    Attributes:
      name: registry key.
      data, model: human descriptions.
      metric: 'error' (validation error rate), 'cross_entropy' (nats per character) or 'loss'.
      goal: default goal on the metric (reached when metric <= goal); NaN (an own workload
        without one): chosen by the pilot rule, as `--goal auto`.
      goal_note: how the goal was chosen.
      optimizer: default optimizer.
      search: default search space.
      batch_sizes: default batch sizes.
      max_steps: default step budget per trial.
      eval_resolution: evaluation cadence (relative gap between evaluations).
      build: () -> Task; options (text_file) are passed as keywords.
      source: for an own workload, the `--workload` value it was loaded from
        ('file.py:function' or 'module:function'; realnets.workloads.own), which sweeps store
        so that they find it again; None for the shipped ones.
    """

    name: str
    data: str
    model: str
    metric: str
    goal: float
    goal_note: str
    optimizer: str
    search: TrialSearchSpace
    batch_sizes: tuple[int, ...]
    max_steps: int
    eval_resolution: float
    build: Callable[..., Task] = field(repr=False, compare=False)
    source: str | None = None

    @property
    def recorded_metric(self) -> str | None:
        """What a sweep's config.json records as its metric: an own workload's (so its sweep
        reads without the user's file), None for a shipped one (the catalogue knows it)."""
        return self.metric if self.source else None

    @property
    def key(self) -> str:
        """What a sweep's config.json stores as its workload: the name, or an own workload's
        source."""
        return self.source or self.name

    def describe(self) -> dict:
        return {"name": self.name, "data": self.data, "model": self.model, "metric": self.metric,
                "goal": None if math.isnan(self.goal) else self.goal,   # None: the pilot rule's
                "goal_note": self.goal_note, "optimizer": self.optimizer,
                "search": self.search.to_dict(), "batch_sizes": list(self.batch_sizes),
                "max_steps": self.max_steps, "eval_resolution": self.eval_resolution,
                **({"source": self.source} if self.source else {})}


def _mnist_mlp(**_) -> Task:
    from realnets.workloads import models
    from realnets.workloads.tasks import classification_task
    s = datasets.load_mnist10k()
    return classification_task(models.MLP(hidden=(128, 128)), s.train_x, s.train_y, s.val_x, s.val_y)


def _mnist_cnn(**_) -> Task:
    from realnets.workloads import models
    from realnets.workloads.tasks import classification_task
    s = datasets.load_mnist10k()
    return classification_task(models.SimpleCNN(features=(16, 32), dense=128),
                               s.train_x, s.train_y, s.val_x, s.val_y)


def _mnist1d_mlp(**_) -> Task:
    from realnets.workloads import models
    from realnets.workloads.tasks import classification_task
    s = datasets.load_mnist1d(num_samples=10000)
    return classification_task(models.MLP(hidden=(256, 256)), s.train_x, s.train_y, s.val_x, s.val_y)


def _digits_mlp(**_) -> Task:
    from realnets.workloads import models
    from realnets.workloads.tasks import classification_task
    s = datasets.load_digits()
    return classification_task(models.MLP(hidden=(64,)), s.train_x, s.train_y, s.val_x, s.val_y)


def _digits_cnn(**_) -> Task:
    from realnets.workloads import models
    from realnets.workloads.tasks import classification_task
    s = datasets.load_digits()
    return classification_task(models.SimpleCNN(features=(16, 32), kernel=3, dense=64),
                               s.train_x, s.train_y, s.val_x, s.val_y)


def _mnist_logreg(**_) -> Task:
    from realnets.workloads import models
    from realnets.workloads.tasks import classification_task
    s = datasets.load_mnist10k()
    return classification_task(models.MLP(hidden=()), s.train_x, s.train_y, s.val_x, s.val_y)


def _text(text_file=None, **_) -> Task:
    from realnets.workloads import models
    from realnets.workloads.tasks import language_task
    text = datasets.load_text(text_file)
    model = models.CharTransformer(vocab_size=len(text.vocab), context=TEXT_CONTEXT, d_model=64,
                                   num_heads=4, num_layers=2)
    return language_task(model, text.train, text.val, TEXT_CONTEXT)


def _nqm(**_) -> Task:
    from realnets.workloads.tasks import quadratic_task
    return quadratic_task(NQM_WORKLOAD.problem())


HELD_OUT_NOTE = ("held out (added 2026-11-27, docs/prediction_rule.md): no goal of its own; "
                 "`--goal auto` sets it by the pilot rule before the sweep.")
POW2 = lambda lo, hi: tuple(2 ** k for k in range(lo, hi + 1))  # noqa: E731

WORKLOADS = {w.name: w for w in (
    Workload("mnist_mlp", "MNIST, 10,000 real digits (9,003 train / 997 validation)",
             "MLP 784-128-128-10, ReLU", "error", 0.04,
             "validation error 4%: in a pilot (8 trials at B = 16, 128, 1024) the best trials "
             "reached it in 2040, 344 and 75 steps; 6% was reached within one epoch at B = 16, "
             "too easy to show perfect scaling; 3% is near what this MLP reaches on 9,003 images.",
             "momentum", TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)), POW2(4, 12), 6000, 0.02,
             _mnist_mlp),
    Workload("mnist_cnn", "MNIST, 10,000 real digits (9,003 train / 997 validation)",
             "simple CNN: conv5x5-16, pool, conv5x5-32, pool, dense 128, 10 (Shallue et al., scaled down)",
             "error", 0.03,
             "validation error 3%: in a pilot (6 trials, learning rate 0.003..1, 1 - momentum "
             "0.02..0.5, to the full budget) the best trials reached it in 607, 133 and 92 steps "
             "at B = 16, 128, 1024 (4%: 429, 87, 62; 2.5%: 857, 235, 133, one trial of 6 at "
             "B = 1024). Trials with learning rate / (1 - momentum) above ~2 diverged or stuck at "
             "chance at every batch size, hence the narrow search. Here a trial costs ~0.45 ms "
             "per example with --vmap-trials 1 and 3-6 times more with trials vmapped (batched "
             "convolutions), so batch sizes stop at 1024 and a 4-trial sweep takes ~11 minutes.",
             "momentum", TrialSearchSpace((1e-2, 0.5), (5e-2, 0.5)), POW2(4, 10), 1500, 0.02,
             _mnist_cnn),
    Workload("mnist1d_mlp", "MNIST-1D (Greydanus 2020), 10,000 samples generated offline (8,000 train / 2,000 validation)",
             "MLP 40-256-256-10, ReLU", "error", 0.30,
             "validation error 30%: in a pilot (8 trials, to the full budget) the best trials "
             "reached it in 2040, 316, 87, 65 and 63 steps at B = 16, 128, 1024, 2048, 4096 "
             "(near perfect scaling to 128, flat from 1024); 45% took 581, 107 and 34 steps at "
             "B = 16, 128, 1024 (too easy); 25% took 3568 steps at B = 16 (2 trials of 8); the "
             "best trials plateau near 20%.",
             "momentum", TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)), POW2(4, 12), 4000, 0.02,
             _mnist1d_mlp),
    Workload("digits_mlp", "scikit-learn's 8x8 digits (1,618 train / 179 validation)",
             "MLP 64-64-10, ReLU", "error", 0.04,
             "validation error 4% on 179 images (at most 7 mistakes): in a pilot (16 trials, to "
             "the full budget) the best trials reached it in 260, 200, 99, 93, 83, 43, 39 and 45 "
             "steps at B = 8 ... 1024. Tougher goals are out of reach of the large batches (best "
             "error in 3000 steps: 2.8% at B = 512, 3.4% at B = 1024; 3.5% took 524 steps at "
             "B = 1024, 2 trials of 16); at 6% the curve is flat from B = 16 (110, 55, 81, 40 "
             "steps at B = 8 ... 64). The metric moves in steps of 0.56% and is noisy.",
             "momentum", TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)), POW2(3, 10), 2000, 0.02,
             _digits_mlp),
    Workload("digits_cnn", "scikit-learn's 8x8 digits (1,618 train / 179 validation)",
             "small CNN: conv3x3-16, pool, conv3x3-32, pool, dense 64, 10",
             "error", math.nan,
             HELD_OUT_NOTE,
             "momentum", TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)), POW2(3, 9), 1000, 0.02,
             _digits_cnn),
    Workload("mnist_logreg", "MNIST, 10,000 real digits (9,003 train / 997 validation)",
             "softmax regression 784-10 (convex)", "error", math.nan,
             HELD_OUT_NOTE,
             "adam", TrialSearchSpace((1e-4, 1e-1), (5e-2, 0.5)), POW2(4, 12), 3000, 0.02,
             _mnist_logreg),
    Workload("text_transformer", "characters of CPython's pydoc_data topics (or --text-file), last 10% validation",
             f"char transformer: 2 layers, d 64, 4 heads, context {TEXT_CONTEXT}", "cross_entropy", 1.8,
             "validation cross-entropy 1.8 nats/char (unigram entropy ~3.1): in a pilot (6 "
             "trials, learning rate 0.001..0.03, 1 - beta1 0.02..0.5, to the full budget) the best "
             "trials reached it in 523, 133 and 102 steps at B = 16, 128, 512 (2.0: 318, 92, 70; "
             "1.6: 993, 223, 147); the best rates were 0.002 at B = 16 and 0.008 at B = 128 and "
             "512, rates >= 0.012 were slower at B = 16, hence the narrower search. A trial costs "
             "~0.8 ms per example plus ~0.1 s per evaluation here, so batch sizes stop at 512 and "
             "a 4-trial sweep takes ~7 minutes.",
             "adam", TrialSearchSpace((1e-3, 2e-2), (5e-2, 0.5)), POW2(3, 9), 3000, 0.02, _text),
    Workload("nqm", f"the NQM itself: d = {NQM_WORKLOAD.dim}, h_i = i^-{NQM_WORKLOAD.spectrum_exponent}, "
             "c_i = h_i, theta_0 ~ N(0, I), fresh Gaussian examples every step",
             "quadratic 1/2 theta^T H theta, gradient noise N(0, C / B)", "loss", NQM_WORKLOAD.target,
             "the NQM's own target (loss 0.05; initial expected loss ~30.9). The exact prediction "
             "`nqm.tuning.tune_curve(NQM_WORKLOAD, OptimizerSpec('sgd'), batch_sizes)` takes 8970, "
             "2246, 565, 146, 48 and 41 steps at B = 4, 16, 64, 256, 1024, 2048 with tuned rates "
             "0.011 ... 1.91 (stability limit 2 / h_max = 2); a pilot (8 trials, rates 0.005..4) "
             "measured 9162, 706 and 51 steps at B = 4, 64, 2048. The range 0.004..4 keeps every "
             "tuned rate out of its outer 10% (rates above 2 diverge).",
             "sgd", TrialSearchSpace((0.004, 4.0)), POW2(2, 11), 20000, 0.02, _nqm),
)}


def get(name: str) -> Workload:
    """A shipped workload by name, or an own one by 'file.py:function' / 'module:function'."""
    if name in WORKLOADS:
        return WORKLOADS[name]
    from realnets.workloads import own

    if own.is_spec(name):
        return own.load_own(name)
    raise ValueError(f"workload must be one of {', '.join(WORKLOADS)} or FILE.py:FUNCTION "
                     f"(an own workload, docs/own_workload.md), got {name!r}")
