"""The `adgrad` console entry point. Signals are handled from its first instruction, before any
other import: SIGTERM or Ctrl-C before a run's chunk loop (which stops at a chunk boundary instead)
ends the command with one line and exit 1, never with a traceback or a silent -15.

The first handlers come from `_signal`, the C module the interpreter has loaded already (the
`signal` module builds its enums first, a few milliseconds in which Ctrl-C printed a traceback).
They only note the signal, so nothing raises inside the imports that follow; main() stops for it
once they are done. Before this module runs (the interpreter's own start-up, site, the console
script's first import: about 20 ms) a signal has Python's default effect."""
import _signal

_EARLY = []         # signals received before main() installed its handlers


def _note(signum, frame):
    _EARLY.append(signum)


_signal.signal(_signal.SIGINT, _note)
_signal.signal(_signal.SIGTERM, _note)

import signal  # noqa: E402  (after the handlers, on purpose)
import sys  # noqa: E402
import threading  # noqa: E402

from adgrad.engine.job.signals import PENDING  # noqa: E402


class Stopped(KeyboardInterrupt):
    """A signal outside a run's chunk loop; its argument is the signal's name."""


def _stop(signum, frame):
    if _importing(frame):       # delivered again in 50 ms, until the import is over
        again = threading.Timer(0.05, signal.raise_signal, (signum,))
        again.daemon = True
        again.start()
        return
    name = signal.Signals(signum).name
    PENDING.append(name)        # kept, in case Python drops the exception (see engine/job/signals.py)
    raise Stopped(name)


def _importing(frame):
    """Whether the signal came during an import. An exception raised there can be turned into another:
    numba's C extensions print its traceback and raise ImportError (seen with SIGTERM at 1 s into a run
    on a loaded machine), which would be an internal error instead of a stop."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _unraisable(hook):
    """sys.unraisablehook that is silent about a dropped Stopped (noted in PENDING instead)."""
    return lambda unraisable: None if isinstance(unraisable.exc_value, Stopped) else hook(unraisable)


def main():
    sys.unraisablehook = _unraisable(sys.unraisablehook)
    try:
        from . import common
        from .main import cli
        common.HARD_EXIT = True
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, _stop)
        PENDING.extend(signal.Signals(s).name for s in _EARLY)
        if PENDING:             # noted while starting, or a signal whose exception an import callback dropped
            raise Stopped(PENDING[0])
    except KeyboardInterrupt as exc:
        _stopped_while_starting(exc)
    try:
        try:
            cli()
        finally:    # the command is over and its exit code stands: a late signal must not turn it into -15
            for s in (signal.SIGTERM, signal.SIGINT):
                signal.signal(s, signal.SIG_IGN)
    except KeyboardInterrupt as exc:    # a signal in the instant between click's exit and the line above:
        if isinstance(exc.__context__, SystemExit):     # the command had ended, its exit code stands
            raise exc.__context__ from None
        _stopped_while_starting(exc)


def _stopped_while_starting(exc):
    print(f"error: stopped by {exc or 'SIGINT'} while starting; nothing was written", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
