"""What every command line of the project shares: an argparse parser whose bad flag is one line
(exit 2), and an exit that stays quiet when the reader of the output has gone (`| head`)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Callable, NoReturn


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line `error: ...` and exit status 2."""

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def exit_with(main: Callable[[], int]) -> NoReturn:
    """sys.exit(main()); when standard output's reader closes the pipe early (`... | head`),
    no traceback: the rest of the output is dropped and the status is a SIGPIPE death's, 141."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # the interpreter would flush stdout again at exit and fail once more: point it at
        # /dev/null first
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 128 + signal.SIGPIPE
    sys.exit(status)
