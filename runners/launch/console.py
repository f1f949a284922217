"""The launcher's lines on the terminal: `[gnnscale] ...` for what a run does, `error: ...` for
what stops it before anything is launched."""

from __future__ import annotations

import sys

PREFIX = "[gnnscale]"


def say(text: str, file=None) -> None:
    """One `[gnnscale] text` line, flushed at once: a sweep's log interleaves it with the ranks'.
    `file` defaults to the stdout of the moment (tests capture it)."""
    print(f"{PREFIX} {text}", file=sys.stdout if file is None else file, flush=True)


def error(text: str) -> None:
    """One `error: text` line on stderr, as argparse and the shell's tools write theirs."""
    print(f"error: {text}", file=sys.stderr, flush=True)
