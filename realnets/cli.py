"""`python -m realnets {sweep, workloads, report, import-batch-science, validate, summary,
swap-optimizer, adam-basis, two-ends, miss-split, tuning-check, two-point, branch, throughput,
plan}`.

All logic lives in the library (`realnets.sweeps.runner`, `realnets.sweeps.report`,
`realnets.sweeps.batch_science`, `realnets.validation` and its report);
this module parses flags, calls it and prints. Bad input prints one line `error: ...` and exits 2.
Multi-host: run the same command on every host with `--coordinator HOST:PORT --num-processes N
--process-id I` (see the README).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from nqm.argparser import OneLineErrorParser
from nqm.validation import parse_batch_sizes, parse_optional_range, parse_range
from nqm.curve import to_json
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
    s.add_argument("--coordinator", help="HOST:PORT of process 0, for a multi-host sweep")
    s.add_argument("--num-processes", type=int, default=1)
    s.add_argument("--process-id", type=int, default=0)
    s.add_argument("--distributed-timeout", type=int, default=300,
                   help="seconds to wait for every process to join")
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

    m = sub.add_parser("summary", help="the validation summary (summary.json) as a Markdown table")
    m.add_argument("file", nargs="?", default="reports/validation/summary.json",
                   help="summary file written by validate (default: %(default)s)")
    m.add_argument("--rebuild", action="store_true",
                   help="first rewrite the file from the validation.json files beside it "
                        "(no measurement is rerun)")

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
    v.add_argument("--chunk-rows", type=int, help="rows per compiled call (default all)")
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
                   help="re-render OUT/validation.json if it was made with the same settings, "
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
                   help="then measure both ends on the network (two-ends) and split the "
                        "headline's miss (miss-split), so that the report and summary.json "
                        "carry rule 4, the rule of record (docs/prediction_rule.md, session 36); "
                        "needs the sweep's winners rerun (python -m realnets repeat)")
    v.add_argument("--no-progress", action="store_true")
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
    e.add_argument("--format", choices=("table", "json"), default="table")
    e.add_argument("--no-progress", action="store_true")
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
    t = sub.add_parser("tuning-check",
                       help="reports: the headline NQM's tuned curve against the engine's grid "
                            "search, batch size by batch size (writes nothing; "
                            "docs/prediction_rule.md, session 37)")
    t.add_argument("dirs", nargs="+", metavar="DIR",
                   help="validation report directories (holding validation.json)")
    t.add_argument("--format", choices=("table", "json"), default="table")
    p = sub.add_parser("two-point",
                       help="a sweep: B_crit by the two-point estimate B_2pt' from its smallest "
                            "batch size alone (the reference trial's reruns and full-batch "
                            "descents on the whole training set; no NQM, no other batch size "
                            "needed: docs/own_workload.md)")
    p.add_argument("dir", help="sweep directory with the reference trial's reruns (python -m "
                               "realnets repeat); the result goes to DIR/two_point.json")
    p.add_argument("--batch-size", type=int,
                   help="B_ref (default: the smallest batch size that reached the goal)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--no-progress", action="store_true")
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


def _goal(text: str | None) -> float | None:
    """--goal as a number (PILOT_GOAL for 'auto', set by the pilot later; None if absent: the
    workload's)."""
    from realnets.sweeps.records import PILOT_GOAL

    if text is None:
        return None
    if text.strip().lower() == "auto":
        return PILOT_GOAL
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"--goal must be a finite number or 'auto', got {text!r}")
    return value


def sweep_config(args):
    """SweepConfig from parsed flags, the workload's defaults filling what is not given
    (`SweepConfig.for_workload`)."""
    from realnets import workloads
    from realnets.sweeps.records import SweepConfig

    _check_text_file(args.text_file, workloads.get(args.workload))
    ranges = {field: parse_optional_range(getattr(args, flag.replace("-", "_")), flag)
              for field, flag in (("learning_rate", "lr-range"),
                                  ("one_minus_momentum", "one-minus-momentum-range"),
                                  ("final_lr_fraction", "final-lr-fraction-range"),
                                  ("decay_steps", "decay-steps-range"))}
    return SweepConfig.for_workload(
        args.workload, args.trials,
        batch_sizes=None if args.batch_sizes is None else parse_batch_sizes(args.batch_sizes),
        max_steps=args.max_steps, goal=_goal(args.goal), optimizer=args.optimizer, **ranges,
        eval_resolution=args.eval_resolution, seed=args.seed, vmap_trials=args.vmap_trials,
        max_rows_per_device=args.max_rows_per_device, full_trials=args.full_trials,
        noise_every=args.noise_every,
        text_file=None if args.text_file is None else str(Path(args.text_file).resolve()))


def _check_text_file(text_file: str | None, workload) -> None:
    if text_file is not None and workload.name != "text_transformer":
        raise ValueError("text-file applies only to --workload text_transformer")


def run_sweep_command(args) -> str:
    from realnets import workloads
    from realnets.training import mesh
    from realnets.sweeps import report
    from realnets.sweeps.pilot import with_pilot_goal
    from realnets.sweeps.runner import run_sweep

    if args.backend == "serial" and (args.ray_address or args.resources_per_block):
        raise ValueError("ray-address and resources-per-block need --backend ray")
    if args.backend == "ray":
        from realnets.cluster import ray_backend
        from realnets.cluster.resources import parse_resources

        if args.coordinator:
            raise ValueError("--backend ray and --coordinator exclude each other: Ray spreads "
                             "blocks of trials over hosts, --coordinator one trial's batch")
        resources = parse_resources(args.resources_per_block)
    if args.coordinator:
        if args.distributed_timeout < 1:
            raise ValueError(f"distributed-timeout must be >= 1 second, got {args.distributed_timeout}")
        mesh.initialize_distributed(args.coordinator, args.num_processes, args.process_id,
                                    timeout_seconds=args.distributed_timeout)
    elif args.num_processes != 1 or args.process_id != 0:
        raise ValueError("num-processes and process-id need --coordinator HOST:PORT (the address "
                         "of process 0)")
    config = sweep_config(args)
    if args.goal_min_steps is not None and not 1 <= args.goal_min_steps <= config.max_steps:
        raise ValueError(f"goal-min-steps must be in 1 .. max-steps ({config.max_steps}), got "
                         f"{args.goal_min_steps}")
    if config.text_file is not None:
        from realnets.workloads.datasets import load_text

        load_text(config.text_file)    # a bad file is a flag error before anything runs
    if args.backend == "ray":
        ray_backend.connect(args.ray_address)    # a dead address: one line, before any work
    try:
        config = with_pilot_goal(
            config, Path(args.out), lambda: workloads.get(config.workload).build(text_file=config.text_file),
            log=None if args.no_progress else lambda m: print(m, file=sys.stderr, flush=True),
            min_steps=args.goal_min_steps)
        executor = (None if args.backend == "serial" else
                    ray_backend.ray_executor(config, resources, progress=not args.no_progress))
        curve = run_sweep(config, Path(args.out), progress=not args.no_progress,
                          executor=executor)
    finally:
        if args.backend == "ray":
            ray_backend.disconnect()
    return report.render(curve, "table")


def workloads_text(fmt: str) -> str:
    from realnets.workloads import WORKLOADS

    described = [w.describe() for w in WORKLOADS.values()]
    if fmt == "json":
        return to_json(described, indent=1)
    blocks = []
    for d in described:
        s = d["search"]
        blocks.append("\n".join([
            f"{d['name']}",
            f"  data:        {d['data']}",
            f"  model:       {d['model']}",
            f"  goal:        {d['metric']}"
            f"{', by the pilot rule' if d['goal'] is None else ' <= ' + str(d['goal'])}"
            f"  ({d['goal_note']})",
            f"  optimizer:   {d['optimizer']}; search: learning rate {s['learning_rate']}, "
            f"1 - momentum {s['one_minus_momentum']}, final lr fraction "
            f"{s['final_lr_fraction'] or 'constant'}",
            f"  batch sizes: {','.join(map(str, d['batch_sizes']))}; budget {d['max_steps']} steps"]))
    return "\n\n".join(blocks)


def report_text(path: str, fmt: str) -> str:
    from realnets.sweeps import report
    from realnets.sweeps.curve import build_curve
    from realnets.sweeps.records import load_sweep, read_repeats

    config, records = load_sweep(Path(path))
    if not records:
        raise ValueError(f"sweep directory {path} has no finished trials yet")
    return report.render(build_curve(records, config, read_repeats(Path(path))), fmt)


def import_text(args) -> str:
    from realnets.sweeps import report
    from realnets import store
    from realnets.sweeps.batch_science import load_batch_science
    from realnets.sweeps.curve import curve_document

    curves = load_batch_science(args.path, goal=args.goal, metric=args.metric)
    if args.out:
        for curve in curves:
            c = curve.config
            name = "_".join(str(c.get(k)) for k in ("dataset", "model", "optimizer"))
            target = Path(args.out) / name
            target.mkdir(parents=True, exist_ok=True)
            store.write_json_atomic(target / "curve.json", curve_document(curve).to_dict())
    if args.format == "json":
        return to_json([curve_document(c).to_dict() for c in curves], indent=1)
    return "\n\n".join(report.render(c, args.format) for c in curves)


def validation_config(args):
    """ValidationConfig from parsed flags."""
    from realnets.validation.settings import ValidationConfig

    checkpoints = tuple(c.strip() for c in args.checkpoints.split(",") if c.strip())
    return ValidationConfig(
        batch_size=args.batch_size, checkpoints=checkpoints, top_k=args.top_k,
        lanczos_steps=args.lanczos_steps, slq_steps=args.slq_steps, slq_probes=args.slq_probes,
        floor_ratio=args.floor_ratio, sample_rows=args.sample_rows, noise_rows=args.noise_rows,
        chunk_rows=args.chunk_rows, loss_floor=args.loss_floor, seed=args.seed,
        bootstrap=args.bootstrap, target_rule=args.target_rule,
        branch_repeats=args.branch_repeats, transfer=not args.no_transfer,
        certify=not args.no_certify)


def validate_command(args, argv) -> str:
    import dataclasses
    import shlex
    import time

    from realnets import workloads
    from realnets.sweeps.records import read_repeats
    from realnets.validation import files, pipeline, report as validation_report
    from realnets.validation.comparison import comparison
    from realnets.validation.noise_free_match import can_add
    from realnets.validation.predictions import reference_nqm
    from realnets.validation.quadratic_path import complete, path_reading
    from realnets.validation.reconciliation import reconciliation
    from realnets.validation.rerun import ensure_sweep
    from realnets.validation.summary import SUMMARY_FILE, summary_entry, update_summary
    from realnets.validation.transfer import reading
    from ui.validation_charts import export_charts

    start = time.perf_counter()
    workload = workloads.get(args.workload)
    vcfg = validation_config(args)
    notes = None
    if args.notes:
        try:
            notes = Path(args.notes).read_text(encoding="utf-8")
        except OSError as err:
            raise ValueError(f"notes: cannot read {args.notes} ({err.strerror})") from None
    out = Path(args.out)
    sweep_dir = Path(args.sweep) if args.sweep else Path("sweeps") / workload.name
    say = (lambda _: None) if args.no_progress else (lambda m: print(m, file=sys.stderr, flush=True))
    if args.rule_4 and not (sweep_dir.is_dir() and read_repeats(sweep_dir)):
        raise ValueError(f"rule-4: no reruns of the winners in {sweep_dir}; run python -m "
                         f"realnets repeat {sweep_dir} --seeds 1,2,3,4,5,6,7,8,9,10,11,12,13,14,"
                         "15,16 --inits 2 first")
    doc = None
    if args.retune and args.reuse:
        raise ValueError("retune: give --retune or --reuse, not both (--retune rewrites what "
                         "--reuse would re-render)")
    if args.retune:
        doc = _retuned(out, workload, vcfg, sweep_dir, argv, say)
    elif args.reuse and (out / files.VALIDATION_FILE).exists():
        old = files.read_validation(out)
        # the same measurements whether or not a transfer is asked for: reuse them
        if (old.workload == workload.key
                and dataclasses.replace(old.settings, transfer=vcfg.transfer) == vcfg):
            old, sweep = _refreshed_measured(old, sweep_dir, say)
            if vcfg.transfer and (old.transfer is None or "quadratic_path" not in old.transfer
                                  or not complete(old.transfer["quadratic_path"])):
                say(f"reusing {out / files.VALIDATION_FILE}; running the "
                    + ("transfer" if old.transfer is None else "quadratic path") + " it lacks")
                doc = _add_transfer(old, workload, sweep_dir, sweep, argv, say)
            elif vcfg.transfer:
                # the table and the transfer's reading are functions of the rest
                path = old.transfer["quadratic_path"]
                transfer = {**old.transfer, "reading": reading(old.transfer, old.to_dict()),
                            "quadratic_path": {**path, "reading": path_reading(path)}}
                doc = dataclasses.replace(old, comparison=comparison(old.to_dict()),
                                          transfer=transfer)
                say(f"reusing {out / files.VALIDATION_FILE}")
            else:
                doc = _with_transfer_time(dataclasses.replace(
                    old, settings=vcfg, transfer=None, comparison=comparison(old.to_dict())), None)
                say(f"reusing {out / files.VALIDATION_FILE}"
                    + (" without its transfer" if old.transfer else ""))
            if doc.full_batch is None and sweep is None:
                say("rule 2 not added: it needs the sweep's trials")
            elif doc.full_batch is None and can_add(doc.to_dict()):
                say("running rule 2 (the noise-free match), which it lacks")
                doc = _add_noise_free(doc, workload, sweep_dir, sweep, vcfg, say)
            files.write_validation(out, doc)
    if doc is None:
        config, records = ensure_sweep(workload, sweep_dir, args.trials,
                                                progress=not args.no_progress, log=say)
        task = workload.build(text_file=config.text_file)
        made = pipeline.validate(task, config, records, vcfg, log=say,
                                 reference=reference_nqm(workload.name),
                                 repeats=read_repeats(sweep_dir))
        made["provenance"] = {"command": "python -m realnets " + shlex.join(argv),
                              "sweep": str(sweep_dir), "wall_seconds": time.perf_counter() - start}
        doc = files.ValidationDocument.from_dict(made)
        files.write_validation(out, doc)
    if args.rule_4:
        say("rule 4: both ends on the network (two-ends), then the split (miss-split)")
        _two_ends_of(out, str(sweep_dir), argv, say)
        _miss_split_of(out, argv, say)
    prov = doc.provenance or files.Provenance()
    as_dict = doc.to_dict()
    report = validation_report.write_report(out, as_dict, export_charts(out, as_dict), notes=notes,
                                            command=prov.command, wall_seconds=prov.wall_seconds)
    summary_path = Path(args.summary) if args.summary else out.resolve().parent / SUMMARY_FILE
    sides = files.side_records(out, as_dict)
    update_summary(summary_path, summary_entry(as_dict, sides))

    def number(x, width, digits):
        return f"{'nan' if x is None else format(float(x), f'.{digits}g'):>{width}}"

    def cell(x, digits=4):
        return "-" if x is None else format(float(x), f".{digits}g")

    lines = [f"{'reconciliation':<48} {'B':>10} {'se':>8} {'range':>19} {'ratio':>7}"]
    for row in reconciliation(as_dict, sides):
        value = (">=" if row["lower_bound"] else "") + cell(row["value"])
        span = "-" if row["lo"] is None else f"{cell(row['lo'])} .. {cell(row['hi'])}"
        lines.append(f"{row['estimate'][:48]:<48} {value:>10} {cell(row['se'], 2):>8} "
                     f"{span:>19} {cell(row['ratio'], 3):>7}")
    lines += ["", "diagnostics:", f"{'estimate':<76} {'checkpoint':>10} {'B':>10} {'ratio':>7}"]
    for row in doc.comparison:
        lines.append(f"{row['quantity']:<76} {row['checkpoint'] or '-':>10} "
                     f"{number(row['value'], 10, 4)} {number(row['ratio'], 7, 3)}")
    lines.append(f"report: {report}")
    lines.append(f"summary: {summary_path}")
    return "\n".join(lines)


def _retuned(out: Path, workload, vcfg, sweep_dir: Path, argv, say):
    """`validate --retune`: OUT's stored document with its NQM side tuned again under `vcfg`
    (`realnets.validation.retune`), the transfer and quadratic path run again on it, and the
    records beside it that belong to it (two_ends.json: rule 3 again, `two_ends.retune_two_ends`;
    miss_split.json: run again) rewritten; the document is written and returned. ValueError
    when OUT holds no document of this workload or its sweep is gone."""
    import dataclasses
    import shlex
    import time

    from realnets.sweeps.curve import build_curve
    from realnets.sweeps.records import read_repeats
    from realnets.validation import files, two_ends
    from realnets.validation.predictions import reference_nqm
    from realnets.validation.retune import check_settings, retune
    from realnets.validation.summary import summary_entry

    start = time.perf_counter()
    if not (out / files.VALIDATION_FILE).is_file():
        raise ValueError(f"retune: no {files.VALIDATION_FILE} in {out} to tune again")
    old = files.read_validation(out)
    if old.workload != workload.key:
        raise ValueError(f"retune: {out} holds a validation of {old.workload!r}, not "
                         f"{workload.key!r}")
    sides = files.side_records(out, old.to_dict())
    old, sweep = _refreshed_measured(old, sweep_dir, say, "--retune")
    if sweep is None:
        raise ValueError(f"retune: the sweep directory {sweep_dir} is needed (its trials)")
    config, records = sweep
    command = "python -m realnets " + shlex.join(argv)
    check_settings(old.settings, vcfg)
    batch_sizes = build_curve(records, config, read_repeats(sweep_dir)).batch_sizes
    doc = files.ValidationDocument.from_dict(retune(
        old.to_dict(), config, records, batch_sizes, vcfg, reference_nqm(workload.name), say))
    if vcfg.transfer:
        say("retune: the transfer and quadratic path again, with the new metaparameters")
        # the original command's phases and wall time stay; the retune's time is its own
        seconds, prov = doc.seconds, doc.provenance
        doc = _add_transfer(dataclasses.replace(doc, transfer=None), workload, sweep_dir, sweep,
                            argv, say)
        doc = dataclasses.replace(doc, seconds=seconds, provenance=prov)

    def stamped(d):
        return dataclasses.replace(d, provenance=dataclasses.replace(
            d.provenance or files.Provenance(), retuned=command,
            retune_seconds=time.perf_counter() - start))

    doc = stamped(doc)
    files.write_validation(out, doc)       # the miss split below reads it from OUT
    if sides["two_ends"] is not None:
        say("retune: two_ends.json's rule 3 again")
        as_dict = doc.to_dict()
        record = two_ends.retune_two_ends(sides["two_ends"], as_dict, config, records, log=say)
        _write_beside_report(out, files.TWO_ENDS_FILE,
                             {**record, "compared": two_ends.compared(summary_entry(as_dict))})
        if sides["miss_split"] is not None:
            say("retune: miss_split.json again")
            _miss_split_of(out, argv, say)
    doc = stamped(doc)
    files.write_validation(out, doc)
    return doc


def _refreshed_measured(old, sweep_dir: Path, say, flag: str = "--reuse"):
    """(document, (config, records)): a stored validation document with its measured part
    rebuilt from its sweep directory, trials and reruns (`realnets.sweeps.repeats`: reruns made
    after the validation give the measured B_crit an interval), and the sweep it read;
    (unchanged, None), with a line saying so, if the directory is gone. ValueError if the sweep
    is another study or has other points (resumed since)."""
    import dataclasses

    from realnets.sweeps.curve import build_curve
    from realnets.sweeps.records import load_sweep, read_repeats
    from realnets.validation.comparison import measured_summary
    from realnets.validation.files import made_from

    if not sweep_dir.is_dir():
        say(f"sweep directory {sweep_dir} not found: the stored measured curve is kept")
        return old, None
    config, records = load_sweep(sweep_dir)
    if not made_from(old.sweep_config, config.to_dict()):
        raise ValueError(f"sweep: {sweep_dir} is not the sweep this validation was made from "
                         f"(its config differs); rerun validate without {flag}")
    fresh = measured_summary(build_curve(records, config, read_repeats(sweep_dir)))
    if fresh["points"] != old.measured["points"]:
        raise ValueError(f"sweep: {sweep_dir}'s curve is not the one this validation was made "
                         f"from (trials were added since); rerun validate without {flag}")
    return dataclasses.replace(old, measured=fresh), (config, records)


def _add_transfer(old, workload, sweep_dir: Path, sweep, argv, say):
    """A validation document made without the transfer, or with a transfer whose quadratic path
    is missing or incomplete (`quadratic_path.complete`), with what it lacks run on its stored
    measurements
    (`realnets.validation.transfer`, `realnets.validation.quadratic_path`: the reference trial
    is retrained to its goal for the latter). `sweep`: (config, records) of the sweep it was
    made from, as `_refreshed_measured` read and checked it (None: the directory is missing)."""
    import dataclasses
    import shlex
    import time

    from realnets.sweeps.records import load_sweep
    from realnets.validation.comparison import comparison
    from realnets.validation.quadratic_path import path_settings, run_quadratic_path
    from realnets.validation.rerun import calibration_sample, reference_checkpoints
    from realnets.validation.transfer import reading, run_transfer

    start = time.perf_counter()
    # a missing directory: load_sweep's one line says so
    config, records = sweep if sweep is not None else load_sweep(sweep_dir)
    task = workload.build(text_file=config.text_file)
    settings = dataclasses.replace(old.settings, transfer=True)
    as_dict = {**old.to_dict(), "settings": settings.to_dict()}
    sample = calibration_sample(task, settings.sample_rows, settings.seed)
    command = "python -m realnets " + shlex.join(argv)
    if old.transfer is None:
        transfer = {**run_transfer(task, config, as_dict, sample, log=say), "command": command}
    else:
        transfer = {**old.transfer, "reading": reading(old.transfer, as_dict)}
    with_transfer = {**as_dict, "transfer": transfer}
    path_start = time.perf_counter()
    init = goal_params = None
    if path_settings(with_transfer, config):
        # the reference trial again, to its goal (validate's own rerun counts as its "rerun"
        # phase; here it is part of the transfer's time)
        init, goal_params = reference_checkpoints(task, config, records,
                                                  as_dict["calibration_run"])
    path = run_quadratic_path(task, config, with_transfer, init, goal_params, sample, log=say)
    transfer = {**transfer, "quadratic_path": {
        **path, "seconds": time.perf_counter() - path_start, "command": command}}
    doc = dataclasses.replace(old, settings=settings, transfer=transfer,
                              comparison=comparison({**as_dict, "transfer": transfer}))
    # a stored path this one replaces leaves the transfer's time (when it recorded its own)
    before = 0.0 if old.transfer is None else old.seconds.get("transfer", 0.0) - (
        (old.transfer.get("quadratic_path") or {}).get("seconds") or 0.0)
    return _with_transfer_time(doc, before + time.perf_counter() - start)


def _add_noise_free(doc, workload, sweep_dir: Path, sweep, vcfg, say):
    """A stored validation document with rule 2 added on its stored fits
    (`realnets.validation.noise_free_match`); its wall time grows by the time taken. `sweep`:
    (config, records) as `_refreshed_measured` read them; `vcfg`: the document's settings."""
    import dataclasses
    import time

    from realnets.sweeps.records import read_repeats
    from realnets.validation import files
    from realnets.validation.comparison import comparison
    from realnets.validation.noise_free_match import add_noise_free_prediction
    from realnets.validation.rerun import calibration_sample

    start = time.perf_counter()
    config, records = sweep
    task = workload.build(text_file=config.text_file)
    sample = calibration_sample(task, vcfg.sample_rows, vcfg.seed)
    added = add_noise_free_prediction(doc.to_dict(), task, config, records, sample, vcfg,
                                      log=say, repeats=read_repeats(sweep_dir))
    added["comparison"] = comparison(added)
    new = files.ValidationDocument.from_dict(added)
    took = time.perf_counter() - start     # the phase's time includes building the task
    prov = new.provenance
    if prov is not None and prov.wall_seconds is not None:
        prov = dataclasses.replace(prov, wall_seconds=prov.wall_seconds + took)
    return dataclasses.replace(new, provenance=prov,
                               seconds={**new.seconds, "noise_free_match": took})


def _with_transfer_time(doc, seconds: float | None):
    """`doc` with its transfer phase's time set to `seconds` (None: no such phase), its wall
    time moved by the same amount."""
    import dataclasses

    phases = {k: v for k, v in doc.seconds.items() if k != "transfer"}
    if seconds is not None:
        phases["transfer"] = seconds
    prov = doc.provenance
    if prov is not None and prov.wall_seconds is not None:
        moved = (seconds or 0.0) - doc.seconds.get("transfer", 0.0)
        prov = dataclasses.replace(prov, wall_seconds=prov.wall_seconds + moved)
    return dataclasses.replace(doc, seconds=phases, provenance=prov)


def _whole_list(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise ValueError(f"{name} must be whole numbers separated by commas, got {text!r}") from None


def repeat_command(args) -> str:
    """`repeat`: the reruns of a sweep's winners (`realnets.sweeps.repeats`), then its report."""
    from realnets.sweeps.repeats import RepeatConfig, run_repeats
    from realnets.sweeps.runner import write_curve

    config = RepeatConfig(seeds=_whole_list(args.seeds, "seeds"), inits=args.inits,
                          step_cap=args.step_cap)
    say = (lambda _: None) if args.no_progress else (lambda m: print(m, file=sys.stderr, flush=True))

    def done(block, records):
        steps = [r["steps_to_goal"] for r in records]
        say(f"B = {block.run.batch_size}, seed {block.run.seed}: steps to goal {steps}")

    run_repeats(Path(args.dir), config, on_block=done)
    write_curve(Path(args.dir))
    return report_text(args.dir, "table")


def branch_command(args) -> str:
    import time

    from realnets import store, workloads
    from realnets.sweeps import branching

    start = time.perf_counter()
    workload = workloads.get(args.workload)
    settings = branching.BranchSettings(
        batch_size=args.batch_size, learning_rate=args.learning_rate,
        branch_steps=_whole_list(args.branch_steps, "branch-steps"),
        window_examples=args.window_examples,
        multipliers=_whole_list(args.multipliers, "multipliers"),
        optimizer=args.optimizer or workload.optimizer, momentum=args.momentum,
        lr_rule=args.lr_rule, tolerance=args.tolerance, repeats=args.repeats, seed=args.seed,
        trial_id=args.trial_id, eval_rows=args.eval_rows,
        max_rows_per_device=args.max_rows_per_device, workload=workload.key)
    out = Path(args.out)
    if not out.parent.is_dir():
        raise ValueError(f"out: directory {out.parent} does not exist")
    say = (lambda _: None) if args.no_progress else (lambda m: print(m, file=sys.stderr, flush=True))
    result = branching.run_branching(workload.build(), settings, log=say)
    store.write_json_atomic(out, result.to_dict())
    return branching.render(result) + f"\nwritten: {out} ({time.perf_counter() - start:.1f} s)"


def throughput_command(args) -> str:
    from realnets import store, workloads
    from realnets.planning.render import throughput_table
    from realnets.planning.throughput import measure_throughput, parse_device_counts

    w = workloads.get(args.workload)
    sizes = (parse_batch_sizes(args.batch_sizes) if args.batch_sizes is not None
             else list(w.batch_sizes))
    devices = parse_device_counts(args.devices)
    if args.out and not Path(args.out).resolve().parent.is_dir():
        raise ValueError(f"out: directory {Path(args.out).resolve().parent} does not exist")
    _check_text_file(args.text_file, w)
    say = (lambda _: None) if args.no_progress else (lambda m: print(m, file=sys.stderr, flush=True))
    record = measure_throughput(w.build(text_file=args.text_file), w.key,
                                args.optimizer or w.optimizer, sizes, devices,
                                repeats=args.repeats, seconds_per_repeat=args.seconds_per_repeat,
                                max_rows_per_device=args.max_rows_per_device, log=say)
    if args.out:
        store.write_json_atomic(Path(args.out), record.to_dict())
    return to_json(record.to_dict(), indent=1) if args.format == "json" else throughput_table(record)


def plan_command(args) -> str:
    from realnets import workloads
    from realnets.planning.plan import check_request, make_plan, two_point_steps
    from realnets.planning.render import plan_table
    from realnets.planning.step_time import read_throughput
    from realnets.planning.throughput import fitting_batch_sizes, measure_throughput
    from realnets.sweeps.curve import build_curve
    from realnets.sweeps.records import load_sweep

    check_request(args.price_per_device_hour, args.deadline, args.budget)
    config, records = load_sweep(Path(args.sweep))
    if not records:
        raise ValueError(f"sweep directory {args.sweep} has no finished trials yet")
    record = None
    if args.steps_from == "two-point":
        from realnets import store
        from realnets.validation.files import TWO_POINT_FILE

        path = Path(args.sweep) / TWO_POINT_FILE
        if not path.is_file():
            raise ValueError(f"steps-from: no {path}; run python -m realnets two-point "
                             f"{args.sweep} first")
        record = store.read_json(path, "two-point record")
    throughput = read_throughput(Path(args.throughput)) if args.throughput else None
    task = workloads.get(config.workload).build(text_file=config.text_file)
    curve = build_curve(records, config)
    sizes = fitting_batch_sizes(config.batch_sizes, task.train_size)
    two_point_curve = None
    if record is not None:
        from realnets.validation.two_point import plan_curve

        two_point_curve = plan_curve(record, curve)
        sizes = [b for b, *_ in two_point_steps(two_point_curve, task.train_size)]
    if throughput is None:
        if not args.no_progress:
            print(f"no --throughput: measuring the step time on 1 device at B = "
                  f"{', '.join(map(str, sizes))}", file=sys.stderr, flush=True)
        throughput = measure_throughput(
            task, config.workload, config.optimizer, sizes, [1],
            max_rows_per_device=config.max_rows_per_device,
            log=None if args.no_progress else lambda m: print(m, file=sys.stderr, flush=True))
    plan = make_plan(curve, throughput, args.price_per_device_hour,
                     args.deadline, args.budget, train_size=task.train_size,
                     two_point=two_point_curve)
    return to_json(plan.to_dict(), indent=1) if args.format == "json" else plan_table(plan)


def swap_command(args) -> str:
    """`python -m realnets swap-optimizer DIR`: the report's headline NQM and the same NQM tuned
    as `--optimizer` (`realnets.validation.optimizer_swap`)."""
    import json

    from nqm.tuning import SearchSpace
    from realnets.validation.files import read_validation
    from realnets.validation.optimizer_swap import (comparison_rows, monte_carlo_steps,
                                                    own_prediction, swapped_prediction)

    lr = parse_range(args.lr_range, "--lr-range")
    if args.optimizer == "sgd":
        if args.one_minus_momentum_range:
            raise ValueError("--one-minus-momentum-range does not apply to --optimizer sgd")
        space = SearchSpace(learning_rate=lr)
    else:
        if not args.one_minus_momentum_range:
            raise ValueError(f"--one-minus-momentum-range is required for --optimizer "
                             f"{args.optimizer} (LO,HI within (0, 1])")
        space = SearchSpace(learning_rate=lr, one_minus_momentum=parse_range(
            args.one_minus_momentum_range, "--one-minus-momentum-range"))
    if not (math.isfinite(args.start_scale) and args.start_scale > 0):
        raise ValueError(f"--start-scale must be a number > 0, got {args.start_scale:g}")
    if args.monte_carlo is not None:
        if args.optimizer != "adam":
            raise ValueError("--monte-carlo applies to --optimizer adam only (the other NQM "
                             "families are exact)")
        if args.monte_carlo < 2:
            raise ValueError(f"--monte-carlo must be a whole number >= 2, got {args.monte_carlo}")
    directory = Path(args.dir)
    if not directory.is_dir():
        raise ValueError(f"dir {args.dir!r} is not a directory (a validation report's)")
    doc = read_validation(directory).to_dict()
    own = own_prediction(doc)
    swapped = swapped_prediction(doc, args.optimizer, space, decay=args.decay,
                                 start_scale=args.start_scale)
    swapped = swapped if args.decay else (swapped,)
    rows = comparison_rows(doc, *swapped)
    monte_carlo = (None if args.monte_carlo is None
                   else monte_carlo_steps(swapped[0], args.monte_carlo))
    measured = doc["measured"]["fit"]["b_crit"]
    if args.format == "json":
        return json.dumps({"workload": doc["workload"], "measured_b_crit": measured,
                           "reference": {"batch_size": own["match"]["batch_size"],
                                         "steps": own["match"]["steps"]},
                           "rows": rows, "swapped": swapped[0].to_dict(),
                           **({} if monte_carlo is None else {"monte_carlo": {
                               "runs": args.monte_carlo, "steps": list(monte_carlo)}}),
                           **({"decay": swapped[1].to_dict()} if args.decay else {})}, indent=1)

    def num(x):
        return "-" if x is None else f"{x:.4g}"

    width = max(24, *(len(r["optimizer"]) for r in rows))
    lines = [f"{doc['workload']} ({directory}): measured B_crit {num(measured)}; reference "
             f"B_ref {own['match']['batch_size']}, S_ref {own['match']['steps']}; checkpoint "
             f"{own['checkpoint']}",
             f"the swapped NQM's start: E[L](0) = {swapped[0].initial_loss:.4g}"
             + ("" if args.start_scale == 1.0 else f" (E[theta_i^2] x {args.start_scale:g})"),
             "steps at B = " + " ".join(str(b) for b in swapped[0].batch_sizes),
             f"{'optimizer':<{width}} {'target':>9} {'B_crit':>9} {'ratio':>7} {'S_min':>7}  steps"]
    for r in rows:
        lines.append(f"{r['optimizer']:<{width}} {num(r['target']):>9} {num(r['b_crit']):>9} "
                     f"{num(r['ratio']):>7} {num(r['s_min']):>7}  "
                     + " ".join("-" if s is None else str(s) for s in r["steps"]))
    if monte_carlo is not None:
        lines.append(f"real Adam, Monte Carlo ({args.monte_carlo} runs), at the swapped curve's "
                     "points: " + " ".join("-" if s is None else str(s) for s in monte_carlo))
    if args.decay:
        points = swapped[1].to_dict()["points"]
        for name, key in (("final fraction f", "final_lr_fraction"),
                          ("learning rate a", "learning_rate"),
                          ("momentum b" if args.optimizer != "adam" else "b1", "momentum")):
            values = [p[key] for p in points]
            lines.append(f"decay's {name} at B = ...: " + " ".join(
                "-" if v is None else f"{v:.4g}" for v in values))
        # the NQM's decay spans its own run: its length is the tuned steps to the target
        lines.append("decay's length T (steps) at B = ...: " + " ".join(
            "-" if p["steps"] is None else str(p["steps"]) for p in points))
    return "\n".join(lines)


def _report_sweep(doc, sweep: str | None, directory: Path):
    """(directory, config, records) of the sweep a validation report (read from `directory`)
    was made from: `sweep` (--sweep), else the one its provenance names, else sweeps/WORKLOAD;
    ValueError naming --sweep when it is missing or another sweep."""
    from realnets.sweeps.records import load_sweep
    from realnets.validation.files import made_from

    sweep_dir = Path(sweep or (doc.provenance.sweep if doc.provenance else None)
                     or Path("sweeps") / doc.workload)
    if not sweep_dir.is_dir():
        raise ValueError(f"sweep: {sweep_dir} is not a directory (the sweep {directory}'s report "
                         "was made from; pass --sweep)")
    config, records = load_sweep(sweep_dir)
    if not made_from(doc.sweep_config, config.to_dict()):
        raise ValueError(f"sweep: {sweep_dir} is not the sweep {directory}'s report was made "
                         "from (pass --sweep)")
    return sweep_dir, config, records


def adam_basis_command(args, argv) -> str:
    """`python -m realnets adam-basis DIR`: `realnets.validation.adam_basis` on a report, its
    record written to DIR/adam_basis.json."""
    import json
    import shlex
    import time

    from realnets import store, workloads
    from realnets.validation import adam_basis
    from realnets.validation.files import read_validation
    from realnets.validation.quadratic_path import steps_text
    from realnets.validation.report import ADAM_BASIS_FILE
    from realnets.validation.rerun import calibration_sample, reference_checkpoints

    start = time.perf_counter()
    directory = Path(args.dir)
    if not directory.is_dir():
        raise ValueError(f"dir {args.dir!r} is not a directory (a validation report's)")
    doc = read_validation(directory)
    as_dict = doc.to_dict()
    why = adam_basis.refusal(as_dict)
    if why:
        raise ValueError(why)
    _, config, records = _report_sweep(doc, args.sweep, directory)
    say = (lambda _: None) if args.no_progress else (lambda m: print(m, file=sys.stderr,
                                                                     flush=True))
    task = workloads.get(doc.workload).build(text_file=config.text_file)
    say("retraining the reference trial to its goal")
    init, goal_params = reference_checkpoints(task, config, records, as_dict["calibration_run"])
    sample = calibration_sample(task, doc.settings.sample_rows, doc.settings.seed)
    record = adam_basis.run_adam_basis(task, config, as_dict, init, goal_params, sample, log=say)
    record = {**record, "command": "python -m realnets " + shlex.join(argv),
              "wall_seconds": time.perf_counter() - start}
    store.write_json_atomic(directory / ADAM_BASIS_FILE, record)
    if args.format == "json":
        return json.dumps(record, indent=1)

    def num(x):
        return "-" if x is None else f"{x:.3g}"

    spec = record["spectrum"]
    lines = [f"{record['workload']} ({directory}): {record['num_params']} parameters, Hessian "
             f"eigenvalues {spec['bottom']:.3g} .. {spec['top']:.3g} ({spec['negative']} "
             f"negative), {spec['above_floor']} above the NQM's floor (NQM d = "
             f"{num(spec['nqm_dim'])}); target {record['target']:.4g}, lowest loss with the top "
             f"d only {num(record['top_d_floor'])}",
             f"{'B':>6} {'rate':>8} {'b1':>6} {'NQM':>5} {'sweep':>5} "
             f"{'q/weight':>11} {'q/eigen':>11} {'q/top d':>11} {'net/weight':>11} "
             f"{'net/eigen':>11} {'coord':>6} {'NQM/eig':>7} {'trunc':>6}"]
    for p in record["points"]:
        q, n = p["quadratic"], p["network"]
        lines.append(
            f"{p['batch_size']:>6} {p['learning_rate']:>8.3g} {p['momentum']:>6.3g} "
            f"{p['nqm_steps']:>5} {num(p['measured_steps']):>5} "
            f"{steps_text(q['per_weight']):>11} {steps_text(q['per_eigenvector']):>11} "
            f"{steps_text(q[adam_basis.TOP_D]) if adam_basis.TOP_D in q else '-':>11} "
            f"{steps_text(n['per_weight']):>11} {steps_text(n['per_eigenvector']):>11} "
            f"{num(p['coordinates']):>6} {num(p['nqm_over_eigenvector']):>7} "
            f"{num(p.get('truncation')):>6}")
    lines += [record["reading"], f"written: {directory / ADAM_BASIS_FILE} "
              f"({record['wall_seconds']:.0f} s); the report shows it once re-rendered "
              "(python -m realnets validate ... --reuse, with the report's own command)"]
    return "\n".join(lines)


def two_ends_command(args, argv) -> str:
    """`python -m realnets two-ends DIR ...`: `realnets.validation.two_ends` on each report (its
    record written to DIR/two_ends.json), or with --stored the stored records, as one table."""
    import json

    from realnets import store
    from realnets.validation import two_ends
    from realnets.validation.files import TWO_ENDS_FILE, VALIDATION_FILE, read_validation

    if args.sweep and len(args.dirs) > 1:
        raise ValueError("sweep: give --sweep with one DIR only")
    directories, say = _report_directories(args.dirs), _progress(args.no_progress)
    if args.stored and args.goal_metric:
        raise ValueError("goal-metric: runs on the stored records; give it without --stored")
    if args.curve:
        return _two_point_curve(directories, args.goal_metric, args.format)
    records, missing, goals = [], [], []
    for directory in directories:
        if args.goal_metric:
            records.append(_goal_metric(directory, args, say))
            goals.append(_sweep_goal(read_validation(directory).to_dict()))
            continue
        if args.stored:
            if (directory / TWO_ENDS_FILE).exists():
                records.append(store.read_json(directory / TWO_ENDS_FILE,
                                               "two-ends record"))
                goals.append(_sweep_goal(read_validation(directory).to_dict())
                             if (directory / VALIDATION_FILE).is_file() else None)
            else:
                missing.append(str(directory))
            continue
        record = _two_ends_of(directory, args.sweep, argv, say)
        records.append(record)
        goals.append(_sweep_goal(read_validation(directory).to_dict()))
    if args.format == "json":
        return json.dumps(records, indent=1)
    return (two_ends.table(records, _row_labels(records, goals))
            + (f"\nno {TWO_ENDS_FILE} in: {', '.join(missing)}" if missing else "")
            + ("" if args.stored or args.goal_metric or not records else
               _written_line(TWO_ENDS_FILE)))


def _two_ends_of(directory: Path, sweep: str | None, argv, say) -> dict:
    """`two_ends.run_two_ends` on one report (the reference trial retrained to its goal), its
    record written to DIR/two_ends.json and returned."""
    import shlex
    import time

    from realnets import workloads
    from realnets.sweeps.records import read_repeats
    from realnets.validation import two_ends
    from realnets.validation.files import TWO_ENDS_FILE, read_validation
    from realnets.validation.rerun import reference_checkpoints
    from realnets.validation.summary import summary_entry

    start = time.perf_counter()
    doc = read_validation(directory)
    sweep_dir, config, trials = _report_sweep(doc, sweep, directory)
    as_dict = doc.to_dict()
    task = workloads.get(doc.workload).build(text_file=config.text_file)
    say(f"{directory}: retraining the reference trial to its goal")
    _, goal_params = reference_checkpoints(task, config, trials, as_dict["calibration_run"])
    record = two_ends.run_two_ends(task, config, trials, as_dict, goal_params,
                                   read_repeats(sweep_dir), log=say)
    record = {**record, "compared": two_ends.compared(summary_entry(as_dict)),
              "command": "python -m realnets " + shlex.join(argv),
              "wall_seconds": time.perf_counter() - start}
    _write_beside_report(directory, TWO_ENDS_FILE, record)
    return record


def _miss_split_of(directory: Path, argv, say) -> dict:
    """`miss_split.run_split` on one report with its two_ends.json, written to
    DIR/miss_split.json and returned; ValueError when the two_ends.json was not made from the
    report's document."""
    import shlex

    from realnets.validation import miss_split
    from realnets.validation.files import (MISS_SPLIT_FILE, TWO_ENDS_FILE, VALIDATION_FILE,
                                           read_validation, side_records)

    doc = read_validation(directory).to_dict()
    kept = side_records(directory, doc)
    if kept["two_ends"] is None:
        raise ValueError(f"dir {directory}: its {TWO_ENDS_FILE} was not made from its "
                         f"{VALIDATION_FILE} (an earlier validation, or unreadable): rerun "
                         f"python -m realnets two-ends {directory}")
    record = miss_split.run_split(doc, kept["two_ends"], log=say)
    record["command"] = "python -m realnets " + shlex.join(argv)
    _write_beside_report(directory, MISS_SPLIT_FILE, record)
    return record


def _two_point_curve(directories, goal_metric: bool, fmt: str) -> str:
    """`two-ends DIR ... --curve`: `realnets.validation.two_point_curve.check` on each report with
    a two_ends.json, as one table (nothing is run or written)."""
    import json

    from realnets import store
    from realnets.validation import two_point_curve
    from realnets.validation.files import (TWO_ENDS_FILE, VALIDATION_FILE, read_validation,
                                           side_records)

    if goal_metric:
        raise ValueError("curve: runs nothing; give it without --goal-metric")
    records, goals, missing = [], [], []
    for directory in directories:
        if not (directory / TWO_ENDS_FILE).exists() or not (directory / VALIDATION_FILE).is_file():
            missing.append(str(directory))
            continue
        doc = read_validation(directory).to_dict()
        kept = side_records(directory, doc)
        records.append(two_point_curve.check(
            store.read_json(directory / TWO_ENDS_FILE, "two-ends record"), doc,
            kept["miss_split"]))
        goals.append(_sweep_goal(doc))
    if fmt == "json":
        return json.dumps(records, indent=1)
    return (two_point_curve.table(records, _row_labels(records, goals))
            + (f"\nno {TWO_ENDS_FILE} or {VALIDATION_FILE} in: {', '.join(missing)}"
               if missing else ""))


def two_point_command(args, argv) -> str:
    """`python -m realnets two-point DIR`: `realnets.validation.two_point.estimate` on a sweep, its
    record written to DIR/two_point.json. Inputs are checked before any training."""
    import json
    import shlex
    import time

    from realnets import store, workloads
    from realnets.sweeps.records import load_sweep, read_repeats
    from realnets.validation import two_point
    from realnets.validation.files import TWO_POINT_FILE

    start = time.perf_counter()
    directory = Path(args.dir)
    config, records = load_sweep(directory)
    repeats = read_repeats(directory)
    two_point.check_inputs(config, records, repeats, args.batch_size)
    task = workloads.get(config.workload).build(text_file=config.text_file)
    record = two_point.estimate(task, config, records, repeats, args.batch_size,
                                log=_progress(args.no_progress))
    record = {**record, "command": "python -m realnets " + shlex.join(argv),
              "wall_seconds": time.perf_counter() - start}
    store.write_json_atomic(directory / TWO_POINT_FILE, record)
    if args.format == "json":
        return json.dumps(record, indent=1)
    return two_point.text(record) + f"\nwritten: {directory / TWO_POINT_FILE}"


def _sweep_goal(doc: dict) -> float | None:
    """The goal of the sweep a validation document (as a dict) was made from."""
    return doc.get("sweep_config", {}).get("goal")


def _row_labels(records: list[dict], goals: list) -> list[str]:
    """The tables' workload names for records made from sweeps with `goals` (one each): with the
    goal where a workload and optimizer come twice (`summary.workload_labels`)."""
    from realnets.validation.summary import workload_labels

    return workload_labels([{"workload": r["workload"], "optimizer": r["optimizer"], "goal": g}
                            for r, g in zip(records, goals)])


def _report_directories(dirs: list[str]) -> list[Path]:
    """The DIR arguments as paths, each checked to be a directory (ValueError naming it)."""
    for d in dirs:
        if not Path(d).is_dir():
            raise ValueError(f"dir {d!r} is not a directory (a validation report's)")
    return [Path(d) for d in dirs]


def _progress(no_progress: bool):
    """Where progress lines go: stderr, or nowhere with --no-progress."""
    return (lambda _: None) if no_progress else (lambda m: print(m, file=sys.stderr, flush=True))


def _write_beside_report(directory: Path, name: str, record: dict) -> None:
    """A record written beside a validation report (atomically), and the report's entry in the
    summary.json beside its directory refreshed (`summary.refresh_summary`)."""
    from realnets import store
    from realnets.validation.summary import refresh_summary

    store.write_json_atomic(directory / name, record)
    refresh_summary(directory)


def _written_line(name: str) -> str:
    return (f"\nwritten: {name} in each directory (and its summary.json entry, where one sits "
            "beside it); report.md shows it once re-rendered (python -m realnets validate ... "
            "--reuse, with the report's own command)")


def miss_split_command(args, argv) -> str:
    """`python -m realnets miss-split DIR ...`: `realnets.validation.miss_split` on each report
    with a two_ends.json (its record written to DIR/miss_split.json), or with --stored the stored
    records, as one table. A DIR without the needed file is named below the table."""
    import json

    from realnets import store
    from realnets.validation import miss_split
    from realnets.validation.files import (MISS_SPLIT_FILE, TWO_ENDS_FILE, VALIDATION_FILE,
                                           read_validation, side_records)

    directories, say = _report_directories(args.dirs), _progress(args.no_progress)
    needed = MISS_SPLIT_FILE if args.stored else TWO_ENDS_FILE
    records, missing = [], [str(d) for d in directories if not (d / needed).exists()]
    stale, goals = [], []
    for directory in directories:
        if str(directory) in missing:
            continue
        doc = read_validation(directory).to_dict()
        kept = side_records(directory, doc)
        goals.append(_sweep_goal(doc))
        if args.stored:
            if kept["miss_split"] is None:
                stale.append(str(directory))
            records.append(store.read_json(directory / needed, "miss-split record"))
            continue
        records.append(_miss_split_of(directory, argv, say))
    if args.format == "json":
        return json.dumps(records, indent=1)
    return (miss_split.table(records, _row_labels(records, goals))
            + (f"\nno {needed} in: {', '.join(missing)}" if missing else "")
            + (f"\nnot made from the directory's {VALIDATION_FILE} or its {TWO_ENDS_FILE} "
               f"(left out of the summary, report and app): {', '.join(stale)}"
               if stale else "")
            + ("" if args.stored or not records else _written_line(MISS_SPLIT_FILE)))


def tuning_check_command(args) -> str:
    """`python -m realnets tuning-check DIR ...`: `realnets.validation.tuning_check` on each
    report's headline tuned curve, as one table (or JSON); nothing is written."""
    import json

    from realnets.validation import tuning_check
    from realnets.validation.files import read_validation, side_records

    directories = _report_directories(args.dirs)
    docs = [read_validation(d).to_dict() for d in directories]
    sides = [side_records(d, doc) for d, doc in zip(directories, docs)]
    records = [tuning_check.check_report(doc, side["two_ends"], side["miss_split"])
               for doc, side in zip(docs, sides)]
    if args.format == "json":
        return json.dumps(records, indent=1)
    return tuning_check.table(records, _row_labels(records, [_sweep_goal(d) for d in docs]))


def _goal_metric(directory: Path, args, say) -> dict:
    """A stored two_ends record with its `goal_metric` diagnostic added (and written back)."""
    from realnets import store, workloads
    from realnets.sweeps.curve import build_curve
    from realnets.validation import two_ends
    from realnets.validation.files import TWO_ENDS_FILE, read_validation

    record = store.read_json(directory / TWO_ENDS_FILE, "two-ends record")
    doc = read_validation(directory)
    _, config, trials = _report_sweep(doc, args.sweep, directory)
    task = workloads.get(doc.workload).build(text_file=config.text_file)
    say(f"{directory}: the fastest whole-set descent with the validation metric")
    got = two_ends.goal_metric_descent(task, config, record, doc.settings.chunk_rows)
    largest = [p for p in build_curve(trials, config).points if p.reached][-1]
    got["largest_batch"] = {"batch_size": largest.batch_size, "steps": largest.steps}
    got["reading"] = two_ends.goal_metric_reading(record["full_set"]["steps"],
                                                  got["steps_to_goal"], largest.steps)
    record = {**record, "goal_metric": got}
    store.write_json_atomic(directory / TWO_ENDS_FILE, record)
    return record


def summary_text(path: str, rebuild: bool = False) -> str:
    """`python -m realnets summary`: the summary file as the docs' Markdown table (rebuilt first
    from the validation documents beside it with `rebuild`)."""
    from realnets.validation.summary import (read_summary, rebuild_summary, reruns_table,
                                             rule_2_table, summary_table, two_ends_table)

    file = Path(path)
    if rebuild:
        if not file.parent.is_dir():
            raise ValueError(f"summary file {path!r}: its directory does not exist")
        rebuild_summary(file)
    if not file.is_file():
        raise ValueError(f"summary file {path!r} does not exist (python -m realnets validate "
                         "writes one beside its --out directory)")
    entries = read_summary(file)
    if not entries:
        raise ValueError(f"summary file {path!r} holds no workloads")
    reruns, rule_2 = reruns_table(entries), rule_2_table(entries)
    ends = two_ends_table(entries)
    return (summary_table(entries)
            + (f"\n\nThe winners rerun under other seeds:\n\n{reruns}" if reruns else "")
            + (f"\n\nRule 2 and the two-point estimate (docs/prediction_rule.md), beside the "
               f"headline:\n\n{rule_2}"
               if rule_2 else "")
            + (f"\n\nBoth ends on the whole training set (python -m realnets two-ends) and "
               f"where the headline's miss sits (python -m realnets miss-split):\n\n{ends}"
               if ends else ""))


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        if args.command == "sweep":
            text = run_sweep_command(args)
        elif args.command == "workloads":
            text = workloads_text(args.format)
        elif args.command == "report":
            text = report_text(args.dir, args.format)
        elif args.command == "branch":
            text = branch_command(args)
        elif args.command == "throughput":
            text = throughput_command(args)
        elif args.command == "plan":
            text = plan_command(args)
        elif args.command == "validate":
            text = validate_command(args, list(sys.argv[1:] if argv is None else argv))
        elif args.command == "repeat":
            text = repeat_command(args)
        elif args.command == "summary":
            text = summary_text(args.file, args.rebuild)
        elif args.command == "swap-optimizer":
            text = swap_command(args)
        elif args.command == "two-ends":
            text = two_ends_command(args, list(sys.argv[1:] if argv is None else argv))
        elif args.command == "miss-split":
            text = miss_split_command(args, list(sys.argv[1:] if argv is None else argv))
        elif args.command == "tuning-check":
            text = tuning_check_command(args)
        elif args.command == "two-point":
            text = two_point_command(args, list(sys.argv[1:] if argv is None else argv))
        elif args.command == "adam-basis":
            text = adam_basis_command(args, list(sys.argv[1:] if argv is None else argv))
        else:
            text = import_text(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished trials are saved; rerun the same command to resume",
              file=sys.stderr)
        return 130
    print(text)
    return 0
