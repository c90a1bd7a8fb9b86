"""CalculiX jobs for tests/test_umat.py and benchmarks/calculix.py: where the ccx built with external
behaviours is (.ci/calculix.sh caches one), the mesh and *USER MATERIAL blocks of a deck, and the
environment a run needs (CalculiX finds lib<LIB>.so of a material @ABAQUS_<LIB>_<FUNC> through
LD_LIBRARY_PATH; its threads from OMP_NUM_THREADS and CCX_NPROC_*)."""
from __future__ import annotations

import os


def find_ccx(path=None):
    """(path of a ccx with external behaviours, None) or (None, why not): `path`, else $ADGRAD_CCX, else
    .ci/calculix.sh's cache."""
    cache = os.environ.get("ADGRAD_CI_CACHE") or os.path.expanduser("~/.cache/adgrad-ci")
    path = path or os.environ.get("ADGRAD_CCX") or os.path.join(cache, "calculix", "bin", "ccx")
    if not os.access(path, os.X_OK):
        return None, f"no CalculiX at {path}: run .ci/calculix.sh (or set ADGRAD_CCX to a ccx with external behaviours)"
    with open(path, "rb") as f:
        if b"unable to load function" not in f.read():      # external.c's message: only with the flag
            return None, (f"{path} is built without -DCALCULIX_EXTERNAL_BEHAVIOURS_SUPPORT (its @ABAQUS materials "
                          f"call an empty stub): build one with .ci/calculix.sh")
    return path, None


def mesh(nx, ny, nz):
    """A block of nx x ny x nz unit C3D8 elements: nodes, elements and the sets NALL, EALL, BOTTOM (z = 0), TOP."""
    def node(i, j, k):
        return 1 + i + (nx + 1) * (j + (ny + 1) * k)
    lines = ["*NODE, NSET=NALL"]
    lines += [f"{node(i, j, k)}, {i}, {j}, {k}" for k in range(nz + 1) for j in range(ny + 1) for i in range(nx + 1)]
    lines.append("*ELEMENT, TYPE=C3D8, ELSET=EALL")
    e = 0
    for k in range(nz):
        for j in range(ny):
            for i in range(nx):
                e += 1
                corners = [(i, j, k), (i + 1, j, k), (i + 1, j + 1, k), (i, j + 1, k)]
                ids = [node(a, b, c) for a, b, c in corners] + [node(a, b, c + 1) for a, b, c in corners]
                lines.append(f"{e}, " + ", ".join(map(str, ids)))
    for name, k in (("BOTTOM", 0), ("TOP", nz)):
        ids = [node(i, j, k) for j in range(ny + 1) for i in range(nx + 1)]
        lines.append(f"*NSET, NSET={name}")
        lines += [", ".join(map(str, ids[a:a + 8])) for a in range(0, len(ids), 8)]
    return "\n".join(lines)


def user_material(name, props, nstatv):
    """The *MATERIAL block of a UMAT: its constants `props` and `nstatv` state variables."""
    lines = [f"*MATERIAL, NAME={name}", f"*USER MATERIAL, CONSTANTS={len(props)}"]
    lines += [", ".join(repr(float(p)) for p in props[a:a + 8]) for a in range(0, len(props), 8)]
    if nstatv:
        lines += ["*DEPVAR", str(nstatv)]
    return "\n".join(lines)


def environment(libs, threads, env=None):
    """The environment of a ccx run with the libraries of the directories `libs` and `threads` threads."""
    threads = str(threads)
    return {**os.environ, "LD_LIBRARY_PATH": ":".join(str(d) for d in libs), "OMP_NUM_THREADS": threads,
            "CCX_NPROC_STIFFNESS": threads, "CCX_NPROC_RESULTS": threads, "CCX_NPROC_EQUATION_SOLVER": threads,
            **(env or {})}
