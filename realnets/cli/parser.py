"""The argument parser of `python -m realnets`: `build_parser` and its helpers for the
`branch`, `throughput` and `plan` subcommands. Only flags, defaults and help text; the commands
that read them live beside this module."""

from __future__ import annotations

import argparse

from nqm.argparser import OneLineErrorParser
from realnets.validation.settings import TARGET_RULES


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="python -m realnets",
                     description="Measure steps to result against batch size on real networks.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineErrorParser)

    s = sub.add_parser("sweep", help="run or resume a sweep (Shallue et al. protocol)")
    s.add_argument("--workload", required=True)
    s.add_argument("--batch-sizes", help="e.g. 16,32,64 or 16:4096 (powers of two); default: the workload's")
    s.add_argument("--trials", type=int, default=8, help="quasi-random trials per batch size")
    s.add_argument("--max-steps", type=int, help="step budget per trial; default: the workload's")
    s.add_argument("--goal", help="validation metric to reach, or 'auto' (a pilot of 8 trials at "
                                  "the smallest and largest batch size chooses it: "
                                  "docs/prediction_rule.md); default: the workload's")
    s.add_argument("--goal-min-steps", type=int,
                   help="with --goal auto: halve the rule's fraction (up to 4 times) until a "
                        "pilot trial at the smallest batch size needs at least this many steps "
                        "to the goal (off by default; docs/trainer.md)")
    s.add_argument("--optimizer", choices=("sgd", "momentum", "nesterov", "adam"))
    s.add_argument("--lr-range", help="LO,HI of the learning rate (log scale)")
    s.add_argument("--one-minus-momentum-range", help="LO,HI of 1 - momentum (log scale)")
    s.add_argument("--final-lr-fraction-range",
                   help="LO,HI of the linear decay's final fraction (default: constant rate)")
    s.add_argument("--decay-steps-range",
                   help="LO,HI of the linear decay's length in steps (log scale, rounded to whole "
                        "steps; 1 <= LO, HI <= --max-steps); default: the decay spans the budget")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--eval-resolution", type=float,
                   help="relative gap between evaluations; default: the workload's")
    s.add_argument("--vmap-trials", type=int, default=0,
                   help="trials per compiled program (0: all trials of a batch size)")
    s.add_argument("--max-rows-per-device", type=int, default=4096,
                   help="larger per-device batches use gradient accumulation")
    s.add_argument("--full-trials", action="store_true",
                   help="run every trial to its end (default: stop a batch size's trials once one "
                        "reached the goal; steps to result are the same)")
    s.add_argument("--noise-every", type=int,
                   help="measure the gradient noise scale every N steps (default 1: every step; "
                        "free on several devices, a second half-batch gradient on one; sparser "
                        "is cheaper there but noisier; 0: off on one device)")
    s.add_argument("--text-file", help="text for the text_transformer workload")
    s.add_argument("--out", required=True, help="sweep directory (rerun to resume)")
    s.add_argument("--no-progress", action="store_true")
    _distributed_flags(s, "sweep")
    s.add_argument("--backend", choices=("serial", "ray"), default="serial",
                   help="run the blocks of trials in this process (serial) or as Ray tasks "
                        "(docs/cluster.md); the files and results are the same")
    s.add_argument("--ray-address", help="HOST:PORT of a Ray head (ray start --head), ray://HOST:PORT "
                                         "or auto; default: start a local Ray")
    s.add_argument("--resources-per-block", help="JSON, what each block asks of Ray, e.g. "
                                                 "'{\"CPU\": 1, \"GPU\": 0.25}' (default {\"CPU\": 1})")

    sub.add_parser("workloads", help="list the workloads").add_argument(
        "--format", choices=("table", "json"), default="table")

    r = sub.add_parser("report", help="the curve, its analysis and the trials of a sweep")
    r.add_argument("dir")
    r.add_argument("--format", choices=("table", "json", "csv"), default="table")

    f = sub.add_parser("shortfall",
                       help="how far a larger search would likely move B_crit: each sweep's "
                            "B_crit from its first K trials, extrapolated to 4K, and against "
                            "all its trials where it has 4K (runs nothing)")
    f.add_argument("paths", nargs="+", metavar="PATH",
                   help="sweep directories (run with --full-trials) or steps CSVs")
    f.add_argument("--first", type=int, default=32,
                   help="trials per batch size the estimate starts from (K)")
    f.add_argument("--write-steps", metavar="FILE",
                   help="also write the sweeps' steps to the goal as one steps CSV")

    q = sub.add_parser("repeat", help="run each batch size's best trial again with other seeds: "
                                      "an interval of B_crit for a sweep whose trials stopped "
                                      "early")
    q.add_argument("dir", help="sweep directory (its reruns are written beside its trials)")
    q.add_argument("--seeds", required=True,
                   help="data orders, e.g. 1,2,3,4 (not the sweep's own seed)")
    q.add_argument("--inits", type=int, default=1,
                   help="initialisations per seed (trial ids 0 .. inits - 1)")
    q.add_argument("--step-cap", type=float, default=3.0,
                   help="stop a rerun at this multiple of the sweep's steps at its batch size")
    q.add_argument("--no-progress", action="store_true")
    _distributed_flags(q, "repeat (process 0 writes)")

    m = sub.add_parser("summary", help="the validation summary (summary.json) as a Markdown table")
    _summary_file(m)
    m.add_argument("--rebuild", action="store_true",
                   help="first rewrite the file from the validation.json files beside it "
                        "(no measurement is rerun)")

    for name, text in (
            ("track-record", "do the predictions' error bars hold? each predictor over the "
                             "summary's real workloads: its shipped intervals' coverage and the "
                             "split-conformal factor the record calls for (runs nothing)"),
            ("headline", "the README's headline counts: each estimate within 2x of the "
                         "measured B_crit over the summary's real workloads and over those "
                         "held out for it (runs nothing)")):
        k = sub.add_parser(name, help=text)
        _summary_file(k)
        k.add_argument("--format", choices=("table", "json"), default="table")
        if name == "headline":
            k.add_argument("--measured", choices=("sweep", "reruns"), default="sweep",
                           help="the measured B_crit: the sweep's (the bar's) or its winners' "
                                "rerun median curve's (a diagnostic)")

    b = sub.add_parser("import-batch-science",
                       help="read published batch_science data into the same curve format")
    b.add_argument("path")
    b.add_argument("--goal", type=float, required=True)
    b.add_argument("--metric", help="measurement column (default: val/classification_error)")
    b.add_argument("--format", choices=("table", "json", "csv"), default="table")
    b.add_argument("--out", help="write each curve as a sweep-style curve.json under this directory")

    v = sub.add_parser("validate", help="predict B_crit from a calibrated NQM and the noise scale, "
                                        "beside the measured one, and write a report")
    v.add_argument("--workload", required=True)
    v.add_argument("--sweep", help="sweep directory (default: ./sweeps/WORKLOAD, from the current directory); run with the "
                                   "workload's defaults and --trials if it does not exist")
    v.add_argument("--trials", type=int, default=8, help="trials per batch size of a new sweep")
    v.add_argument("--prediction-trials", type=int, default=None, metavar="K",
                   help="predict from the sweep's first K trials per batch size (the reference "
                        "trial, its reruns, both ends) and measure from all of them, as "
                        "`remeasure` leaves a report of a sweep resumed after its validation "
                        "(default: all trials for both)")
    v.add_argument("--out", required=True, help="report directory")
    v.add_argument("--batch-size", type=int,
                   help="calibration batch size (default: the smallest the sweep reached)")
    v.add_argument("--checkpoints", default="goal,init",
                   help="where curvature and noise are measured: goal and/or init, the first is "
                        "the headline (default goal,init)")
    v.add_argument("--top-k", type=int, default=20, help="measured Hessian eigen-directions")
    v.add_argument("--lanczos-steps", type=int, help="default max(2k, k + 20)")
    v.add_argument("--slq-steps", type=int, default=40)
    v.add_argument("--slq-probes", type=int, default=8)
    v.add_argument("--floor-ratio", type=float, default=1e-2,
                   help="the tail stops at this fraction of the top eigenvalue")
    v.add_argument("--sample-rows", type=int, default=1024, help="training rows measured")
    v.add_argument("--noise-rows", type=int, default=128,
                   help="per-example gradients in tr(H Sigma) (one HVP each)")
    v.add_argument("--chunk-rows", type=int,
                   help="rows per compiled call over the calibration sample (default all) and "
                        "over the whole set in full-batch descents (default 1024)")
    v.add_argument("--loss-floor", type=float, default=0.0,
                   help="L*, subtracted from the training loss at the goal for the NQM's target")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--bootstrap", type=int, default=8,
                   help="NQMs redrawn from the fitted uncertainties for the predictions' spread")
    v.add_argument("--target-rule", choices=TARGET_RULES, default="step_matched",
                   help="headline NQM target: step_matched (the rule of docs/prediction_rule.md: "
                        "the loss the tuned NQM reaches in the reference run's steps), the "
                        "training loss at the goal (minus --loss-floor) or the fitted quadratic's "
                        "own loss there (all are reported)")
    v.add_argument("--branch-repeats", type=int, default=3,
                   help="repeats of the local critical batch size by branching from the "
                        "reference run (settings by the rule in docs/validation.md); 0 skips it")
    v.add_argument("--no-transfer", action="store_true",
                   help="skip training the network with the NQM's tuned metaparameters at each "
                        "batch size (docs/validation.md, 'Does the network follow the NQM?')")
    v.add_argument("--notes", help="markdown file: where the NQM's assumptions hold and break, "
                                   "put into the report")
    v.add_argument("--summary", help="summary file whose entry for this workload is replaced "
                                     "(default: summary.json beside the --out directory)")
    v.add_argument("--reuse", action="store_true",
                   help="re-render OUT/validation.json (made with the same settings; an error "
                        "naming those that differ otherwise), "
                        "its measured curve rebuilt from the sweep (with any reruns); one made "
                        "before the transfer existed gets only the transfer run")
    v.add_argument("--retune", action="store_true",
                   help="tune OUT/validation.json's NQM side again on its stored measurements "
                        "with these settings (the certified tuner: docs/prediction_rule.md, "
                        "session 38): every prediction and bootstrap, the transfer and quadratic "
                        "path, two_ends.json's rule 3 and miss_split.json; the network's "
                        "measurements are kept")
    v.add_argument("--no-certify", action="store_true",
                   help="tune the NQM without the grid search's certificate, as reports made "
                        "before session 38 were")
    v.add_argument("--rule-4", action="store_true",
                   help="then measure both ends on the network (two-ends, with the 16 "
                        "descents of B_2pt'(med), the two-point estimate of record) and split "
                        "the headline's miss (miss-split), so that the report and summary.json "
                        "carry rule 4 (docs/prediction_rule.md, session 36) and B_2pt'(med); "
                        "needs the sweep's winners rerun (python -m realnets repeat)")
    v.add_argument("--no-progress", action="store_true")
    _distributed_flags(v, "validate (process 0 writes)")
    w = sub.add_parser("swap-optimizer",
                       help="a report's calibrated NQM tuned as another optimizer (a diagnostic: "
                            "is the miss the quadratic's or the optimizer model's?)")
    w.add_argument("dir", help="validation report directory (holding validation.json)")
    w.add_argument("--optimizer", required=True, choices=("sgd", "momentum", "adam"))
    w.add_argument("--lr-range", required=True, help="LO,HI of the learning rate")
    w.add_argument("--one-minus-momentum-range",
                   help="LO,HI of 1 - momentum (1 - b1 for adam); required but for sgd")
    w.add_argument("--decay", action="store_true",
                   help="also tune a linear decay of the rate on the same quadratic and target "
                        "(docs/nqm_adam.md)")
    w.add_argument("--monte-carlo", type=int, metavar="RUNS",
                   help="with --optimizer adam: real Adam by Monte Carlo (RUNS >= 2 runs) at "
                        "each tuned point of the swapped curve, its steps to the same target (a "
                        "check of the mean field)")
    w.add_argument("--start-scale", type=float, default=1.0,
                   help="multiply the fitted NQM's start E[theta_i^2] by this (> 0) before the "
                        "step match and the tuning (a diagnostic of the start; default 1)")
    w.add_argument("--format", choices=("table", "json"), default="table")
    a = sub.add_parser("adam-basis",
                       help="a report of an Adam sweep: Adam per weight against Adam per "
                            "eigenvector of the whole Hessian, on the network and its quadratic, "
                            "and over the NQM's d top eigenvectors only (a diagnostic: do the "
                            "NQM's basis or its truncated spectrum make it slow?)")
    a.add_argument("dir", help="validation report directory (holding validation.json); the "
                               "result goes to DIR/adam_basis.json")
    a.add_argument("--sweep", help="the sweep directory (default: the one the report names)")
    a.add_argument("--format", choices=("table", "json"), default="table")
    a.add_argument("--no-progress", action="store_true")
    e = sub.add_parser("two-ends",
                       help="reports: both ends of S(B) measured on the network (full batch on the "
                            "whole training set, the reruns' median steps at B_ref): the two-point "
                            "estimate and rule 3 (docs/prediction_rule.md, session 32)")
    e.add_argument("dirs", nargs="+", metavar="DIR",
                   help="validation report directories (holding validation.json); each result "
                        "goes to DIR/two_ends.json")
    e.add_argument("--sweep", help="the sweep directory, with one DIR (default: the one the "
                                   "report names)")
    e.add_argument("--chunk-rows", type=int, metavar="N",
                   help="rows of the training set per compiled call in the full-batch descents "
                        "(default: the report's own setting, else 1024; at least the set's rows "
                        "is all at once: more memory, the same result up to float rounding)")
    e.add_argument("--stored", action="store_true",
                   help="run nothing: tabulate the DIRs' stored two_ends.json (a DIR without one "
                        "is named, not an error)")
    e.add_argument("--curve", action="store_true",
                   help="run nothing: the two-point estimate's whole curve S_2pt(B) in absolute "
                        "steps, and rule 1's, against the measured steps at each batch size "
                        "(the stored two_ends.json and validation.json; docs/prediction_rule.md, "
                        "session 36)")
    e.add_argument("--goal-metric", action="store_true",
                   help="on stored records: follow the fastest whole-set descent again with the "
                        "validation metric at every step (a diagnostic: docs/prediction_rule.md, "
                        "session 32, later)")
    e.add_argument("--full-batch-inits", metavar="SEEDS",
                   help="on stored records: the fastest whole-set descent's configuration again "
                        "from the initialisations of these seeds, e.g. 1,2,3 (a diagnostic: "
                        "docs/prediction_rule.md, session 40, last)")
    e.add_argument("--format", choices=("table", "json"), default="table")
    e.add_argument("--no-progress", action="store_true")
    _distributed_flags(e, "two-ends (process 0 writes)")
    m = sub.add_parser("miss-split",
                       help="reports with a two_ends.json: the headline's predicted / measured "
                            "B_crit split exactly into four measured factors (the NQM's shape, "
                            "its noise-free steps against the network's, the matched reference "
                            "steps, the network's shape; docs/prediction_rule.md, session 33)")
    m.add_argument("dirs", nargs="+", metavar="DIR",
                   help="validation report directories (holding validation.json and "
                        "two_ends.json); each result goes to DIR/miss_split.json")
    m.add_argument("--stored", action="store_true",
                   help="run nothing: tabulate the DIRs' stored miss_split.json (a DIR without "
                        "one is named, not an error)")
    m.add_argument("--format", choices=("table", "json"), default="table")
    m.add_argument("--no-progress", action="store_true")
    r = sub.add_parser("rerender",
                       help="reports: report.md written again from each DIR's stored records "
                            "(validation.json, two_ends.json, miss_split.json, the charts there); "
                            "runs nothing")
    r.add_argument("dirs", nargs="+", metavar="DIR",
                   help="validation report directories (holding validation.json)")
    rm = sub.add_parser("remeasure",
                        help="reports: each DIR's measured side rebuilt from all the trials of "
                             "its sweep, resumed since the validation; the predictions kept as "
                             "made from its first trials, the records beside, two_point.json, "
                             "charts, report.md and summary entry updated; trains nothing "
                             "(docs/prediction_rule.md, session 45)")
    rm.add_argument("dirs", nargs="+", metavar="DIR",
                    help="validation report directories (holding validation.json)")
    rm.add_argument("--sweep", default=None,
                    help="the sweep directory (default: the one the report names, else "
                         "sweeps/WORKLOAD); with one DIR only")
    t = sub.add_parser("tuning-check",
                       help="reports: the headline NQM's tuned curve against the engine's grid "
                            "search, batch size by batch size (writes nothing; "
                            "docs/prediction_rule.md, session 37)")
    t.add_argument("dirs", nargs="+", metavar="DIR",
                   help="validation report directories (holding validation.json)")
    t.add_argument("--format", choices=("table", "json"), default="table")
    p = sub.add_parser("two-point",
                       help="a sweep: B_crit by the two-point estimate B_2pt'(med) from its smallest "
                            "batch size alone (the reference trial's reruns and full-batch "
                            "descents on the whole training set; no NQM, no other batch size "
                            "needed: docs/own_workload.md)")
    p.add_argument("dir", help="sweep directory with the reference trial's reruns (python -m "
                               "realnets repeat); the result goes to DIR/two_point.json")
    p.add_argument("--prediction-trials", type=int, default=None, metavar="K",
                   help="estimate from the sweep's first K trials per batch size and hold it "
                        "against B_crit from all of them (default: all trials)")
    p.add_argument("--batch-size", type=int,
                   help="B_ref (default: the smallest batch size that reached the goal)")
    p.add_argument("--chunk-rows", type=int, metavar="N",
                   help="rows of the training set per compiled call in the full-batch descents "
                        "(default: 1024; at least the set's rows is all at once: more memory, "
                        "the same result up to float rounding)")
    inits = p.add_mutually_exclusive_group()
    inits.add_argument("--full-batch-inits", metavar="SEEDS",
                       help="the seeds whose initialisations the fastest full-batch "
                            "configuration descends from again for B_2pt'(med), the estimate "
                            "of record (its median full-batch end; docs/prediction_rule.md, "
                            "session 41); default: the first 16 whole numbers from 1 that are "
                            "not the sweep's seed")
    inits.add_argument("--best-end-only", action="store_true",
                       help="skip those descents (they add about 30%% to the training "
                            "examples): B_2pt' alone, with the best full-batch end, a "
                            "diagnostic")
    p.add_argument("--ends-from", metavar="REPORT",
                   help="a validation report of this sweep with two_ends.json (validate "
                        "--rule-4, or two-ends): take its two measured ends, and its descents "
                        "from other initialisations where they are the same seeds, instead of "
                        "training again; refused, naming the part, where they differ")
    p.add_argument("--summary", default="reports/validation/summary.json",
                   help="the validated workloads' summary whose track record puts the error bar "
                        "on the estimate (python -m realnets track-record; default: "
                        "%(default)s; a missing file is said, not an error)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--no-progress", action="store_true")
    _distributed_flags(p, "two-point (process 0 writes; docs/trainer.md)")
    _add_branch_parser(sub)
    _add_plan_parsers(sub)
    return parser


def _add_plan_parsers(sub) -> None:
    """`throughput` and `plan` (realnets.planning, docs/plan.md)."""
    t = sub.add_parser("throughput", help="seconds per step against batch size and device count "
                                          "on the devices present, and a fitted model of it")
    t.add_argument("--workload", required=True,
                   help="a workload name or FILE.py:FUNCTION (an own workload)")
    t.add_argument("--batch-sizes", help="e.g. 16,64,256 or 16:4096; default: the workload's")
    t.add_argument("--devices", default="1", help="device counts, e.g. 1,2,4 (default 1)")
    t.add_argument("--optimizer", choices=("sgd", "momentum", "nesterov", "adam"),
                   help="default: the workload's")
    t.add_argument("--repeats", type=int, default=3, help="timed repeats per point (median)")
    t.add_argument("--seconds-per-repeat", type=float, default=1.0,
                   help="about how long each repeat runs")
    t.add_argument("--max-rows-per-device", type=int, default=4096)
    t.add_argument("--text-file", help="text for the text_transformer workload")
    t.add_argument("--format", choices=("table", "json"), default="table")
    t.add_argument("--out", help="also write the JSON record here (atomically), for plan "
                                 "--throughput")
    t.add_argument("--no-progress", action="store_true")

    p = sub.add_parser("plan", help="time to result and cost for each batch size and device "
                                    "count, the Pareto front and a recommendation")
    p.add_argument("--sweep", required=True, help="sweep directory (steps to result)")
    p.add_argument("--steps-from", choices=("sweep", "two-point"), default="sweep",
                   help="steps to result from the sweep's curve (default) or from its two-point "
                        "estimate, SWEEP/two_point.json (python -m realnets two-point: one batch "
                        "size swept is enough)")
    p.add_argument("--throughput", help="a file from `throughput --out` (default: measure now on "
                                        "1 device at the sweep's batch sizes)")
    p.add_argument("--price-per-device-hour", type=float, help="cost of one device for an hour")
    p.add_argument("--deadline", type=float, help="seconds: recommend the cheapest that meets it")
    p.add_argument("--budget", type=float, help="cost (device-hours without a price): recommend "
                                                "the fastest within it")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--no-progress", action="store_true")


def _add_branch_parser(sub) -> None:
    """`branch`: the local critical batch size by branching (realnets.sweeps.branching)."""
    b = sub.add_parser("branch", help="local critical batch size by branching from checkpoints "
                                      "of one run (Merrill et al. 2025)")
    b.add_argument("--workload", required=True)
    b.add_argument("--batch-size", type=int, required=True, help="B of the reference run")
    b.add_argument("--learning-rate", type=float, required=True,
                   help="the reference run's constant learning rate")
    b.add_argument("--optimizer", choices=("sgd", "momentum", "nesterov", "adam"),
                   help="default: the workload's")
    b.add_argument("--momentum", type=float,
                   help="momentum (Adam: beta1) in [0, 1); required by momentum, nesterov, adam")
    b.add_argument("--branch-steps", required=True,
                   help="steps of the reference run to branch at, e.g. 10,100,1000")
    b.add_argument("--multipliers", default="1,2,4,8",
                   help="batch-size multipliers k (1 is always added), e.g. 1,2,4,8,16")
    b.add_argument("--window-examples", type=int, required=True,
                   help="examples each branch trains on: a multiple of lcm(k) x batch-size")
    b.add_argument("--tolerance", type=float, default=0.05,
                   help="branch k keeps up when its loss <= (1 + tolerance) x k = 1's")
    b.add_argument("--lr-rule", choices=("linear", "sqrt"),
                   help="learning rate x k or x sqrt(k) (default: linear for SGD and momentum, "
                        "sqrt for Adam)")
    b.add_argument("--repeats", type=int, default=3,
                   help="windows per branch with their own data order; the loss is their mean")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--trial-id", type=int, default=0, help="the reference run's initialisation")
    b.add_argument("--eval-rows", type=int, default=4096,
                   help="training rows the loss is measured on")
    b.add_argument("--max-rows-per-device", type=int, default=4096)
    b.add_argument("--out", required=True, help="JSON file written (atomically)")
    b.add_argument("--no-progress", action="store_true")


def _distributed_flags(parser, what: str) -> None:
    """--coordinator, --num-processes, --process-id, --distributed-timeout: one command run on
    every host of a multi-host job (`realnets.cli.common.start_distributed`)."""
    parser.add_argument("--coordinator", help=f"HOST:PORT of process 0, for a multi-host {what}")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--distributed-timeout", type=int, default=300,
                        help="seconds to wait for every process to join")


def _summary_file(parser) -> None:
    """The optional positional summary file of `summary`, `track-record` and `headline`."""
    parser.add_argument("file", nargs="?", default="reports/validation/summary.json",
                        help="summary file written by validate (default: %(default)s)")
