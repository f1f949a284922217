"""A signal to the launcher (SIGTERM, SIGINT), noted by a handler for the supervisor to act on."""

from __future__ import annotations

import signal
import time


class Interruption:
    """SIGTERM and SIGINT to the launcher, noted by a handler and acted on by the supervisor's
    loop at its next poll, so no exception lands in the middle of a write. Python's handlers
    are not told who sent a signal; runners.watch.evidence.signal_context records what can be
    known instead."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signum = None
        self.received_t = None
        self.count = 0

    def install(self) -> "Interruption":
        for s in self.SIGNALS:
            if signal.getsignal(s) is not signal.SIG_IGN:  # `nohup`, a background job's SIGINT
                signal.signal(s, self._note)
        return self

    def _note(self, signum, frame) -> None:
        self.count += 1  # a second Ctrl-C must not cut the clean-up short
        if self.signum is None:
            self.signum, self.received_t = signum, time.time()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name
