"""Parameter files of LAMMPS's three-body potentials: Stillinger-Weber (.sw) and Tersoff (.tersoff).

Each entry names three elements i, j, k and gives the parameters of that triplet; the reader returns
every parameter as an array over species (a, b, c) in the order of `elements` (`sw.epsilon[s, sj, sk]`;
with one element, a plain constant `sw.epsilon`), plus what LAMMPS derives from them (cut, cutsq and,
for Tersoff, the thresholds c1..c4 of its bond-order branches). Which triplet LAMMPS reads for which
term: SW's pair term and the radial factors of the three-body term use (i, j, j) and (i, k, k), its
angular factor (i, j, k); Tersoff's pair terms and b_ij use (i, j, j), the terms of zeta_ij (i, j, k).
"""
from __future__ import annotations

import numpy as np

from .base import Potential, TextReader

SW = ("epsilon", "sigma", "a", "lam", "gamma", "costheta0", "A", "B", "p", "q", "tol")    # lam: LAMMPS's lambda
TERSOFF = ("m", "gamma", "lam3", "c", "d", "h", "n", "beta", "lam2", "B", "R", "D", "lam1", "A")


def _entries(path, names, fmt):
    """(line, (e1, e2, e3), values) for every entry; entries may continue over lines, '#' comments."""
    rd = TextReader(path)
    out, words, first = [], [], None
    for number, line in enumerate(rd.lines, start=1):
        tokens = line.split("#", 1)[0].split()
        if not tokens:
            continue
        first = first or number
        words += tokens
        if len(words) < 3 + len(names):
            continue
        if len(words) > 3 + len(names):
            raise rd.error(f"a {fmt} entry has {3 + len(names)} words (3 elements, then "
                           f"{', '.join(names)}); this one has {len(words)}", first)
        try:
            values = [float(w) for w in words[3:]]
        except ValueError:
            bad = next(w for w in words[3:] if not _number(w))
            raise rd.error(f"'{bad}' is not a number", first) from None
        out.append((first, tuple(words[:3]), values))
        words, first = [], None
    if words:
        raise rd.error(f"the file ends inside an entry ({len(words)} of {3 + len(names)} words)", first)
    if not out:
        raise rd.error(f"no {fmt} entries in the file", 1)
    return rd, out


def _number(w):
    try:
        float(w)
        return True
    except ValueError:
        return False


def _arrays(path, names, fmt, elements):
    rd, entries = _entries(path, names, fmt)
    found = list(dict.fromkeys(e for _, trip, _ in entries for e in trip))
    elements = tuple(elements) if elements is not None else tuple(found)
    for e in elements:
        if e not in found:
            raise rd.error(f"element '{e}' is not in this file (it has {', '.join(found)})", 1)
    S = len(elements)
    arrays = {n: np.full((S, S, S), np.nan) for n in names}
    seen = {}
    for line, trip, values in entries:
        if not all(e in elements for e in trip):
            continue
        idx = tuple(elements.index(e) for e in trip)
        if idx in seen:
            raise rd.error(f"the triplet {' '.join(trip)} is given twice (also on line {seen[idx]})", line)
        seen[idx] = line
        for n, v in zip(names, values):
            arrays[n][idx] = v
    missing = [tuple(elements[i] for i in idx) for idx in np.ndindex(S, S, S) if idx not in seen]
    if missing:
        raise rd.error(f"no entry for the triplet {' '.join(missing[0])} of elements {', '.join(elements)}", 1)
    return elements, arrays


def read_sw(files, elements=None):
    (path,) = files
    elements, p = _arrays(path, SW, "Stillinger-Weber", elements)
    p["cut"] = p["a"] * p["sigma"]
    p["cutsq"] = p["cut"] * p["cut"]
    return Potential("sw", elements, {}, p)


def read_tersoff(files, elements=None):
    (path,) = files
    elements, p = _arrays(path, TERSOFF, "Tersoff", elements)
    n = p["n"]
    p["cut"] = p["R"] + p["D"]
    p["cutsq"] = p["cut"] * p["cut"]
    with np.errstate(divide="ignore"):      # n = 0 in triplets only zeta reads: inf and 0, as in LAMMPS
        p["c1"] = (2.0 * n * 1.0e-16) ** (-1.0 / n)
        p["c2"] = (2.0 * n * 1.0e-8) ** (-1.0 / n)
        p["c3"] = 1.0 / p["c2"]
        p["c4"] = 1.0 / p["c1"]
    return Potential("tersoff", elements, {}, p)
