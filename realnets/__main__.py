"""Entry point: `python -m realnets sweep ...` (see realnets.cli)."""

from realnets.training import host_allocator

# before numpy or jax start a thread: XLA:CPU's large per-call buffers are then reused instead of
# mapped and zero-filled afresh at every step (see realnets.training.host_allocator)
host_allocator.tune_for_cpu()

from nqm.argparser import exit_with  # noqa: E402
from realnets.cli import main  # noqa: E402

exit_with(main)
