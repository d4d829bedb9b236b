"""Steps per second of the realnets trainer against a bare jit + optax loop, and the gain of
vmapped trials.

Run: `python benchmarks/bench_trainer.py` (add `--quick` for a run of about a minute). Everything
is measured in this run on one device (the first JAX sees) and printed as ratios against a
baseline measured in the same run; nothing here is asserted by the test suite. Repeats are
interleaved (every row runs once per round, in a new order each round) and the median is printed
with the range, because a busy machine slows every row alike only when they take turns. The
overhead is also given as the median over rounds of the round's own ratio to the baseline
("paired"), which cancels the slow drift of this machine's speed between rounds, and in process CPU
time.

1. Harness overhead: `realnets.training.trainer.run_trials` with 1 trial, momentum SGD, a fixed number of
   steps and an unreachable goal (-1: the whole budget runs) against a bare loop on the same
   model, batch size, data and optimizer: `jax.jit` of `value_and_grad` + `optax.sgd` with
   momentum and the trainer's linear-decay schedule (state donated), batches of random indices
   (epoch permutations) gathered in numpy and `device_put`, and the validation set evaluated
   after the same steps as the trainer (1, 2, 4, ..., N; a plain jitted `eval_fn`, result to
   the host): the BASELINE. The harness is run_trials doing the bare loop's work (the noise
   scale off): its overhead is the cost of the loop, data feed, vmapped trials and bookkeeping.
   Also shown: the bare loop without evaluations, and run_trials measuring the gradient noise
   scale, which the bare loop does not do, at its default cadence (every step: on one device the
   two half-batch gradients) and every 8th step, so that the cost of that measurement is seen
   apart. mnist_mlp at B = 16 and 256; mnist_cnn at B = 64 in the full run.
2. Vmapped trials: K = 8 trials of one batch size in one `run_trials` call against the same 8
   trials in 8 calls, the same steps, default cadence; mnist_mlp, B = 16 and 256.

How the trainer is timed: `run_trials` calls `on_eval(step)` after each evaluation, once the
step's results are on the host, so the time from the call at step 1 to the call at step N is the
training loop alone (steps 2..N and the evaluations among them), with no compilation in it; the
bare loop is timed over the same steps 2..N. What a call spends outside that window (tracing and
compiling its programs, the first step and evaluation, the records) is printed as the per-call
fixed cost. `run_trials` reuses its compiled programs across calls in one process
(`realnets.training.step.compile_steps` is cached), so only a program's first call compiles; the
benchmark also turns on JAX's persistent compilation cache in a temporary directory (deleted at
the end) so that its repeats never compile. The CPU column is process CPU time (all threads),
less sensitive than wall time to other jobs on the machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from realnets.training import mesh as meshlib
from realnets import workloads
from realnets.training.step import Metaparameters, StepConfig, compile_steps, groups_for, init_states
from realnets.training.trainer import (BatchStream, RunConfig, TrialSpec,
                              eval_steps, microbatches_for, run_trials)

LEARNING_RATE, MOMENTUM = 0.01, 0.9     # small enough that no trial diverges and stops early
UNREACHABLE_GOAL = -1.0                  # error rates are >= 0: every trial runs its whole budget
VMAP_TRIALS = 8
SPARSE_NOISE_EVERY = 8                   # the sparser cadence shown beside the default
HARNESS: dict = {}                       # (workload, B) -> overheads of the harness and default


class Timing(NamedTuple):
    """Wall and process CPU seconds (CPU: all threads of this process, XLA's included)."""

    wall: float
    cpu: float


def now() -> Timing:
    return Timing(time.perf_counter(), time.process_time())


def since(start: Timing) -> Timing:
    end = now()
    return Timing(end.wall - start.wall, end.cpu - start.cpu)


class EpochSampler:
    """The bare loop's batches: epochs of a seeded permutation, gathered rows (no sort)."""

    def __init__(self, train: dict, batch_size: int, seed: int):
        self.train, self.batch_size = train, batch_size
        self.size = int(next(iter(train.values())).shape[0])
        self.rng = np.random.default_rng(seed)
        self.order, self.pos = np.empty(0, np.int64), 0

    def next(self) -> dict:
        if self.pos + self.batch_size > self.order.size:
            self.order, self.pos = self.rng.permutation(self.size), 0
        idx = self.order[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        return {k: v[idx] for k, v in self.train.items()}


# --- the baseline: a bare jit + optax loop ------------------------------------------------------

def bare_step(task, decay_steps: int):
    """One momentum-SGD step with the trainer's optimizer (optax heavy-ball momentum, the rate
    on a linear schedule over the budget; here from LEARNING_RATE to itself, as the trials'
    final fraction is 1), jitted with the state donated: the plain idiom."""
    schedule = optax.linear_schedule(LEARNING_RATE, LEARNING_RATE, decay_steps)
    optimizer = optax.sgd(schedule, momentum=MOMENTUM)

    def init(key):
        params = task.init_params(key)
        return params, optimizer.init(params)

    def step(state, batch):
        params, opt_state = state
        loss, grads = jax.value_and_grad(task.loss_fn)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    return jax.jit(init), jax.jit(step, donate_argnums=0)


def bare_eval(task):
    """The bare loop's evaluation: the task's eval_fn on the whole validation set, jitted."""
    return jax.jit(task.eval_fn)


def time_bare(task, init, step, batch_size, steps, device, seed=0, evaluate=None, val=None,
              eval_at=()) -> Timing:
    """Steps 2..N of the bare loop (step 1 is taken and waited for first, like the trainer's
    window, which opens after its step 1); with `evaluate`, the validation metric is computed
    and brought to the host after each step in `eval_at` (as a hand-written loop counting
    steps to a goal would)."""
    sampler = EpochSampler(task.train, batch_size, seed)
    draw = lambda: {k: jax.device_put(v, device) for k, v in sampler.next().items()}  # noqa: E731
    eval_at = set(eval_at)
    state = init(jax.random.key(seed))
    state, loss = step(state, draw())
    loss.block_until_ready()
    start = now()
    for t in range(2, steps + 1):
        state, loss = step(state, draw())
        if evaluate is not None and t in eval_at:
            np.asarray(evaluate(state[0], val)["metric_sum"])
    loss.block_until_ready()
    return since(start)


# --- the trainer's own step, outside run_trials --------------------------------------------------

def trainer_step_config(batch_size: int, steps: int, n_dev: int = 1) -> StepConfig:
    """The StepConfig run_trials builds for this batch size (default max_rows_per_device)."""
    groups = groups_for(n_dev, batch_size)
    max_rows = run_config(batch_size, steps, 1.0).max_rows_per_device
    micro = microbatches_for(batch_size // groups, max_rows)
    return StepConfig(optimizer="momentum", groups=groups, microbatches=micro)


def one_trial_hps(steps: int, trials: int = 1) -> Metaparameters:
    """The trials' metaparameters as run_trials builds them (a constant rate over `steps`)."""
    full = lambda v: jnp.full((trials,), v, jnp.float32)  # noqa: E731
    return Metaparameters(full(LEARNING_RATE), full(1.0 - MOMENTUM), full(1.0), full(steps))


def compiled_trainer_step(task, batch_size, steps, mesh):
    """The trainer's steps as run_trials builds them: (the compiled measuring train step, for
    XLA's cost analysis; the jitted eval step; a function making fresh 1-trial states; hps; the
    placed validation set with its mask)."""
    config = trainer_step_config(batch_size, steps, mesh.devices.size)
    train, evaluate = compile_steps(task.loss_fn, task.eval_fn, config, mesh)
    hps = jax.device_put(one_trial_hps(steps), meshlib.replicated(mesh))
    keys = jnp.stack([jax.random.key(0)])
    make_states = lambda: init_states(task.init_params, config, keys, hps)  # noqa: E731
    example = meshlib.place_batch(EpochSampler(task.train, batch_size, 0).next(), mesh)
    train_c = train.lower(make_states(), hps, example).compile()     # for XLA's cost analysis
    val = dict(task.val, mask=np.ones(next(iter(task.val.values())).shape[0], np.float32))
    val = meshlib.place_batch(val, mesh)
    return train_c, evaluate, make_states, hps, val


def time_eval(evaluate, states, val, repeats: int) -> float:
    """Seconds per evaluation of the validation set, result brought to the host (as run_trials)."""
    np.asarray(evaluate(states, val)["metric_sum"])
    start = time.perf_counter()
    for _ in range(repeats):
        np.asarray(evaluate(states, val)["metric_sum"])
    return (time.perf_counter() - start) / repeats


def host_batch_cost(task, batch_size, mesh, device, repeats: int = 300) -> tuple[float, float]:
    """Seconds per step of host batch preparation: the trainer's (BatchStream.next, place_batch)
    and the bare loop's (permutation slice, gather, device_put)."""
    stream = BatchStream(task, batch_size, 0)
    sampler = EpochSampler(task.train, batch_size, 0)
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(meshlib.place_batch(stream.next(), mesh))
    t_trainer = (time.perf_counter() - start) / repeats
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready({k: jax.device_put(v, device) for k, v in sampler.next().items()})
    return t_trainer, (time.perf_counter() - start) / repeats


def cost(compiled) -> tuple[float, float]:
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    return (float(analysis.get("flops", float("nan"))),
            float(analysis.get("bytes accessed", float("nan"))))


# --- run_trials, timed from its own evaluation callbacks ------------------------------------------

class Call(NamedTuple):
    total: float        # wall seconds of the whole call
    loop: Timing        # from on_eval at step 1 to on_eval at step N: steps 2..N and their evals
    steps: int          # N - 1

    @property
    def fixed(self) -> float:
        return self.total - self.loop.wall


def timed_run_trials(task, config: RunConfig, trials: list[TrialSpec], devices) -> Call:
    marks = []
    start = time.perf_counter()
    records = run_trials(task, config, trials, devices=devices,
                         on_eval=lambda step: marks.append((step, now())))
    total = time.perf_counter() - start
    short = [r for r in records if r["steps_run"] != config.max_steps]
    if short:
        raise RuntimeError(f"trial(s) stopped before the budget: {short[0]['reason']}")
    (s0, t0), (s1, t1) = marks[0], marks[-1]
    return Call(total, Timing(t1.wall - t0.wall, t1.cpu - t0.cpu), s1 - s0)


def run_config(batch_size, steps, resolution) -> RunConfig:
    return RunConfig(batch_size=batch_size, max_steps=steps, goal=UNREACHABLE_GOAL,
                     optimizer="momentum", eval_resolution=resolution)


# --- printing --------------------------------------------------------------------------------------

def med(values):
    return statistics.median(values)


def spread(values, scale=1.0, fmt="{:.0f}"):
    return "[" + fmt.format(min(values) * scale) + "-" + fmt.format(max(values) * scale) + "]"


def header(devices):
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    import jaxlib
    print(f"jax {jax.__version__} (jaxlib {jaxlib.__version__}), optax {optax.__version__}; "
          f"backend {jax.default_backend()}")
    print(f"devices seen: {len(jax.devices())} ({jax.devices()[0].device_kind}); measuring on "
          f"{devices[0]}")
    print(f"cores: os.cpu_count() = {os.cpu_count()}, usable by this process = {affinity}; "
          f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min)")
    if load[0] > 0.5 * affinity:
        print("  note: the machine is busy; timings are noisy (medians of interleaved repeats, "
              "ranges in brackets)")


# --- section 1 ----------------------------------------------------------------------------------

def overhead_case(name, task, batch_size, steps, repeats, devices, budget_steps, resolution,
                  first):
    """Prints one case of section 1; returns the compile time of the first call (s) or None."""
    device = devices[0]
    mesh = meshlib.data_mesh(batch_size, devices)
    sparse_cfg = run_config(batch_size, steps, 1.0)
    trial = [TrialSpec(0, LEARNING_RATE, MOMENTUM)]

    # Warm-up: the first run_trials call of this shape compiles (cold); the bare step and the
    # trainer's step are compiled once here and reused.
    bare_init, bare = bare_step(task, steps)
    bare_c = bare.lower(bare_init(jax.random.key(0)),
                        {k: jax.device_put(v, device)
                         for k, v in EpochSampler(task.train, batch_size, 0).next().items()}).compile()
    try:
        cold = timed_run_trials(task, sparse_cfg, trial, devices)
    except Exception as error:   # report it and time the baseline alone
        times = [time_bare(task, bare_init, bare_c, batch_size, steps, device).wall / (steps - 1)
                 for _ in range(repeats)]
        print(f"\n{name}, B = {batch_size}, {steps} steps: bare jit + optax loop "
              f"{1 / med(times):.0f} steps/s {spread([1 / t for t in times])}; run_trials FAILS: "
              f"{type(error).__name__} {str(error)[:120]} (jax's conv batching rule under the "
              f"per-group vmap with mesh-sharded state; see the report)")
        return None
    train_c, evaluate, make_states, hps, val = compiled_trainer_step(task, batch_size, steps,
                                                                            mesh)

    eval_at = eval_steps(steps, 1.0)
    plain_eval = bare_eval(task)
    rows = {k: [] for k in ("bare", "bare_evals", "noise_off", "default", "noise_sparse")}
    fixed = []
    runs = {
        "bare": lambda: time_bare(task, bare_init, bare_c, batch_size, steps, device),
        "bare_evals": lambda: time_bare(task, bare_init, bare_c, batch_size, steps, device,
                                        evaluate=plain_eval, val=val, eval_at=eval_at),
        "noise_off": lambda: timed_run_trials(task, replace(sparse_cfg, noise_every=0), trial,
                                              devices),
        "default": lambda: timed_run_trials(task, sparse_cfg, trial, devices),
        "noise_sparse": lambda: timed_run_trials(
            task, replace(sparse_cfg, noise_every=SPARSE_NOISE_EVERY), trial, devices),
    }
    order = list(runs)
    for r in range(repeats):
        # a new order each round, so that no row always runs first or after the same row
        for key in np.random.default_rng(r).permutation(order):
            out = runs[key]()
            if isinstance(out, Call):
                fixed.append(out.fixed)
                out = out.loop
            rows[key].append(out)

    t_eval = time_eval(evaluate, make_states(), val, repeats=10 if steps < 500 else 20)
    host_trainer, host_bare = host_batch_cost(task, batch_size, mesh, device)
    flops_t, bytes_t = cost(train_c)
    flops_b, bytes_b = cost(bare_c)

    per_step = {k: [t.wall / (steps - 1) for t in v] for k, v in rows.items()}
    cpu_step = {k: [t.cpu / (steps - 1) for t in v] for k, v in rows.items()}
    base = med(per_step["bare_evals"])
    print(f"\n{name}, B = {batch_size}, {steps} steps, 1 trial, {len(eval_at)} evaluations "
          f"(after steps 1, 2, 4, ..., {steps}); steps 2..{steps} timed, median of {repeats} "
          f"interleaved repeats [range]")
    print(f"  {'':52s} {'steps/s':>17s} {'ms/step':>8s} {'CPU ms/step':>12s} {'overhead':>9s} "
          f"{'paired [range]':>17s} {'CPU':>7s}")
    labels = {"bare": "bare jit + optax loop, no evaluations",
              "bare_evals": "bare loop + the same evaluations (BASELINE)",
              "noise_off": "HARNESS: run_trials, noise scale off",
              "default": "run_trials, default: + noise scale every step",
              "noise_sparse": f"run_trials, + noise scale every {SPARSE_NOISE_EVERY}th step"}
    paired = {k: [100 * (a / b - 1) for a, b in zip(v, per_step["bare_evals"])]
              for k, v in per_step.items()}
    paired_cpu = {k: med([100 * (a / b - 1) for a, b in zip(v, cpu_step["bare_evals"])])
                  for k, v in cpu_step.items()}
    for key, label in labels.items():
        t = med(per_step[key])
        rates = [1.0 / x for x in per_step[key]]
        over = pair = cpu = ""
        if key != "bare_evals":
            over = f"{100 * (t / base - 1):+8.1f}%"
            pair = (f"{med(paired[key]):+6.1f}% [{min(paired[key]):+.0f}, "
                    f"{max(paired[key]):+.0f}]")
            cpu = f"{paired_cpu[key]:+6.1f}%"
        print(f"  {label:52s} {1 / t:7.0f} {spread(rates):>9s} {1e3 * t:8.2f} "
              f"{1e3 * med(cpu_step[key]):12.2f} {over:>9s} {pair:>17s} {cpu:>7s}")
    HARNESS[(name, batch_size)] = (med(paired["noise_off"]), paired_cpu["noise_off"],
                                   med(paired["default"]))
    t_step = med(per_step["noise_off"])
    print(f"  compiled measuring step (two half-batch gradients): trainer {flops_t / 1e6:.1f} MFLOP, {bytes_t / 1e6:.1f} MB accessed; "
          f"bare {flops_b / 1e6:.1f} MFLOP, {bytes_b / 1e6:.1f} MB "
          f"(x{flops_t / flops_b:.2f} flops, x{bytes_t / bytes_b:.2f} bytes; XLA's cost analysis)")
    print(f"  one evaluation ({val['mask'].shape[0]} validation rows, result to host): "
          f"{1e3 * t_eval:.2f} ms = {t_eval / t_step:.1f} trainer steps; host batch per step: "
          f"trainer {1e6 * host_trainer:.0f} us (gather + place_batch), "
          f"bare {1e6 * host_bare:.0f} us")
    n_budget = len(eval_steps(budget_steps, resolution))
    share = n_budget * t_eval / (budget_steps * t_step + n_budget * t_eval)
    print(f"  at the workload's default budget ({budget_steps} steps, {n_budget} evals) the "
          f"evaluations would be {100 * share:.1f}% of the loop")
    what = ("compiles init, train and eval" if first
            else "compiles the train step; init and eval are shared with the first case")
    print(f"  per run_trials call outside the loop: first call {cold.fixed:.2f} s ({what}) "
          f"= {cold.fixed / base:.0f} bare steps; with the programs from the compilation cache "
          f"{med(fixed):.2f} s {spread(fixed, fmt='{:.2f}')}")
    return cold.fixed - med(fixed)


# --- section 2 ----------------------------------------------------------------------------------

def vmap_case(task, batch_size, steps, repeats, devices, resolution, compile_one, compile_all):
    """Prints one case of section 2; returns the compile time of the vmapped call's programs
    (its first call's fixed cost minus a cached call's; only the first case compiles all three,
    later ones reuse the init and eval programs, so they take the first case's figure)."""
    config = run_config(batch_size, steps, resolution)
    lrs = np.geomspace(1e-3, 3e-2, VMAP_TRIALS)
    specs = [TrialSpec(i, float(lr), MOMENTUM) for i, lr in enumerate(lrs)]
    timed_run_trials(task, config, specs[:1], devices)        # warm-up: compile both shapes
    cold_all = timed_run_trials(task, config, specs, devices)
    together, apart = [], []
    for r in range(repeats):
        calls = [lambda: together.append(timed_run_trials(task, config, specs, devices)),
                 lambda: apart.append([timed_run_trials(task, config, [s], devices) for s in specs])]
        for call in (calls if r % 2 == 0 else calls[::-1]):
            call()
    work = steps * VMAP_TRIALS
    loop_work = (steps - 1) * VMAP_TRIALS
    totals_tog = [c.total for c in together]
    totals_apart = [sum(c.total for c in cs) for cs in apart]
    t_tog, t_apart = med(totals_tog), med(totals_apart)
    l_tog = med([c.loop.wall for c in together])
    l_apart = med([sum(c.loop.wall for c in cs) for cs in apart])
    if compile_all is None:
        compile_all = cold_all.fixed - med([c.fixed for c in together])
    n_evals = len(eval_steps(steps, resolution))
    print(f"\nB = {batch_size}, {steps} steps, {n_evals} evals per trial, median of {repeats} "
          f"interleaved repeat(s) [range]; programs from the compilation cache")
    print(f"  8 separate calls: {t_apart:6.2f} s {spread(totals_apart, fmt='{:.2f}')} -> "
          f"{work / t_apart:6.0f} steps*trials/s; training loops alone {l_apart:6.2f} s -> "
          f"{loop_work / l_apart:6.0f}")
    print(f"  1 vmapped call:   {t_tog:6.2f} s {spread(totals_tog, fmt='{:.2f}')} -> "
          f"{work / t_tog:6.0f} steps*trials/s; training loop alone   {l_tog:6.2f} s -> "
          f"{loop_work / l_tog:6.0f}")
    print(f"  gain (8 separate / vmapped): {t_apart / t_tog:.2f}x per call, "
          f"{l_apart / l_tog:.2f}x in the training loops alone")
    if compile_one is not None and compile_all > 0:
        first = (t_apart + compile_one) / (t_tog + compile_all)
        print(f"  counting the one compile each way pays in a fresh process ({compile_one:.1f} s "
              f"for the 1-trial program [section 1], {compile_all:.1f} s for 8 trials): about "
              f"{first:.2f}x")
    return compile_all


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats, no CNN")
    parser.add_argument("--repeats", type=int, help="rounds of section 1 (default: 5; 3 with "
                        "--quick); the vmapped-trials section takes its own")
    args = parser.parse_args()

    cache_dir = tempfile.mkdtemp(prefix="bench_trainer_jax_cache_")
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    devices = jax.devices()[:1]
    start = time.perf_counter()
    try:
        header(devices)
        mlp = workloads.get("mnist_mlp")
        tasks = {"mnist_mlp": mlp.build()}
        if args.quick:
            cases = [("mnist_mlp", 16, 400), ("mnist_mlp", 256, 100)]
            repeats, vmap_cases, vmap_repeats = 3, [(16, 30), (256, 16)], 1
        else:
            cases = [("mnist_mlp", 16, 3000), ("mnist_mlp", 256, 1000), ("mnist_cnn", 64, 60)]
            repeats, vmap_cases, vmap_repeats = 5, [(16, 150), (256, 60)], 2
        if args.repeats is not None:
            if args.repeats < 1:
                parser.error(f"--repeats must be >= 1, got {args.repeats}")
            repeats = args.repeats
        print(f"\n1. Harness overhead on one device (momentum SGD, lr {LEARNING_RATE}, "
              f"b {MOMENTUM}, goal {UNREACHABLE_GOAL}: every step runs)")
        compile_one = None
        for name, batch_size, steps in cases:
            w = workloads.get(name)
            task = tasks.setdefault(name, w.build())
            compiled = overhead_case(name, task, batch_size, steps, repeats, devices, w.max_steps,
                                     w.eval_resolution, first=compile_one is None)
            compile_one = compiled if compile_one is None else compile_one
        print(f"\n2. Vmapped trials: K = {VMAP_TRIALS} trials of mnist_mlp in one run_trials call "
              f"against 8 calls of 1 trial (lr 0.001..0.03, default cadence)")
        compile_all = None
        for batch_size, steps in vmap_cases:
            compile_all = vmap_case(tasks["mnist_mlp"], batch_size, steps, vmap_repeats, devices,
                                    mlp.eval_resolution, compile_one, compile_all)
        print("\nSummary: harness overhead (run_trials with the noise scale off, the bare loop's "
              "work) over the bare loop with the same evaluations, median of the rounds' paired "
              "ratios, wall (CPU): " + ", ".join(
                  f"{name} B = {b}: {wall:+.1f}% ({cpu:+.1f}%)"
                  for (name, b), (wall, cpu, _) in HARNESS.items())
              + ".\nWith the noise scale measured every step (the default; on one device a "
              "second half-batch gradient): " + ", ".join(
                  f"{name} B = {b}: {full:+.1f}%" for (name, b), (_, _, full) in HARNESS.items()))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    print(f"\ntotal {time.perf_counter() - start:.0f} s; load average now "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
