"""The commands on sweeps (`realnets.sweeps`): `sweep` (run or resume, serially or on Ray),
`workloads`, `report`, `import-batch-science`, `repeat` and `branch`, with `sweep_config`, the
SweepConfig made from `sweep`'s flags."""

from __future__ import annotations

import math
from pathlib import Path

from nqm.validation import parse_batch_sizes, parse_optional_range
from nqm.curve import to_json
from realnets.cli.common import (_check_text_file, _log, _progress, _whole_list, is_writer,
                                 start_distributed)


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


def run_sweep_command(args) -> str:
    from realnets import workloads
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
    start_distributed(args)
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
            log=_log(args.no_progress),
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


def shortfall_text(paths: list[str], first: int, write_steps: str | None) -> str:
    """`python -m realnets shortfall`: the search's shortfall on sweeps, and the check against
    their own larger searches (`realnets.sweeps.shortfall_check`)."""
    from realnets.sweeps.shortfall_check import check_row, read_sweeps, table, write_steps_csv

    if first < 2:
        raise ValueError(f"--first must be >= 2, got {first}")
    if write_steps and not Path(write_steps).resolve().parent.is_dir():
        raise ValueError(f"--write-steps: the directory of {write_steps} does not exist")
    if write_steps and Path(write_steps).is_dir():
        raise ValueError(f"--write-steps: {write_steps} is a directory, not a file")
    sweeps = read_sweeps([Path(p) for p in paths])
    rows = [check_row(s, first) for s in sweeps]      # every sweep checked before any write
    if write_steps:
        write_steps_csv(Path(write_steps), sweeps)
    return table(rows)


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


def repeat_command(args) -> str:
    """`repeat`: the reruns of a sweep's winners (`realnets.sweeps.repeats`), then its report."""
    from realnets.sweeps.repeats import RepeatConfig, run_repeats
    from realnets.sweeps.runner import write_curve

    config = RepeatConfig(seeds=_whole_list(args.seeds, "seeds"), inits=args.inits,
                          step_cap=args.step_cap)
    start_distributed(args)
    say = _progress(args.no_progress)

    def done(block, records):
        steps = [r["steps_to_goal"] for r in records]
        say(f"B = {block.run.batch_size}, seed {block.run.seed}: steps to goal {steps}")

    run_repeats(Path(args.dir), config, on_block=done)
    if not is_writer():
        return f"reruns done; process 0 writes {Path(args.dir) / 'repeats.jsonl'} and the report"
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
    say = _progress(args.no_progress)
    result = branching.run_branching(workload.build(), settings, log=say)
    store.write_json_atomic(out, result.to_dict())
    return branching.render(result) + f"\nwritten: {out} ({time.perf_counter() - start:.1f} s)"
