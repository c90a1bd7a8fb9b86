"""SIGTERM (what a batch scheduler sends at the time limit) and Ctrl-C become a stop request that
the job honours at the next chunk boundary, instead of killing it in the middle of a write."""
from __future__ import annotations

import contextlib
import signal
import threading

from ..errors import JobError


class Interrupted(JobError):
    """The job stopped at a chunk boundary on SIGTERM or Ctrl-C; the file can be resumed."""


# Signals the console entry point (cli/entry.py) received before a run installed its own handlers.
# Its handler raises, and Python drops an exception raised where it cannot propagate (in a callback
# of the import machinery, say); noting the signal here first means a run still stops for it.
PENDING = []


class StopRequests:
    def __init__(self):
        self.signal = PENDING[0] if PENDING else None      # name of the first signal received

    def __call__(self):
        return self.signal is not None

    def _handle(self, signum, frame):
        if self.signal is None:
            self.signal = signal.Signals(signum).name


@contextlib.contextmanager
def stop_on_signals(signals=(signal.SIGTERM, signal.SIGINT)):
    """Yield a StopRequests that turns true once one of `signals` arrives; handlers are restored
    afterwards. Outside the main thread (where Python cannot install handlers) it never turns true."""
    requests = StopRequests()
    if threading.current_thread() is not threading.main_thread():
        yield requests
        return
    previous = {s: signal.signal(s, requests._handle) for s in signals}
    try:
        yield requests
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
