"""Write the silicon parameter files of the shipped three-body examples, in LAMMPS's formats, from the
published parameters (so the examples need no file of another project):

  data/Si_sw85.sw              Stillinger and Weber, Phys. Rev. B 31, 5262 (1985)
  data/Si_tersoff88.tersoff    Tersoff, Phys. Rev. B 37, 6991 (1988), silicon (the "Si(B)" set)

Run: python data/make_si_potentials.py  (writes the files beside this script).
"""
from pathlib import Path

SW = {  # epsilon (eV), sigma (A), a, lambda, gamma, cos(theta0), A, B, p, q, tol
    "epsilon": 2.1683, "sigma": 2.0951, "a": 1.80, "lambda": 21.0, "gamma": 1.20, "costheta0": -1.0 / 3.0,
    "A": 7.049556277, "B": 0.6022245584, "p": 4.0, "q": 0.0, "tol": 0.0}
TERSOFF = {  # m, gamma, lambda3 (1/A), c, d, h = cos(theta0), n, beta, lambda2 (1/A), B (eV), R (A), D (A), lambda1, A
    "m": 3.0, "gamma": 1.0, "lambda3": 1.3258, "c": 4.8381, "d": 2.0417, "h": 0.0, "n": 22.956, "beta": 0.33675,
    "lambda2": 1.3258, "B": 95.373, "R": 3.0, "D": 0.2, "lambda1": 3.2394, "A": 3264.7}


def entry(params):
    return "Si Si Si " + " ".join(repr(v) for v in params.values()) + "\n"


def main():
    here = Path(__file__).resolve().parent
    (here / "Si_sw85.sw").write_text(
        "# Stillinger-Weber silicon, Phys. Rev. B 31, 5262 (1985); written by data/make_si_potentials.py\n"
        "# elements, then: " + " ".join(SW) + "\n" + entry(SW))
    (here / "Si_tersoff88.tersoff").write_text(
        "# Tersoff silicon, Phys. Rev. B 37, 6991 (1988); written by data/make_si_potentials.py\n"
        "# elements, then: " + " ".join(TERSOFF) + "\n" + entry(TERSOFF))
    print("wrote", here / "Si_sw85.sw", "and", here / "Si_tersoff88.tersoff")


if __name__ == "__main__":
    main()
