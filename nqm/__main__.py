"""Entry point: `python -m nqm curve ...` (see nqm.cli)."""

from nqm.argparser import exit_with
from nqm.cli import main

exit_with(main)
