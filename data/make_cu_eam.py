"""Write data/Cu_zhou04.eam.alloy: the EAM potential of copper of Zhou, Johnson and Wadley (Phys. Rev. B
69, 144113 (2004)), tabulated by us in LAMMPS's setfl format from the paper's analytic functions and
Cu parameters, so the shipped example needs no file of another project.

    phi(r) = A exp(-alpha (r/re - 1)) / (1 + (r/re - kappa)^20) - B exp(-beta (r/re - 1)) / (1 + (r/re - lambda)^20)
    f(r)   = fe exp(-beta (r/re - 1)) / (1 + (r/re - lambda)^20)
    F(rho) = sum_i Fn_i (rho/rho_n - 1)^i           rho < rho_n = 0.85 rho_e
           = sum_i F_i (rho/rho_e - 1)^i            rho_n <= rho < rho_0 = 1.15 rho_e
           = Fe (1 - eta ln(rho/rho_s)) (rho/rho_s)^eta     rho_0 <= rho

The table: r on [0, 6] A (2001 points; phi and f are below 1e-6 eV beyond), rho on [0, 2 rho_e]
(2001 points). Run: python data/make_cu_eam.py  (writes the file beside this script).
"""
from pathlib import Path

import numpy as np

CU = dict(re=2.556162, fe=1.554485, rho_e=21.175871, rho_s=21.175395, alpha=8.127620, beta=4.334731,
          A=0.396620, B=0.548085, kappa=0.308782, lam=0.756515, Fn=(-2.170269, -0.263788, 1.088878, -0.817603),
          F=(-2.19, 0.0, 0.561830, -2.100595), eta=0.310490, Fe=-2.186568)
MASS, LATTICE = 63.546, 3.615
CUTOFF, NR, NRHO = 6.0, 2001, 2001


def pair(r, p=CU):
    x = r / p["re"]
    return (p["A"] * np.exp(-p["alpha"] * (x - 1)) / (1 + (x - p["kappa"]) ** 20)
            - p["B"] * np.exp(-p["beta"] * (x - 1)) / (1 + (x - p["lam"]) ** 20))


def density(r, p=CU):
    x = r / p["re"]
    return p["fe"] * np.exp(-p["beta"] * (x - 1)) / (1 + (x - p["lam"]) ** 20)


def embedding(rho, p=CU):
    rn, r0 = 0.85 * p["rho_e"], 1.15 * p["rho_e"]
    low = sum(c * (rho / rn - 1) ** i for i, c in enumerate(p["Fn"]))
    mid = sum(c * (rho / p["rho_e"] - 1) ** i for i, c in enumerate(p["F"]))
    with np.errstate(divide="ignore", invalid="ignore"):
        s = rho / p["rho_s"]
        high = p["Fe"] * (1 - p["eta"] * np.log(s)) * s ** p["eta"]
    return np.where(rho < rn, low, np.where(rho < r0, mid, high))


def setfl_text():
    dr, drho = CUTOFF / (NR - 1), 2 * CU["rho_e"] / (NRHO - 1)
    r, rho = np.arange(NR) * dr, np.arange(NRHO) * drho

    def block(v):
        return "\n".join(" ".join(f"{x:.16e}" for x in v[i:i + 5]) for i in range(0, len(v), 5))
    head = ["Cu: Zhou, Johnson and Wadley, Phys. Rev. B 69, 144113 (2004)",
            "tabulated by adgrad data/make_cu_eam.py from the analytic functions and parameters of the paper",
            "setfl format (LAMMPS pair_style eam/alloy)",
            "1 Cu", f"{NRHO} {drho!r} {NR} {dr!r} {CUTOFF!r}", f"29 {MASS} {LATTICE} fcc"]
    return "\n".join(head + [block(embedding(rho)), block(density(r)), block(r * pair(r))]) + "\n"


if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "Cu_zhou04.eam.alloy"
    out.write_text(setfl_text())
    print(f"wrote {out}")
