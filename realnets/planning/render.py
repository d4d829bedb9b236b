"""Text tables of a throughput record and a plan (the CLI prints them; JSON is `to_dict`)."""

from __future__ import annotations

from realnets.planning.plan import Plan
from realnets.planning.step_time import ThroughputRecord


def throughput_table(record: ThroughputRecord) -> str:
    m = record.model
    lines = [f"{'batch_size':>10} {'devices':>7} {'ms/step':>9} {'min':>9} {'max':>9} "
             f"{'model':>9} {'compile_s':>9}"]
    for p in record.points:
        model = float(m.seconds_per_step(p.batch_size, p.devices))
        lines.append(f"{p.batch_size:>10} {p.devices:>7} {p.seconds_per_step * 1e3:>9.4g} "
                     f"{p.spread[0] * 1e3:>9.4g} {p.spread[1] * 1e3:>9.4g} {model * 1e3:>9.4g} "
                     f"{p.compile_seconds:>9.3g}")
    where = record.platform
    if record.device_kind and record.device_kind.lower() != record.platform.lower():
        where += f" ({record.device_kind})"     # jax's CPU device_kind is "cpu" again
    lines += ["", f"{record.workload} ({record.optimizer}) on {where}, "
              f"{record.process_count} process(es)",
              f"model: {m.formula}",
              f"  fixed {m.fixed * 1e3:.4g} ms, per_example {m.per_example * 1e6:.4g} us, "
              f"allreduce {m.allreduce * 1e3:.4g} ms; relative error RMS {m.rms_relative_error:.1%}, "
              f"largest {m.max_relative_error:.1%}",
              f"excludes: {record.excludes}"]
    return "\n".join(lines)


def plan_table(plan: Plan) -> str:
    on_front = {(p.batch_size, p.devices) for p in plan.front}
    priced = plan.price_per_device_hour is not None
    ranged = plan.steps_from == "two-point"

    def span(p) -> str:
        lo = "?" if p.steps_lo is None else f"{p.steps_lo:.3g}"
        hi = "inf" if p.steps_hi is None else f"{p.steps_hi:.3g}"
        return f"{lo + '..' + hi:>15} "

    lines = [f"{'batch_size':>10} {'devices':>7} {'steps':>9} "
             + (f"{'16-84%':>15} " if ranged else "")
             + f"{'ms/step':>9} {'time_s':>10} "
             f"{'device_h':>10} " + (f"{'cost':>10} " if priced else "")
             + f"{'front':>5}  source"]
    for p in sorted(plan.points, key=lambda p: (p.batch_size, p.devices)):
        cost = f"{p.cost:>10.4g} " if priced else ""
        lines.append(f"{p.batch_size:>10} {p.devices:>7} {p.steps:>9.4g} "
                     + (span(p) if ranged else "")
                     + f"{p.seconds_per_step * 1e3:>9.4g} {p.time_to_result_s:>10.4g} "
                     f"{p.device_hours:>10.3g} {cost}"
                     f"{'*' if (p.batch_size, p.devices) in on_front else '':>5}  "
                     f"steps: {p.source}; step time: {p.step_time_source}")
    lines += ["", f"recommendation: {plan.recommendation.reason}",
              f"time to result excludes {plan.excludes}"]
    if plan.steps_note:
        lines.append(plan.steps_note)
    return "\n".join(lines)
