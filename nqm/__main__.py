"""Entry point: `python -m nqm curve ...` (see nqm.cli)."""

import sys

from nqm.cli import main

sys.exit(main())
