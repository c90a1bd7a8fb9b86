"""Ogden benchmark: adgrad's stress and tangent against a hand-written numba kernel, felupe and `hyperelastic`.

Model: configs/models/ogden.yaml as shipped (mu1 = 1.0, alpha1 = 1.7, mu2 = 0.2, alpha2 = -1.5, bulk = 2.0):
    W(F) = sum_i c_i (lbar_1^alpha_i + lbar_2^alpha_i + lbar_3^alpha_i - 3) + bulk/2 (J - 1)^2,
    c_i = 2 mu_i/alpha_i^2,  C = F^T F,  J = det F,  lbar_k^2 = m_k the eigenvalues of Cbar = J^(-2/3) C.
Per point: W, P = dW/dF (3x3) and A = d2W/dF2 (3x3x3x3, A[i, J, k, L] = dP[i, J]/dF[k, L]).

The hand-written kernel (one prange over blocks of points, IEEE arithmetic as adgrad compiles) works in the
eigenbasis N_a of Cbar (adgrad's cyclic Jacobi `eigh3`). With p_i = alpha_i/2, beta_ia = m_a^p_i,
Sb_i = sum_a beta_ia, r = J^(-2/3) and the log-derivatives of W in the eigenvalues mu_a = m_a/r of C,
    D_a  = sum_i c_i p_i (beta_ia - Sb_i/3) + bulk (J - 1) J/2
    D_ab = sum_i c_i p_i^2 (d_ab beta_ia - (beta_ia + beta_ib)/3 + Sb_i/9) + bulk (2J - 1) J/4,
the derivatives w_a = dW/dmu_a = r D_a/m_a, W_ab = d2W/dmu_a dmu_b = r^2 (D_ab - d_ab D_a)/(m_a m_b) and the
divided differences h_ab = (w_a - w_b)/(mu_a - mu_b) = r^2 (sum_i c_i p_i pow_(p_i-1)[m_a, m_b] + K/(m_a m_b)),
K = sum_i c_i p_i Sb_i/3 - bulk (J - 1) J/2 (w_a = h(mu_a) for one function h, so the limit at equal
eigenvalues is h'(mu_a)); pow_q[a, b] = (a^q - b^q)/(a - b) is q a^(q-1) at a = b and b^(q-1) expm1(q
log1p(d/b))/(d/b) for |d| <= max(a, b)/2, so it is free of cancellation at near-equal stretches. Then with
f_a = F N_a, e_a = f_a (x) N_a and E_ab = f_a (x) N_b + f_b (x) N_a (dC_ab = E_ab : dF in the eigenbasis):
    P = 2 sum_a w_a e_a
    A = 4 sum_ab W_ab e_a (x) e_b + 2 sum_(a<b) h_ab E_ab (x) E_ab + 2 d_ik sum_a w_a N_a[J] N_a[L].

It times, interleaved round-robin in one process after one warm-up call each, medians of --repeats rounds:
  hand P+A             the kernel above, W, P and A into preallocated arrays (the reference)
  adgrad P+A           compile_model(derivatives=[("W", "F"), ("W", ["F", "F"])]), evaluate(out=..., threads=)
  adgrad P             compile_model(derivatives=[("W", "F")]) (a diagnostic: what the tangent costs)
  felupe P+A           Hyperelastic(ogden, mu, alpha) & Volumetric(bulk): .gradient([x, None]), .hessian([x, None])
  felupe parallel P+A  the same with parallel=True (felupe's thread pool over chunks of 8192 points)
  hyperelastic P+A     DistortionalSpace(StretchesFramework(Ogden(mu, alpha))) plus felupe's Volumetric, gradient
                       and hessian (its hessian recomputes the gradient internally)
  helpers: ...         diagnostics: adgrad's spectral helpers (engine/numeric/spectral.py) alone, per point on
                       its Cbar, cumulative: eigh3; + what the P kernel adds: per term lam**(p - 1) (3 pows) and
                       lam**p = lam**(p - 1) lam, one eigvals_dt (U diag(w) U^T, both terms' w combined); + what the
                       P+A kernel adds: the log1p of the 3 eigenvalue gaps, 2 matfun_dd1 (given the powers and the
                       log1p) and 9 matfun_d1 (one per direction, both terms' divided differences combined)
felupe and hyperelastic get x = F as (3, 3, 1, M), prepared once, untimed. Points: F = I + 0.2 N(0, 1) with
det F > 0, plus 1% F = I, 1% uniaxial diag(s, s^-1/2, s^-1/2) and 1% rotated uniaxial diag(...) R (two equal
stretches up to round-off), s in [0.5, 3], shuffled. Before timing, the hand kernel must equal adgrad to 1e-10
(norm-wise per point, |a - b|_F / max(|b|_F, 1e-3 median |b|_F)); felupe's and hyperelastic's differences
from adgrad are printed (felupe's tensortrax perturbs C by sqrt(eps) to split equal eigenvalues: ~1e-6).

    python benchmarks/continuum.py                 # M = 100,000, 7 rounds
    python benchmarks/continuum.py --quick         # M = 10,000
The issue's targets: adgrad P+A at least 20x faster than felupe per point; within 1.5x of the hand kernel.
"""
import argparse
import math
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

from adgrad.engine.numeric.spectral import eigh3, eigvals_dt, matfun_d1, matfun_dd1
from _harness import (KERNEL_OPTS, SPREAD_NOTE, check_error, compile_times, environment, print_compile_table,
                      start, time_calls)

MODEL = "configs/models/ogden.yaml"
MODEL_PATH = str(Path(__file__).resolve().parent.parent / MODEL)
MU1, ALPHA1, MU2, ALPHA2, BULK = 1.0, 1.7, 0.2, -1.5, 2.0      # the file's params
C1, C2 = 2 * MU1 / ALPHA1**2, 2 * MU2 / ALPHA2**2
P1, P2 = ALPHA1 / 2, ALPHA2 / 2
TARGET_HAND, TARGET_FELUPE = 1.5, 20.0
BLOCK = 256            # points per prange iteration of the hand kernel (scratch allocated once per block)
OPTS = dict(KERNEL_OPTS, error_model="numpy")                  # as adgrad's kernels

# ---------------------------------------------------------------- the hand-written kernel


@njit(inline="always", error_model="numpy")
def _pow_dd(ma, mb, b1a, b1b, b2a, b2b):
    """sum_i c_i p_i pow_(p_i - 1)[ma, mb], given b_ia = ma^p_i: exact at ma = mb, no cancellation near it."""
    q1, q2 = P1 - 1.0, P2 - 1.0
    d = ma - mb
    if d == 0.0:
        return (C1 * P1 * q1 * b1a + C2 * P2 * q2 * b2a) / (ma * ma)
    if abs(d) <= 0.5 * max(ma, mb):
        h = d / mb
        lg = math.log1p(h)
        return (C1 * P1 * b1b * math.expm1(q1 * lg) + C2 * P2 * b2b * math.expm1(q2 * lg)) / (mb * mb * h)
    return (C1 * P1 * (b1a / ma - b1b / mb) + C2 * P2 * (b2a / ma - b2b / mb)) / d


@njit(inline="always", error_model="numpy")
def _det_and_cbar(F, i, Cb):
    """J = det F[i]; Cb (9) = J^(-2/3) F^T F. Returns (J, r = J^(-2/3))."""
    f = F[i]
    J = (f[0] * (f[4] * f[8] - f[5] * f[7]) - f[1] * (f[3] * f[8] - f[5] * f[6])
         + f[2] * (f[3] * f[7] - f[4] * f[6]))
    r = J ** (-2.0 / 3.0)
    for M in range(3):
        for N in range(M, 3):
            c = r * (f[M] * f[N] + f[3 + M] * f[3 + N] + f[6 + M] * f[6 + N])
            Cb[3 * M + N] = c
            Cb[3 * N + M] = c
    return J, r


@njit(inline="always", error_model="numpy")
def _point(F, i, W, P, A, Cb, m, Nv, beta, w, Wab, hp, e, g, E, H):
    """W[i], P[i] (9) and A[i] (81) of point i; the other arrays are scratch."""
    f = F[i]
    J, r = _det_and_cbar(F, i, Cb)
    eg = eigh3((Cb[0], Cb[1], Cb[2], Cb[3], Cb[4], Cb[5], Cb[6], Cb[7], Cb[8]))
    for a in range(3):
        m[a] = eg[a]
        for k in range(3):
            Nv[a, k] = eg[3 + 3 * k + a]              # N_a = column a of U
        lg = math.log(m[a])
        beta[0, a] = math.exp(P1 * lg)
        beta[1, a] = math.exp(P2 * lg)
    s1 = beta[0, 0] + beta[0, 1] + beta[0, 2]
    s2 = beta[1, 0] + beta[1, 1] + beta[1, 2]
    W[i] = C1 * (s1 - 3.0) + C2 * (s2 - 3.0) + 0.5 * BULK * (J - 1.0) ** 2
    V = 0.5 * BULK * (J - 1.0) * J
    V2 = 0.25 * BULK * (2.0 * J - 1.0) * J
    K = C1 * P1 * s1 / 3.0 + C2 * P2 * s2 / 3.0 - V
    r2 = r * r
    for a in range(3):
        Da = C1 * P1 * (beta[0, a] - s1 / 3.0) + C2 * P2 * (beta[1, a] - s2 / 3.0) + V
        w[a] = r * Da / m[a]
        for b in range(a + 1):
            Dab = (C1 * P1 * P1 * (s1 / 9.0 - (beta[0, a] + beta[0, b]) / 3.0)
                   + C2 * P2 * P2 * (s2 / 9.0 - (beta[1, a] + beta[1, b]) / 3.0) + V2)
            if a == b:
                Dab += C1 * P1 * P1 * beta[0, a] + C2 * P2 * P2 * beta[1, a] - Da
            Wab[a, b] = Wab[b, a] = 4.0 * r2 * Dab / (m[a] * m[b])
    for p in range(3):                                # pairs (0, 1), (0, 2), (1, 2)
        a, b = (0, 0, 1)[p], (1, 2, 2)[p]
        hp[p] = 2.0 * r2 * (_pow_dd(m[a], m[b], beta[0, a], beta[0, b], beta[1, a], beta[1, b])
                            + K / (m[a] * m[b]))
    for a in range(3):                                # e_a = (F N_a) (x) N_a and P
        for I in range(3):
            fa = f[3 * I] * Nv[a, 0] + f[3 * I + 1] * Nv[a, 1] + f[3 * I + 2] * Nv[a, 2]
            for L in range(3):
                e[a, 3 * I + L] = fa * Nv[a, L]
    for n in range(9):
        P[i, n] = 2.0 * (w[0] * e[0, n] + w[1] * e[1, n] + w[2] * e[2, n])
        for a in range(3):
            g[a, n] = Wab[a, 0] * e[0, n] + Wab[a, 1] * e[1, n] + Wab[a, 2] * e[2, n]
    for p in range(3):                                # E_ab = f_a (x) N_b + f_b (x) N_a, H = h_ab E_ab
        a, b = (0, 0, 1)[p], (1, 2, 2)[p]
        for I in range(3):
            fa = f[3 * I] * Nv[a, 0] + f[3 * I + 1] * Nv[a, 1] + f[3 * I + 2] * Nv[a, 2]
            fb = f[3 * I] * Nv[b, 0] + f[3 * I + 1] * Nv[b, 1] + f[3 * I + 2] * Nv[b, 2]
            for L in range(3):
                v = fa * Nv[b, L] + fb * Nv[a, L]
                E[p, 3 * I + L] = v
                H[p, 3 * I + L] = hp[p] * v
    for x in range(9):                                # the lower triangle of the 9x9 A, mirrored
        for y in range(x + 1):
            v = (e[0, x] * g[0, y] + e[1, x] * g[1, y] + e[2, x] * g[2, y]
                 + E[0, x] * H[0, y] + E[1, x] * H[1, y] + E[2, x] * H[2, y])
            if x // 3 == y // 3:                      # i == k: 2 S~_JL
                J_, L_ = x % 3, y % 3
                v += 2.0 * (w[0] * Nv[0, J_] * Nv[0, L_] + w[1] * Nv[1, J_] * Nv[1, L_]
                            + w[2] * Nv[2, J_] * Nv[2, L_])
            A[i, 9 * x + y] = v
            A[i, 9 * y + x] = v


@njit(**OPTS)
def hand_stress_tangent(F, W, P, A):
    """F (M, 9) -> W (M,), P (M, 9), A (M, 81)."""
    M = F.shape[0]
    for blk in prange((M + BLOCK - 1) // BLOCK):
        Cb, m, Nv, beta = np.empty(9), np.empty(3), np.empty((3, 3)), np.empty((2, 3))
        w, Wab, hp = np.empty(3), np.empty((3, 3)), np.empty(3)
        e, g, E, H = np.empty((3, 9)), np.empty((3, 9)), np.empty((3, 9)), np.empty((3, 9))
        for i in range(blk * BLOCK, min(M, (blk + 1) * BLOCK)):
            _point(F, i, W, P, A, Cb, m, Nv, beta, w, Wab, hp, e, g, E, H)


# ---------------------------------------------------------------- diagnostics: adgrad's spectral helpers alone

@njit(**OPTS)
def helpers(F, out, level):
    """adgrad's spectral helper calls alone, on each point's Cbar: level 0 only eigh3; level 1 also the powers
    and the one rotation of adgrad's P kernel; level 2 also the log1p of the gaps, matfun_dd1 per term and
    matfun_d1 with the terms' divided differences combined in each of the 9 directions (here the unit matrices):
    the calls adgrad's P+A kernel makes."""
    M = F.shape[0]
    for blk in prange((M + BLOCK - 1) // BLOCK):
        Cb = np.empty(9)
        for i in range(blk * BLOCK, min(M, (blk + 1) * BLOCK)):
            _det_and_cbar(F, i, Cb)
            cb = (Cb[0], Cb[1], Cb[2], Cb[3], Cb[4], Cb[5], Cb[6], Cb[7], Cb[8])
            eg = eigh3(cb)
            acc = eg[0] + eg[3]
            l0, l1, l2 = eg[0], eg[1], eg[2]
            t1 = (l0 ** (P1 - 1.0), l1 ** (P1 - 1.0), l2 ** (P1 - 1.0))
            t2 = (l0 ** (P2 - 1.0), l1 ** (P2 - 1.0), l2 ** (P2 - 1.0))
            if level > 0:
                acc += t1[0] * l0 + t1[1] * l1 + t1[2] * l2 + t2[0] * l0 + t2[1] * l1 + t2[2] * l2
                acc += eigvals_dt(eg, (C1 * t1[0] + C2 * t2[0], C1 * t1[1] + C2 * t2[1], C1 * t1[2] + C2 * t2[2]))[0]
            if level > 1:
                gaps = (math.log1p((l0 - l1) / l1), math.log1p((l0 - l2) / l2), math.log1p((l1 - l2) / l2))
                g1, g2 = matfun_dd1(eg, 0, P1 - 1.0, t1, gaps), matfun_dd1(eg, 0, P2 - 1.0, t2, gaps)
                g = (g1[0] + g2[0], g1[1] + g2[1], g1[2] + g2[2], g1[3] + g2[3], g1[4] + g2[4], g1[5] + g2[5])
                for s in range(9):
                    d = (1.0 if s == 0 else 0.0, 1.0 if s == 1 else 0.0, 1.0 if s == 2 else 0.0,
                         1.0 if s == 3 else 0.0, 1.0 if s == 4 else 0.0, 1.0 if s == 5 else 0.0,
                         1.0 if s == 6 else 0.0, 1.0 if s == 7 else 0.0, 1.0 if s == 8 else 0.0)
                    acc += matfun_d1(eg, g, d)[s]
            out[i] = acc


# ---------------------------------------------------------------- points

KINDS = ("random", "F = I", "uniaxial", "rotated uniaxial")


def make_points(M, seed=0):
    """F (M, 3, 3): I + 0.2 N(0, 1) with det F > 0, and 1% each of F = I, uniaxial and rotated uniaxial;
    and each point's kind (an index into KINDS)."""
    rng = np.random.default_rng(seed)
    n_special = M // 100
    n_rand = M - 3 * n_special
    rand = np.empty((0, 3, 3))
    while len(rand) < n_rand:
        G = np.eye(3) + 0.2 * rng.standard_normal((2 * n_rand, 3, 3))
        rand = np.concatenate([rand, G[np.linalg.det(G) > 0]])
    s = rng.uniform(0.5, 3.0, n_special)
    uni = np.zeros((n_special, 3, 3))
    uni[:, 0, 0], uni[:, 1, 1], uni[:, 2, 2] = s, s ** -0.5, s ** -0.5
    Q, _ = np.linalg.qr(rng.standard_normal((n_special, 3, 3)))
    Q *= np.sign(np.linalg.det(Q))[:, None, None]      # rotations
    F = np.concatenate([rand[:n_rand], np.broadcast_to(np.eye(3), (n_special, 3, 3)), uni, uni @ Q])
    kind = np.repeat(np.arange(4), [n_rand, n_special, n_special, n_special])
    order = rng.permutation(M)
    return np.ascontiguousarray(F[order]), kind[order]


# ---------------------------------------------------------------- runners

def hand_runner(M):
    W, P, A = np.empty(M), np.empty((M, 3, 3)), np.empty((M, 3, 3, 3, 3))
    P9, A81 = P.reshape(M, 9), A.reshape(M, 81)
    return (lambda F: hand_stress_tangent(F.reshape(M, 9), W, P9, A81)), {"W": W, "dW_dF": P, "d2W_dF_dF": A}


def adgrad_runners(M, threads):
    from adgrad.engine import compile_model, load_model
    model = load_model(MODEL_PATH)
    runners, compile_s, kernels = {}, {}, {}
    for name, derivs in {"adgrad P+A": [("W", "F"), ("W", ["F", "F"])], "adgrad P": [("W", "F")]}.items():
        t0 = time.perf_counter()
        kernel = compile_model(model, derivatives=derivs)
        compile_s[name] = time.perf_counter() - t0
        out = {"W": np.empty(M), "dW_dF": np.empty((M, 3, 3))}
        if len(derivs) > 1:
            out["d2W_dF_dF"] = np.empty((M, 3, 3, 3, 3))
        runners[name] = (lambda F, k=kernel, o=out: k.evaluate({"F": F}, out=o, threads=threads), out)
        kernels[name] = kernel
    return runners, compile_s, kernels


def library_runners(F):
    """felupe (serial and parallel) and hyperelastic; each fills a dict with P, A in adgrad's layout."""
    import felupe as fem
    import hyperelastic as hel
    x = np.ascontiguousarray(np.moveaxis(F, 0, -1)[..., None, :])            # (3, 3, 1, M)
    runners = {}

    def felupe_runner(parallel):
        umat = fem.Hyperelastic(fem.ogden, mu=[MU1, MU2], alpha=[ALPHA1, ALPHA2], parallel=parallel)
        umat = umat & fem.Volumetric(bulk=BULK)
        res = {}

        def run(_):
            res["dW_dF"] = umat.gradient([x, None])[0]
            res["d2W_dF_dF"] = umat.hessian([x, None])[0]
        return run, res

    runners["felupe P+A"] = felupe_runner(False)
    runners["felupe parallel P+A"] = felupe_runner(True)
    space = hel.DistortionalSpace(hel.StretchesFramework(hel.models.stretches.Ogden(mu=[MU1, MU2],
                                                                                     alpha=[ALPHA1, ALPHA2])))
    vol = fem.Volumetric(bulk=BULK)
    res = {}

    def run_hel(_):
        res["dW_dF"] = space.gradient([x, None])[0] + vol.gradient([x, None])[0]
        res["d2W_dF_dF"] = space.hessian([x, None])[0] + vol.hessian([x, None])[0]
    runners["hyperelastic P+A"] = (run_hel, res)
    return runners


HELPER_ROWS = {"helpers: eigh3": 0, "helpers: + 6 pow, 1 eigvals_dt (P's)": 1,
               "helpers: + 3 log1p, 2 matfun_dd1, 9 matfun_d1 (all of P+A's)": 2}


def helper_runners(M):
    out = np.empty(M)
    return {name: (lambda F, lv=level: helpers(F.reshape(M, 9), out, lv), {}) for name, level in HELPER_ROWS.items()}


# ---------------------------------------------------------------- agreement

def from_felupe(a):
    """(*shape, 1, M) -> (M, *shape)"""
    return np.moveaxis(a[..., 0, :], -1, 0)


def normwise(a, b, mask=None):
    """Per point |a - b|_F / max(|b|_F, 1e-3 median |b|_F) (the median over all points): (max, median) over
    the points, or over those of `mask`."""
    M = len(b)
    a, b = np.asarray(a).reshape(M, -1), np.asarray(b).reshape(M, -1)
    nb = np.linalg.norm(b, axis=1)
    err = np.linalg.norm(a - b, axis=1) / np.maximum(nb, 1e-3 * np.median(nb))
    if mask is not None:
        err = err[mask]
    return float(err.max()), float(np.median(err))


def check_and_report(outs, kind, tol=1e-10):
    ref = outs["adgrad P+A"]
    figures = {}
    for key in ("W", "dW_dF", "d2W_dF_dF"):
        err, _ = normwise(outs["hand P+A"][key], ref[key])
        check_error(f"hand {key} vs adgrad (norm-wise per point)", err, tol,
                    f"hand {key} disagrees with adgrad: {err:.2e} > {tol:.0e}")
        figures[("hand", key)] = err
        per_kind = [normwise(outs["hand P+A"][key], ref[key], kind == k)[0] for k in range(len(KINDS))]
        print("    by kind: " + ", ".join(f"{n} {e:.1e}" for n, e in zip(KINDS, per_kind)))
    for key in ("W", "dW_dF"):
        figures[("adgrad P", key)] = normwise(outs["adgrad P"][key], ref[key])[0]
    print("  adgrad P kernel vs adgrad P+A kernel: W %.1e, P %.1e" % (figures[("adgrad P", "W")],
                                                                       figures[("adgrad P", "dW_dF")]))
    for lib in ("felupe P+A", "felupe parallel P+A", "hyperelastic P+A"):
        for key in ("dW_dF", "d2W_dF_dF"):
            mx, med = normwise(from_felupe(outs[lib][key]), ref[key])
            figures[(lib, key)] = (mx, med)
            print(f"  {lib} {key} vs adgrad (norm-wise per point): max {mx:.1e}, median {med:.1e}")
    return figures


# ---------------------------------------------------------------- driver

COMPILE_SNIPPET = """
import sys, time, numpy as np
t0 = time.perf_counter()
from adgrad.engine import load_model, compile_model
t1 = time.perf_counter()
k = compile_model(load_model(sys.argv[1]), derivatives=eval(sys.argv[2]))
t2 = time.perf_counter()
k.evaluate({"F": np.eye(3)[None].repeat(4, 0)})
t3 = time.perf_counter()
print(t2 - t1, t3 - t2)
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.set_defaults(repeats=7)
    args, M = start(p, argv, 100_000, 10_000, "print adgrad's P+A kernel source")
    F, kind = make_points(M)
    print(f"\nOgden ({MODEL}: mu {MU1}, {MU2}; alpha {ALPHA1}, {ALPHA2}; bulk {BULK}), M={M:,}, "
          f"min det F {np.linalg.det(F).min():.3g}")
    runners = {"hand P+A": hand_runner(M)}
    ad, compile_s, kernels = adgrad_runners(M, args.threads)
    runners.update(ad)
    runners.update(library_runners(F))
    runners.update(helper_runners(M))
    first = {}
    for name, (fn, _) in runners.items():            # fill every output once, then check before timing
        t0 = time.perf_counter()
        fn(F)
        first[name] = time.perf_counter() - t0
    figures = check_and_report({n: r[1] for n, r in runners.items()}, kind)
    for name, s in first.items():
        extra = f", compile_model {compile_s[name]:.2f} s" if name in compile_s else ""
        print(f"  {name}: first call (incl. numba compile) {s:.3f} s{extra}")
    timed = time_calls(runners, (F,), args.repeats)
    ctimes = None if args.no_compile_times else compile_times(
        {name: [COMPILE_SNIPPET, MODEL_PATH, repr(d)] for name, d in
         {"adgrad P+A": [("W", "F"), ("W", ["F", "F"])], "adgrad P": [("W", "F")]}.items()})
    if args.show_source:
        print(kernels["adgrad P+A"].source)

    print("\n" + environment())
    ad_t, hand_t = timed["adgrad P+A"][1], timed["hand P+A"][1]
    print("\n| M | kernel | ns/point (median) | spread | / hand P+A | / adgrad P+A |")
    print("|---:|---|---:|---:|---:|---:|")
    for name, (_, med, spread) in timed.items():
        print(f"| {M:,} | {name} | {med / M * 1e9:.1f} | {spread:.0%} | {med / hand_t:.2f} | {med / ad_t:.2f} |")
    print(SPREAD_NOTE)
    r_hand = ad_t / hand_t
    r_fe, r_fep = timed["felupe P+A"][1] / ad_t, timed["felupe parallel P+A"][1] / ad_t
    r_hel = timed["hyperelastic P+A"][1] / ad_t
    print(f"target: adgrad P+A / hand P+A <= {TARGET_HAND}: {r_hand:.2f} "
          f"({'met' if r_hand <= TARGET_HAND else 'MISSED'})")
    print(f"target: felupe P+A / adgrad P+A >= {TARGET_FELUPE:.0f}: {r_fe:.2f} serial, {r_fep:.2f} parallel "
          f"({'met' if min(r_fe, r_fep) >= TARGET_FELUPE else 'MISSED'})")
    print(f"hyperelastic P+A / adgrad P+A: {r_hel:.2f}")
    print("agreement (norm-wise per point, max): hand vs adgrad W %.1e, P %.1e, A %.1e; "
          "felupe vs adgrad P %.1e, A %.1e; hyperelastic vs adgrad P %.1e, A %.1e" % (
              figures[("hand", "W")], figures[("hand", "dW_dF")], figures[("hand", "d2W_dF_dF")],
              figures[("felupe P+A", "dW_dF")][0], figures[("felupe P+A", "d2W_dF_dF")][0],
              figures[("hyperelastic P+A", "dW_dF")][0], figures[("hyperelastic P+A", "d2W_dF_dF")][0]))
    if ctimes:
        print_compile_table(ctimes)


if __name__ == "__main__":
    main()
