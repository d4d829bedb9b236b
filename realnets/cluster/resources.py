"""What one block asks of the cluster: `--resources-per-block` read and checked, and turned into
Ray task options (no Ray needed here).

Ray takes CPUs and GPUs as `num_cpus`/`num_gpus`, heap memory in bytes as `memory`, and any other
name as a custom resource; a fraction is allowed up to 1 and above 1 only whole numbers.
"""

from __future__ import annotations

import json
import math

DEFAULT_RESOURCES = {"CPU": 1.0}
# a worker killed mid-block (node lost, OOM-killer, kill -9): its block is run again this often
MAX_RETRIES = 3
# JAX on a GPU takes 75% of the device's memory when it starts unless told otherwise: several
# blocks sharing one GPU (GPU < 1) would each try to take it. With this, JAX allocates as needed.
WORKER_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
_EXAMPLE = '{"CPU": 1, "GPU": 0.25}'


def parse_resources(text: str | None) -> dict[str, float]:
    """`--resources-per-block` JSON as {name: amount}; None gives DEFAULT_RESOURCES.

    Raises ValueError naming the flag unless it is a JSON object of non-negative finite numbers,
    each at most 1 or whole (Ray's rule), asking for something.
    """
    if text is None:
        return dict(DEFAULT_RESOURCES)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not value:
        raise ValueError(f"resources-per-block must be a JSON object of resource amounts, e.g. "
                         f"'{_EXAMPLE}', got {text!r:.80}")
    out = {}
    for name, amount in value.items():
        if (isinstance(amount, bool) or not isinstance(amount, (int, float))
                or not math.isfinite(amount) or amount < 0):
            raise ValueError(f"resources-per-block: {name} must be a non-negative number, got "
                             f"{amount!r:.40}")
        if amount > 1 and amount != int(amount):
            raise ValueError(f"resources-per-block: {name} above 1 must be a whole number "
                             f"(Ray's rule), got {amount}")
        out[str(name)] = float(amount)
    if not any(out.values()):
        raise ValueError(f"resources-per-block must ask for something (all amounts are 0), got "
                         f"{text!r:.80}")
    return out


def task_options(resources: dict[str, float], max_retries: int = MAX_RETRIES) -> dict:
    """Keyword arguments of Ray's `RemoteFunction.options` for one block."""
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    options = {"num_cpus": resources.get("CPU", 0.0), "num_gpus": resources.get("GPU", 0.0),
               "max_retries": max_retries, "runtime_env": {"env_vars": dict(WORKER_ENV)}}
    if "memory" in resources:
        options["memory"] = resources["memory"]
    if custom:
        options["resources"] = custom
    return options


def blocks_at_once(cluster: dict[str, float], resources: dict[str, float]) -> int:
    """How many blocks the cluster's totals (`ray.cluster_resources()`) hold at once, >= 1.

    Counted on the totals, not node by node (a node's leftover fraction may not fit a block).
    Raises ValueError when a block asks for more of something than the whole cluster has: it
    would wait forever.
    """
    counts = []
    for name, amount in resources.items():
        if amount <= 0:
            continue
        have = cluster.get(name, 0.0)
        if have < amount:
            raise ValueError(f"resources-per-block asks for {name} {amount:g} per block but the "
                             f"cluster has {have:g} in all")
        counts.append(math.floor(have / amount + 1e-9))
    return max(1, min(counts))
