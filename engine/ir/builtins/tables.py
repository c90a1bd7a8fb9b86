"""Tables and potentials in expressions: a table param is called like a function, `F(x)`; a potential
param offers its tables and constants as attributes, `cu.F(rho)`, `cu.phi[a, b](r)`, `cu.cutoff`.

Indices in brackets select a table along its leading (species) axes; they are expressions, so a
per-neighbour species array selects per element. A table with no leading axes, or only axes of
length 1, is called without brackets.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..core import Var
from ..ops.tables import tabulated


@dataclass(frozen=True, eq=False)
class TableFunction:
    """A table param in the graph: coef (T, n, 7) is the param Var holding its spline coefficients."""
    name: str
    coef: Var
    lead: tuple                 # the index axes (species); T = prod(lead)
    x0: float
    dx: float
    n: int
    xlin: float
    over_x: bool

    def apply(self, call, x, indices, at):
        """The table at x (a Var), selected by `indices` (Vars, one per leading axis)."""
        if not indices and any(k != 1 for k in self.lead):
            raise call.fail(f"'{self.name}' holds tables for {'x'.join(map(str, self.lead))} species "
                            f"combinations; select one with {self.name}[{', '.join('ijk'[:len(self.lead)])}](x)", at)
        if indices and len(indices) != len(self.lead):
            raise call.fail(f"'{self.name}' takes {len(self.lead)} species index(es), got {len(indices)}", at)
        t = flat_index(call, indices, self.lead) if indices else 0.0
        y = tabulated(call.emit, self.coef, x, t, x0=self.x0, rdx=1.0 / self.dx, n=self.n,
                      ntab=math.prod(self.lead), xlin=self.xlin)
        return call.emit("div", y, x) if self.over_x else y


@dataclass(frozen=True, eq=False)
class ConstantTable:
    """Per-species constants of a potential (e.g. Tersoff's A[i, j, k]): the flat param Var `flat` of
    an array of shape `lead`, read by `take` with a runtime flat index."""
    name: str
    flat: Var
    lead: tuple

    def select(self, call, indices, at):
        if len(indices) != len(self.lead):
            raise call.fail(f"'{self.name}' takes {len(self.lead)} species index(es), got {len(indices)}", at)
        t = flat_index(call, indices, self.lead)
        return call.emit("take", self.flat, t)


@dataclass(frozen=True, eq=False)
class TableSet:
    """A potential param: tables (name -> TableFunction) and constants (name -> float or ConstantTable)."""
    name: str
    tables: dict
    constants: dict

    def attribute(self, attr):
        if attr in self.tables:
            return self.tables[attr]
        if attr in self.constants:
            return self.constants[attr]
        return None

    def names(self):
        return ", ".join([*self.tables, *self.constants])


def flat_index(call, indices, lead):
    """The row-major flat index of species indices (Vars) into an array of shape `lead` (Horner)."""
    t = indices[0]
    for k, i in enumerate(indices[1:], start=1):
        t = call.emit("add", call.emit("mul", t, float(lead[k])), i)
    return t
