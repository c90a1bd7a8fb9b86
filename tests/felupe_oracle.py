"""felupe (with tensortrax, its automatic differentiation) and `hyperelastic`: the oracles of the model library's tests
(tests/test_felupe.py): the strain energy, the first Piola-Kirchhoff stress and the tangent of a
hyperelastic law, and one return-mapping step of small-strain J2 plasticity, at M points at once.

felupe takes a deformation gradient as (3, 3, q, c), with quadrature points and cells as trailing
axes; here q = 1 and c = M (q must be 1 for the plasticity: felupe decides elastic or plastic per cell,
from the cell's first quadrature point). Results are turned back into adgrad's layout (M, *shape).
"""
from __future__ import annotations

import felupe as fem
import hyperelastic as hel
import numpy as np
import tensortrax as tr
import tensortrax.math as tm


def gent(C, mu, Jm):
    """Gent's strain energy of the isochoric part of C (A. N. Gent, Rubber Chem. Technol. 69 (1996)
    59-61), for felupe.Hyperelastic: felupe 11.3 has no Gent function."""
    I1 = tm.linalg.det(C) ** (-1 / 3) * tm.trace(C)
    return -mu * Jm / 2 * tm.log(1 - (I1 - 3) / Jm)


# model file -> (felupe's strain energy function of C, its parameters, the bulk modulus of the
# felupe.Volumetric added or None): the values the model files declare, held here independently of
# them, so that a changed param in a model file fails the comparison
HYPERELASTIC = {
    "neo_hooke": (fem.neo_hooke, {"mu": 1.0}, 2.0),
    "mooney_rivlin": (fem.mooney_rivlin, {"C10": 0.3, "C01": 0.8}, 2.0),
    "yeoh": (fem.yeoh, {"C10": 0.5, "C20": -0.1, "C30": 0.02}, 2.0),
    "third_order_deformation": (fem.third_order_deformation,
                                {"C10": 0.5, "C01": 0.1, "C11": 0.01, "C20": -0.1, "C30": 0.02}, 2.0),
    "arruda_boyce": (fem.arruda_boyce, {"C1": 1.0, "limit": 3.2}, 2.0),
    "gent": (gent, {"mu": 1.0, "Jm": 50.0}, 2.0),
    "van_der_waals": (fem.van_der_waals, {"mu": 1.0, "limit": 5.0, "a": 0.5, "beta": 0.1}, 2.0),
    "saint_venant_kirchhoff": (fem.saint_venant_kirchhoff, {"mu": 1.0, "lmbda": 20.0}, None),
}


def tube_constraint(C, Gc, delta):
    """The I1bar part of the extended tube model, felupe's extended_tube without its stretch part."""
    D = tm.linalg.det(C) ** (-1 / 3) * tm.trace(C) - 3
    return Gc / 2 * ((1 - delta**2) * D / (1 - delta**2 * D) + tm.log(1 - delta**2 * D))


# Stretch-based laws. tensortrax differentiates eigvalsh by perturbing C by sqrt(eps) (errors of 1e-7
# to 1e-5 in felupe's ogden and extended_tube), so the oracle of their stretch part is the
# `hyperelastic` package (exact derivatives, with the limits at equal stretches): model file ->
# (Ogden terms (mu, alpha) of sum 2 mu/alpha^2 (sum lbar**alpha - 3), felupe's invariant part or None, bulk)
STRETCH = {
    "ogden": ([(1.0, 1.7), (0.2, -1.5)], None, 2.0),
    "extended_tube": ([(0.2169, -0.2)], (tube_constraint, {"Gc": 0.1867, "delta": 0.09693}), 2.0),
}
# linear_elastic_plastic_isotropic_hardening: felupe's example lambda = 2, mu = 1, sigma_y = 0.05, K = 0.1
PLASTICITY = {"E": 8 / 3, "nu": 1 / 3, "sy": 0.05, "K": 0.1}


def to_felupe(x):
    """(M, 3, 3) -> (3, 3, 1, M)"""
    return np.ascontiguousarray(np.moveaxis(x, 0, -1)[..., None, :])


def from_felupe(x):
    """(*shape, 1, M) -> (M, *shape)"""
    return np.ascontiguousarray(np.moveaxis(x[..., 0, :], -1, 0))


def hyperelastic(name, F):
    """felupe's W, P = dW/dF and A = d2W/dF2 of library model `name` at F (M, 3, 3):
    (M,), (M, 3, 3), (M, 3, 3, 3, 3)."""
    fun, kwargs, bulk = HYPERELASTIC[name]
    umat = fem.Hyperelastic(fun, **kwargs)
    x = to_felupe(F)
    C = np.einsum("kI...,kJ...->IJ...", x, x)
    with np.errstate(invalid="ignore"):                     # van der Waals is NaN where Im < 3
        W = tr.function(fun, wrt=0, ntrax=2)(C, **kwargs)  # the energy felupe.Hyperelastic differentiates
        if bulk is not None:
            vol = fem.Volumetric(bulk=bulk)
            W = W + vol.function([x])[0]
            umat = umat & vol
        P = umat.gradient([x, None])[0]
        A = umat.hessian([x, None])[0]
    return W[0], from_felupe(P), from_felupe(A)


def stretch_based(name, F):
    """W, P, A of a STRETCH law at F (M, 3, 3): the stretch part by hyperelastic's distortional
    space over its stretch framework, the invariant part and the volumetric one by felupe."""
    terms, invariant, bulk = STRETCH[name]
    x = to_felupe(F)
    C = np.einsum("mki,mkj->mij", F, F)
    lbar2 = np.linalg.det(C)[:, None] ** (-1 / 3) * np.linalg.eigvalsh(C)
    W = sum(2 * mu / a**2 * (np.sum(lbar2 ** (a / 2), axis=1) - 3) for mu, a in terms)
    mu, alpha = zip(*terms)
    umat = hel.DistortionalSpace(hel.StretchesFramework(hel.models.stretches.Ogden(mu=list(mu), alpha=list(alpha))))
    vol = fem.Volumetric(bulk=bulk)
    P = umat.gradient([x, None])[0] + vol.gradient([x, None])[0]
    A = umat.hessian([x, None])[0] + vol.hessian([x, None])[0]
    W = W + vol.function([x])[0][0]
    if invariant is not None:
        fun, kwargs = invariant
        inv = fem.Hyperelastic(fun, **kwargs)
        Cx = np.einsum("kI...,kJ...->IJ...", x, x)
        W = W + tr.function(fun, wrt=0, ntrax=2)(Cx, **kwargs)[0]
        P, A = P + inv.gradient([x, None])[0], A + inv.hessian([x, None])[0]
    return W, from_felupe(P), from_felupe(A)


def plasticity(eps, eps_p, alpha, eps_old):
    """felupe.LinearElasticPlasticIsotropicHardening (params PLASTICITY) at the strain sym(eps) from the
    state (eps_p, alpha) of the previous step, whose strain was eps_old (symmetric): felupe's state
    holds that strain and its stress C:(eps_old - eps_p), and felupe's trial stress is that stress plus
    C:(sym(eps) - eps_old). Returns sigma (M, 3, 3), eps_p_new (M, 3, 3), alpha_new (M,) and
    dsigma/deps (M, 3, 3, 3, 3)."""
    m = len(eps)
    E, nu, sy, K = (PLASTICITY[k] for k in ("E", "nu", "sy", "K"))
    umat = fem.LinearElasticPlasticIsotropicHardening(E=E, nu=nu, sy=sy, K=K)
    lmbda, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    ee = eps_old - eps_p
    sigma_old = 2 * mu * ee + lmbda * np.trace(ee, axis1=1, axis2=2)[:, None, None] * np.eye(3)
    # felupe's state vector per point: [alpha, eps_p (9), previous strain (9), previous stress (9)]
    state = np.concatenate([alpha[:, None], eps_p.reshape(m, 9), eps_old.reshape(m, 9), sigma_old.reshape(m, 9)], 1)
    state = np.ascontiguousarray(state.T[:, None, :])
    x = to_felupe(np.eye(3) + eps)                           # its small-strain framework: strain = sym(F - I)
    with np.errstate(invalid="ignore", divide="ignore"):    # felupe divides by |s| at every point, also s = 0
        sigma, state_new = umat.gradient([x, state.copy()])
        tangent = umat.hessian([x, state.copy()])[0]
    state_new = from_felupe(state_new)
    return from_felupe(sigma), state_new[:, 1:10].reshape(m, 3, 3), state_new[:, 0], from_felupe(tangent)
