"""What every command line of the project shares: an argparse parser whose bad flag is one line
(exit 2), and an exit that stays quiet when the reader of the output has gone (`| head`)."""

from __future__ import annotations

import argparse
import os
import select
import sys
from typing import Callable, NoReturn

SIGPIPE_STATUS = 141    # 128 + SIGPIPE (13), the status of a process killed by a closed pipe


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line `error: ...` and exit status 2."""

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def exit_with(main: Callable[[], int]) -> NoReturn:
    """sys.exit(main()); when standard output's reader closes the pipe early (`... | head`),
    no traceback: the rest of the output is dropped and the status is SIGPIPE_STATUS. A broken
    pipe anywhere else (a socket, a child process) is raised as before."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        # the interpreter would flush stdout again at exit and fail once more: point it at
        # /dev/null first
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = SIGPIPE_STATUS
    sys.exit(status)


def _stdout_reader_gone() -> bool:
    """Standard output is a pipe whose reading end is closed (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):   # no poll (Windows) or no real stdout
        return False
