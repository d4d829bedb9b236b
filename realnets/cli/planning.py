"""The planning commands (`realnets.planning`, docs/plan.md): `throughput` (seconds per step
measured against batch size and device count) and `plan` (time to result and cost, the Pareto
front and a recommendation)."""

from __future__ import annotations

import sys
from pathlib import Path

from nqm.validation import parse_batch_sizes
from nqm.curve import to_json
from realnets.cli.common import _check_text_file, _log, _progress


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
    say = _progress(args.no_progress)
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
            log=_log(args.no_progress))
    plan = make_plan(curve, throughput, args.price_per_device_hour,
                     args.deadline, args.budget, train_size=task.train_size,
                     two_point=two_point_curve)
    return to_json(plan.to_dict(), indent=1) if args.format == "json" else plan_table(plan)
