"""Potential files of LAMMPS as param sets: their functions as tables, their constants as numbers.

`read(files, format, elements)` dispatches on the format; each reader builds the tables exactly as
the LAMMPS pair style does (resampling and all), so a model using them reproduces LAMMPS to
round-off. Errors name the file and line.
"""
from __future__ import annotations

from .base import Potential
from .eam import read_fs, read_funcfl, read_setfl
from .manybody import read_sw, read_tersoff

READERS = {"eam": read_funcfl, "eam/alloy": read_setfl, "eam/fs": read_fs, "sw": read_sw, "tersoff": read_tersoff}
SUFFIXES = {".eam.alloy": "eam/alloy", ".eam.fs": "eam/fs", ".eam": "eam", ".sw": "sw", ".tersoff": "tersoff"}


def format_of(path):
    """The format a file's name implies, or None."""
    for suffix, fmt in SUFFIXES.items():
        if str(path).endswith(suffix):
            return fmt
    return None


def read(files, fmt, elements=None) -> Potential:
    return READERS[fmt](files, elements)


__all__ = ["READERS", "SUFFIXES", "Potential", "format_of", "read"]
