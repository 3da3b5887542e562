"""Start a command that a test interrupts with SIGINT (Ctrl-C), whatever SIGINT handling the suite inherited.

A test suite started from a background job (``pytest ... &`` in a script), under ``nohup`` or by a service runs
with SIGINT ignored, and an ignored signal stays ignored in every child, through exec: Python then installs no
KeyboardInterrupt handler, and the test's SIGINT does nothing. So the child sets its handling itself: the command
runs through this file, which restores the default SIGINT action and then execs the command (same pid, so the
test signals the command itself). nmt leaves an inherited ignored SIGINT alone on purpose: ``nohup nmt-train ... &``
is meant to survive a Ctrl-C in the terminal it was started from.

As a script: ``python tests/ctrl_c.py default|ignore CMD ARGS...`` runs CMD with SIGINT at its default action, or
ignored (as from a background job: how the tests show that the first way works there).
"""

from __future__ import annotations

import os
import signal
import sys

_MODES = {"default": signal.SIG_DFL, "ignore": signal.SIG_IGN}


def ctrl_c_command(cmd: list[str], from_background_job: bool = False) -> list[str]:
    """``cmd`` started so that SIGINT interrupts it like Ctrl-C in a terminal; ``from_background_job``: started
    by a parent that ignores SIGINT, as in a suite run from a background job or a service."""
    command = [sys.executable, __file__, "default", *cmd]
    return [sys.executable, __file__, "ignore", *command] if from_background_job else command


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _MODES[sys.argv[1]])
    os.execvp(sys.argv[2], sys.argv[2:])
