"""Entry point: `python -m realnets sweep ...` (see realnets.cli)."""

import sys

from realnets.cli import main

sys.exit(main())
