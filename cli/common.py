"""What every command shares: loading a model or a config, and turning engine errors into exits.
This is the only place engine errors become click errors (exit 2 for bad input, 1 for a failed job).
Command modules import the engine inside their functions: `adgrad --help` and `--version` then load
neither numba nor h5py."""
from __future__ import annotations

import atexit
import functools
import os
import sys
import traceback

import click
import yaml

from adgrad.engine.errors import DataError, JobError, SpecError


def fail(message, code):
    """Print the error and end the process. Without the interpreter's finalization: after an I/O
    error (a full disk) HDF5's shutdown crashed (exit 139 instead of the error's code); our own exit
    handlers (the compile cache's checksums) still run."""
    click.echo(f"error: {message}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    if not HARD_EXIT:
        sys.exit(code)          # called from Python (click's test runner, a host program): an ordinary exit
    atexit._run_exitfuncs()
    os._exit(code)


HARD_EXIT = False               # set by the console entry point (cli/entry.py): fail() ends the process


def reports_errors(fn):
    """Run a command body; spec and data errors exit 2, job errors exit 1, each with a clear message.
    The error boundary of every command: a signal outside a run's chunk loop ends it with one line
    (exit 1), and an unexpected exception is an internal error in one line (exit 1), its traceback
    shown only with ADGRAD_DEBUG=1."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (SpecError, DataError) as exc:
            fail(str(exc), 2)
        except JobError as exc:
            fail(str(exc), 1)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise                       # click's own: usage errors (exit 2) and exits
        except KeyboardInterrupt as exc:
            fail(f"stopped by {exc or 'SIGINT'} before any output was written", 1)
        except Exception as exc:        # noqa: BLE001  (the boundary: no traceback reaches a user)
            if os.environ.get("ADGRAD_DEBUG") == "1":
                traceback.print_exc()
            fail(f"internal error: {type(exc).__name__}: {exc} (a bug in adgrad; ADGRAD_DEBUG=1 shows where)", 1)
    return wrapper


def compile_log(quiet):
    """compile_model's `log`: None with -q, else lines on stderr (one before a kernel that is not in
    the compile cache is compiled, one with its time after)."""
    return None if quiet else functools.partial(click.echo, err=True)


quiet_option = click.option("-q", "--quiet", is_flag=True,
                            help="No compile messages on stderr (a kernel not in the compile cache is announced "
                                 "before it compiles, with its time after).")


def is_config(path):
    """A config names a model; a model declares inputs. Decided from the top-level keys."""
    try:
        with open(path, encoding="utf-8") as f:
            top = yaml.safe_load(f)
    except (OSError, yaml.YAMLError, RecursionError):
        return False            # let the model loader report the problem with its location
    return isinstance(top, dict) and "model" in top and "inputs" not in top


def load_model_or_config(path):
    """(model, config or None) for a model file or a run config."""
    from adgrad.engine.model import build
    from adgrad.engine.spec import load_config_file, load_model_file
    if is_config(path):
        config = load_config_file(path)
        return build(config.model).with_params(config.params), config
    return build(load_model_file(path)), None
