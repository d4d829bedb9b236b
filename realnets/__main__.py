"""Entry point: `python -m realnets sweep ...` (see realnets.cli)."""

import sys

from realnets.training import host_allocator

# before numpy or jax start a thread: XLA:CPU's large per-call buffers are then reused instead of
# mapped and zero-filled afresh at every step (see realnets.training.host_allocator)
host_allocator.tune_for_cpu()

from realnets.cli import main  # noqa: E402

sys.exit(main())
