"""What every command shares: loading a model or a config, and turning engine errors into exits.
This is the only place engine errors become click errors (exit 2 for bad input, 1 for a failed job)."""
from __future__ import annotations

import functools
import sys

import click
import yaml

from adgrad.engine.errors import DataError, JobError, SpecError
from adgrad.engine.model import build
from adgrad.engine.spec import load_config_file, load_model_file


def fail(message, code):
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def reports_errors(fn):
    """Run a command body; spec and data errors exit 2, job errors exit 1, each with a clear message."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (SpecError, DataError) as exc:
            fail(str(exc), 2)
        except JobError as exc:
            fail(str(exc), 1)
    return wrapper


def is_config(path):
    """A config names a model; a model declares inputs. Decided from the top-level keys."""
    try:
        with open(path, encoding="utf-8") as f:
            top = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return False            # let the model loader report the problem with its location
    return isinstance(top, dict) and "model" in top and "inputs" not in top


def load_model_or_config(path):
    """(model, config or None) for a model file or a run config."""
    if is_config(path):
        config = load_config_file(path)
        return build(config.model).with_params(config.params), config
    return build(load_model_file(path)), None
