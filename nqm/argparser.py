"""An argparse parser for every command line of the project: a bad flag is one line, exit 2."""

from __future__ import annotations

import argparse


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line `error: ...` and exit status 2."""

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")
