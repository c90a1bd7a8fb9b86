"""Parameter files of LAMMPS's three-body potentials: Stillinger-Weber (.sw) and Tersoff (.tersoff).

Each entry names three elements i, j, k and gives the parameters of that triplet; the reader returns
every parameter as an array over species (a, b, c) in the order of `elements` (`sw.epsilon[s, sj, sk]`;
with one element, a plain constant `sw.epsilon`), plus what LAMMPS derives from them (cut, cutsq and,
for Tersoff, the thresholds c1..c4 of its bond-order branches). Which triplet LAMMPS reads for which
term: SW's pair term and the radial factors of the three-body term use (i, j, j) and (i, k, k), its
angular factor (i, j, k); Tersoff's pair terms and b_ij use (i, j, j), the terms of zeta_ij (i, j, k).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..limits import MAX_ELEMENTS
from .base import Potential, TextReader, one_file

SW = ("epsilon", "sigma", "a", "lam", "gamma", "costheta0", "A", "B", "p", "q", "tol")    # lam: LAMMPS's lambda
TERSOFF = ("m", "gamma", "lam3", "c", "d", "h", "n", "beta", "lam2", "B", "R", "D", "lam1", "A")
# What LAMMPS's read_file refuses as "Illegal Stillinger-Weber parameter" / "Illegal Tersoff parameter"
NONNEGATIVE = {"Stillinger-Weber": {"epsilon", "sigma", "a", "lam", "gamma", "A", "B", "p", "q", "tol"},
               "Tersoff": {"c", "d", "n", "beta", "lam2", "B", "R", "D", "lam1", "A", "gamma"}}
CUTOFF = {"Stillinger-Weber": ("a", "sigma"), "Tersoff": ("R", "D")}      # cut = a * sigma, resp. R + D
MAX_SPECIES = round(MAX_ELEMENTS ** (1 / 3))        # S^3 triplets of S elements are one param


def _entries(rd, names, fmt):
    """The Tokens of every entry: 3 elements, then the values of `names`; entries may continue over
    lines (LAMMPS joins lines until it has them all), '#' starts a comment."""
    n, words = 3 + len(names), []
    rd.rewind()
    while rd.next_line():
        words += rd.words()
        if len(words) < n:
            continue
        if len(words) > n:
            raise rd.error(f"a {fmt} entry has {n} words (3 elements, then {', '.join(names)}); "
                           f"this one has {len(words)}", words[0])
        yield words
        words = []
    if words:
        raise rd.error(f"the file ends inside an entry ({len(words)} of {n} words)", words[0])


def _check(rd, entry, names, fmt):
    """Every value a finite number, and what LAMMPS's read_file refuses refused with its reason."""
    trip = " ".join(t.text for t in entry[:3])
    toks = dict(zip(names, entry[3:]))
    v = {name: rd.number(tok, f"the {fmt} parameter {name} of {trip}") for name, tok in toks.items()}
    for name in names:
        if name in NONNEGATIVE[fmt] and v[name] < 0:
            raise rd.error(f"the {fmt} parameter {name} of {trip} must not be negative, got {toks[name].text} "
                           f"(LAMMPS: Illegal {fmt} parameter)", toks[name])
    if fmt == "Tersoff":
        if v["D"] > v["R"]:
            raise rd.error(f"the Tersoff parameter D of {trip} must not exceed R = {toks['R'].text}, got "
                           f"{toks['D'].text} (LAMMPS: Illegal Tersoff parameter)", toks["D"])
        if v["m"] not in (1.0, 3.0):
            raise rd.error(f"the Tersoff parameter m of {trip} must be 1 or 3, got {toks['m'].text} "
                           f"(LAMMPS: Illegal Tersoff parameter)", toks["m"])
        cut = v["R"] + v["D"]
    else:
        cut = v["a"] * v["sigma"]
    if not math.isfinite(cut * cut):
        x, y = CUTOFF[fmt]
        raise rd.error(f"the cutoff of {trip} overflows: its square, from {x} = {toks[x].text} and "
                       f"{y} = {toks[y].text}, is not finite", toks[x])


def _arrays(path, names, fmt, elements):
    with TextReader(path) as rd:
        return _read_arrays(rd, names, fmt, elements)


def _read_arrays(rd, names, fmt, elements):
    """Two passes over the file: the first checks every entry and finds the elements, the second,
    with the arrays' size known and within the limit, fills them."""
    first = {}                      # element -> the Token that names it first
    for entry in _entries(rd, names, fmt):
        _check(rd, entry, names, fmt)
        for t in entry[:3]:
            first.setdefault(t.text, t)
    if not first:
        raise rd.error(f"no {fmt} entries in the file", (1, 1))
    elements = tuple(elements) if elements is not None else tuple(first)
    if not elements:
        raise ValueError("elements: an empty list selects no element")
    for e in elements:
        if e not in first:
            raise rd.error(f"element '{e}' is not in this file (it has {', '.join(first)})", (1, 1))
    S = len(elements)
    if S > MAX_SPECIES:
        raise rd.error(f"{S} elements make {S ** 3:,} triplets, more than the limit of {MAX_ELEMENTS:,} elements "
                       f"of a param", first[elements[MAX_SPECIES]])
    species = {e: [s for s, f in enumerate(elements) if f == e] for e in set(elements)}   # an element may repeat
    arrays = {n: np.full((S, S, S), np.nan) for n in names}
    line = np.zeros((S, S, S), dtype=np.int64)      # the line of each triplet's entry; 0: none yet
    for entry in _entries(rd, names, fmt):
        trip = [t.text for t in entry[:3]]
        if not all(e in species for e in trip):
            continue
        values = [float(t.text) for t in entry[3:]]
        for idx in itertools.product(*(species[e] for e in trip)):
            if line[idx]:
                raise rd.error(f"the triplet {' '.join(trip)} is given twice (also on line {line[idx]})", entry[0])
            line[idx] = entry[0].line
            for n, v in zip(names, values):
                arrays[n][idx] = v
    if not line.all():
        idx = tuple(int(i) for i in np.argwhere(line == 0)[0])
        raise rd.error(f"no entry for the triplet {' '.join(elements[i] for i in idx)} of elements "
                       f"{', '.join(elements)}", (1, 1))
    return elements, arrays


def read_sw(files, elements=None):
    elements, p = _arrays(one_file(files, "sw"), SW, "Stillinger-Weber", elements)
    p["cut"] = p["a"] * p["sigma"]
    p["cutsq"] = p["cut"] * p["cut"]
    return Potential("sw", elements, {}, p)


def read_tersoff(files, elements=None):
    elements, p = _arrays(one_file(files, "tersoff"), TERSOFF, "Tersoff", elements)
    n = p["n"]
    p["cut"] = p["R"] + p["D"]
    p["cutsq"] = p["cut"] * p["cut"]
    with np.errstate(divide="ignore"):      # n = 0 in triplets only zeta reads: inf and 0, as in LAMMPS
        p["c1"] = (2.0 * n * 1.0e-16) ** (-1.0 / n)
        p["c2"] = (2.0 * n * 1.0e-8) ** (-1.0 / n)
        p["c3"] = 1.0 / p["c2"]
        p["c4"] = 1.0 / p["c1"]
    return Potential("tersoff", elements, {}, p)
