"""Helpers of a site-energy kernel's `sites` driver (codegen/load.py SITES; the ASE calculator calls it):
rows of neighbourhoods gathered from a neighbour list into a thread's row buffers, and their energies and
gradients scattered into energies, forces and a virial while the rows are still in cache. Against a pass
that packs every row into arrays of the whole step and one that assembles from them, a 4000-atom step
moves no row through memory twice (those passes were bound by memory bandwidth on 2 cores).

The list (adapters/ase/neighbours.py Images): atom i's pairs are first[i] <= e < first[i + 1], pair e's
vector p[J[e]] - p[i] + shifts[code[e]], inside[e] whether it is within the cutoff. Row t is atom
order[t], with count[order[t]] pairs inside.
"""
from numba import njit

from . import cache  # noqa: F401  (before the cache=True functions below: they get adgrad's cache)


@njit(cache=True, nogil=True)
def gather(s0, n, order, first, J, code, shifts, inside, p, species, R, valid, s, sn, index):
    """Rows s0 <= t < s0 + n into buffer rows b = t - s0: the pairs of atom order[t] within the cutoff, in
    list order, as R[b, 3q:3q + 3] (the vector), valid[b, q] = 1, sn[b, q] (the neighbour's species),
    index[b, q] (the neighbour); the slots after them padding (R 0, valid 0, sn 0, index -1); s[b, 0] the
    atom's species."""
    width = valid.shape[1]
    for b in range(n):
        i = order[s0 + b]
        s[b, 0] = species[i]
        xi, yi, zi = p[i, 0], p[i, 1], p[i, 2]
        q = 0
        for e in range(first[i], first[i + 1]):
            if inside[e]:
                a, c = J[e], code[e]
                R[b, 3 * q] = p[a, 0] - xi + shifts[c, 0]
                R[b, 3 * q + 1] = p[a, 1] - yi + shifts[c, 1]
                R[b, 3 * q + 2] = p[a, 2] - zi + shifts[c, 2]
                valid[b, q], index[b, q], sn[b, q] = 1.0, a, species[a]
                q += 1
        for q in range(q, width):
            R[b, 3 * q], R[b, 3 * q + 1], R[b, 3 * q + 2] = 0.0, 0.0, 0.0
            valid[b, q], index[b, q], sn[b, q] = 0.0, -1, 0.0


@njit(cache=True, nogil=True)
def scatter(s0, n, order, count, index, R, E, G, energies, forces, virial):
    """Rows s0 <= t < s0 + n from buffer rows b = t - s0 (atom i = order[t]): energies[i] = E[b, 0];
    F_i += dE_i/dR_ik and F_j -= dE_i/dR_ik for each R_ik = x_j - x_i; virial += R_ik (outer) dE_i/dR_ik
    (dE/d(strain): the stress times the volume). Added in row then slot order into this part's forces and
    virial; the virial summed in locals from its value before (the parts' virials share cache lines)."""
    v00, v01, v02 = virial[0, 0], virial[0, 1], virial[0, 2]
    v10, v11, v12 = virial[1, 0], virial[1, 1], virial[1, 2]
    v20, v21, v22 = virial[2, 0], virial[2, 1], virial[2, 2]
    for b in range(n):
        i = order[s0 + b]
        energies[i] = E[b, 0]
        for q in range(count[i]):
            a = index[b, q]
            g0, g1, g2 = G[b, 3 * q], G[b, 3 * q + 1], G[b, 3 * q + 2]
            r0, r1, r2 = R[b, 3 * q], R[b, 3 * q + 1], R[b, 3 * q + 2]
            forces[i, 0] += g0
            forces[a, 0] -= g0
            forces[i, 1] += g1
            forces[a, 1] -= g1
            forces[i, 2] += g2
            forces[a, 2] -= g2
            v00, v01, v02 = v00 + r0 * g0, v01 + r0 * g1, v02 + r0 * g2
            v10, v11, v12 = v10 + r1 * g0, v11 + r1 * g1, v12 + r1 * g2
            v20, v21, v22 = v20 + r2 * g0, v21 + r2 * g1, v22 + r2 * g2
    virial[0, 0], virial[0, 1], virial[0, 2] = v00, v01, v02
    virial[1, 0], virial[1, 1], virial[1, 2] = v10, v11, v12
    virial[2, 0], virial[2, 1], virial[2, 2] = v20, v21, v22
