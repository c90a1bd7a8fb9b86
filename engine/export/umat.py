"""The Abaqus UMAT of an exported model: what its kernel computes, the names CalculiX needs, and the
C entry point (docs/native.md is its contract).

A model's (or a config's) `export: umat:` section (engine/spec.py UmatDecl) names the 3x3 input
the strain or the deformation gradient comes in, the stress, the state and the params read from
PROPS. The kernel is compiled for the stress, its derivative with respect to that input (the
tangent; for a model with a `solve:` the consistent one) and the new state, and the UMAT calls the
kernel's point function once per call: small strain, it is the model's stress and derivative in
Voigt form; finite strain, they are turned into the rotated Cauchy stress and the tangent CalculiX's
@ABAQUSNL route expects (docs/native.md). A point whose results are not finite (a local solve that
did not converge gives NaN: engine/solve.py) leaves STRESS and STATEV as they came and asks for a
smaller increment through PNEWDT; so do a deck's wrong NPROPS or NSTATV, with one line on stderr.
Every call works on its own stack (or heap) scratch: several threads may call at once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import SpecError
from ..spec import derivative_name

FUNC = "UMAT"           # the entry point CalculiX finds by dlsym (its material name's last part)
CUT = 0.5               # PNEWDT a failed point asks for: the increment is halved
STACK_DOUBLES = 8192    # scratch up to this many doubles lives on the caller's stack, more on the heap
LIB_NAME = re.compile(r"[A-Z][A-Z0-9]*\Z")
MATERIAL_LENGTH = 80    # CalculiX's (and Abaqus's) material names


@dataclass(frozen=True)
class Plan:
    """A UMAT over a compiled kernel: the decl, and the kernel's result names it reads."""
    decl: object            # spec.UmatDecl
    stress: str             # the result holding the stress (an output, or d{W}_d{x})
    tangent: str            # the result holding the stress's derivative wrt the input
    energy: str | None      # W when the stress is its gradient (SSE), else None

    @property
    def finite(self):
        return self.decl.kinematics == "F"


def section(model, config):
    """The export.umat decl in force (a config's export: replaces the model's), or a SpecError."""
    for owner in (config, model.spec):
        export = getattr(owner, "export", None) if owner is not None else None
        if export is not None:
            if export.umat is None:
                raise SpecError("export: has no umat: section; adgrad export --umat needs one (docs/native.md)",
                                export.loc.path, export.loc.line, export.loc.col)
            return export.umat
    raise SpecError(f"model '{model.name}' has no export: umat: section; adgrad export --umat needs one naming its "
                    f"strain or F input, its stress, its state and its PROPS (docs/native.md)", model.spec.path)


def requests(decl):
    """(values, derivatives) the kernel of a UMAT computes."""
    state = [out for out, _ in decl.state]
    x = decl.input
    if decl.energy is not None:
        return [decl.energy, *state], [(decl.energy, (x,)), (decl.energy, (x, x))]
    return [decl.stress, *state], [(decl.stress, (x,))]


def plan(decl):
    x = decl.input
    if decl.energy is not None:
        return Plan(decl, decl.stress, derivative_name(decl.energy, (x, x)), decl.energy)
    return Plan(decl, decl.stress, derivative_name(decl.stress, (x,)), None)


def _error(decl, key, message):
    loc = decl.locs.get(key, decl.loc)
    return SpecError(f"export.umat.{key}: {message}", loc.path, loc.line, loc.col)


def check(decl, kernel):
    """Refuse (SpecError at the section's line) what the section's names could not show: the shapes
    of the outputs, and params PROPS cannot hold (a table's)."""
    graph = kernel.graph
    if decl.energy is not None:
        shape = graph.outputs[decl.energy].shape
        if shape != ():
            raise _error(decl, "stress", f"'{decl.stress}' is the gradient of output '{decl.energy}', which has shape "
                                         f"{list(shape)}; the stress is the gradient of a scalar (an energy)")
    else:
        shape = graph.outputs[decl.stress].shape
        if shape != (3, 3):
            raise _error(decl, "stress", f"output '{decl.stress}' has shape {list(shape)}; a UMAT's stress is a 3x3 "
                                         f"tensor (shape [3, 3])")
    for out, old in decl.state:
        if graph.outputs[out].shape != graph.inputs[old].shape:
            raise _error(decl, f"state.{out}", f"output '{out}' has shape {list(graph.outputs[out].shape)} but its old "
                                               f"value '{old}' has shape {list(graph.inputs[old].shape)}")
    for name in decl.props:
        if name not in graph.params:
            raise _error(decl, "props", f"'{name}' is a table or potential, whose values PROPS cannot hold; list "
                                        f"plain params only")


def library_name(name, model_name):
    """LIB of the material @ABAQUS_<LIB>_UMAT: CalculiX upper-cases the deck and splits the material
    name at its first `_` after the prefix, then opens lib<LIB>.so: so LIB is upper-case letters and
    digits. `name` (--name) must be one; the default is the model's name made one."""
    if name is not None:
        if not LIB_NAME.match(name):
            raise SpecError(f"--name {name!r}: a UMAT's library is named for CalculiX, which upper-cases the material "
                            f"name @ABAQUS_<NAME>_UMAT and cuts it at '_': use upper-case letters and digits, starting "
                            f"with a letter (e.g. --name {_lib(name) or 'J2'})")
        return name
    return _lib(model_name) or "MODEL"


def _lib(text):
    lib = re.sub(r"[^A-Z0-9]", "", text.upper())
    return lib if not lib or lib[0].isalpha() else f"M{lib}"


def material(lay, decl):
    """The material name of the UMAT in a CalculiX deck."""
    return f"@{'ABAQUSNL' if decl.kinematics == 'F' else 'ABAQUS'}_{lay.name}_{FUNC}"


def statev(lay, decl):
    """[(state input, its first STATEV entry, size)] in STATEV's order."""
    sizes = {a.name: a.size for a in lay.inputs}
    out, k = [], 0
    for _, old in decl.state:
        out.append((old, k, sizes[old]))
        k += sizes[old]
    return out


def props(lay, decl):
    """[(param, its first PROPS entry, size, its offset in the params array)] in PROPS's order."""
    params = {a.name: a for a in lay.params}
    out, k = [], 0
    for name in decl.props:
        a = params[name]
        out.append((name, k, a.size, a.offset))
        k += a.size
    return out


def manifest(lay, decl):
    """What adgrad-export.json says about the UMAT."""
    sv, pr = statev(lay, decl), props(lay, decl)
    return {"material": material(lay, decl), "function": FUNC, "kinematics": decl.kinematics,
            "stress": decl.stress, "measure": decl.measure,
            "statev": [{"input": n, "output": o, "first": k + 1, "size": s}
                       for (n, k, s), (o, _) in zip(sv, decl.state)],
            "nstatv": sum(s for _, _, s in sv),
            "props": [{"param": n, "first": k + 1, "size": s} for n, k, s, _ in pr],
            "nprops": sum(s for _, _, s, _ in pr)}


ARGS = """double *STRESS, double *STATEV, double *DDSDDE, double *SSE, double *SPD, double *SCD, double *RPL,
        double *DDSDDT, double *DRPLDE, double *DRPLDT, const double *STRAN, const double *DSTRAN,
        const double *TIME, const double *DTIME, const double *TEMP, const double *DTEMP, const double *PREDEF,
        const double *DPRED, const char *CMNAME, const int *NDI, const int *NSHR, const int *NTENS,
        const int *NSTATV, const double *PROPS, const int *NPROPS, const double *COORDS, const double *DROT,
        double *PNEWDT, const double *CELENT, const double *DFGRD0, const double *DFGRD1, const int *NOEL,
        const int *NPT, const int *LAYER, const int *KSPT, const int *JSTEP, const int *KINC, int CMNAME_length"""


def header(lay, decl):
    """The UMAT's part of <NAME>.h."""
    n = lay.name.upper()
    sv, pr = statev(lay, decl), props(lay, decl)
    nstatv, nprops = sum(s for _, _, s in sv), sum(s for _, _, s, _ in pr)
    state = ", ".join(f"{o} -> {old} ({k + 1}{'..' + str(k + s) if s > 1 else ''})"
                      for (old, k, s), (o, _) in zip(sv, decl.state))
    params = ", ".join(f"{name} ({k + 1}{'..' + str(k + s) if s > 1 else ''})" for name, k, s, _ in pr)
    into = "F: DFGRD1" if decl.kinematics == "F" else "strain: STRAN + DSTRAN"
    measure = f" ({decl.measure})" if decl.kinematics == "F" else ""
    return f"""
/* The Abaqus UMAT (docs/native.md): in CalculiX the material {material(lay, decl)}, with
   *DEPVAR {nstatv} and *USER MATERIAL, CONSTANTS={nprops}.
   {into} -> {decl.input}; STRESS <- {decl.stress}{measure}
   STATEV: {state or 'none'}
   PROPS: {params or 'none'} */
#define {n}_UMAT_MATERIAL "{material(lay, decl)}"
#define {n}_UMAT_NSTATV {nstatv}
#define {n}_UMAT_NPROPS {nprops}
void {FUNC}({ARGS});
void {FUNC.lower()}_({ARGS});    /* the same function, as gfortran names `call {FUNC.lower()}(...)` */
"""


SOURCE = r"""
/* ---- the Abaqus UMAT (docs/native.md) ------------------------------------------------------- */
#include <stdatomic.h>
#include <stdio.h>

#define UMAT_NSTATV {nstatv}
#define UMAT_NPROPS {nprops}
#define UMAT_CUT {cut}
#define UMAT_SCRATCH {scratch}        /* doubles per call: params, inputs, results, workspace */
#define UMAT_RESULTS {results}        /* results: from s + UMAT_RESULT0 */
#define UMAT_RESULT0 {result0}

static const int voigt[6][2] = {{{{0, 0}}, {{1, 1}}, {{2, 2}}, {{0, 1}}, {{0, 2}}, {{1, 2}}}};
static atomic_int umat_said[3];      /* each complaint is printed once per process */

/* PNEWDT < 1 asks for the increment again, smaller. CalculiX passes -1 (nothing asked yet), Abaqus
   a large value; a smaller request of another point is kept. */
static void umat_cut(double *pnewdt) {{
    if (!(*pnewdt > 0.0 && *pnewdt <= UMAT_CUT))
        *pnewdt = UMAT_CUT;
}}

/* A call the UMAT cannot answer (a deck that does not fit the model, a point that fails): the
   increment is cut, and DDSDDE is the identity, only so that a code which assembles and solves before
   it looks at PNEWDT can (CalculiX does at a step's start). */
static void umat_refuse(double *pnewdt, double *ddsdde) {{
    umat_cut(pnewdt);
    for (int k = 0; k < 36; k++)
        ddsdde[k] = k % 7 == 0;
}}

/* The kernel at one point: x the strain or F (row-major 3x3), the old state from statev, params p;
   results in s. 1 if it ran and every result is finite. */
static int umat_eval(const double *x, const double *statev, const double *p, double *s) {{
{copy_inputs}    void *ret = NULL, *exc = NULL;
    if (k_point(&ret, &exc, {point_args}))
        return 0;
    for (int k = 0; k < UMAT_RESULTS; k++)
        if (!isfinite(s[UMAT_RESULT0 + k]))
            return 0;
    return 1;
}}
{kinematics}
static void umat(double *STRESS, double *STATEV, double *DDSDDE, double *SSE, const double *STRAN,
                 const double *DSTRAN, const int *NDI, const int *NSHR, const int *NSTATV, const double *PROPS,
                 const int *NPROPS, double *PNEWDT, const double *DFGRD0, const double *DFGRD1) {{
    if (*NDI != 3 || *NSHR != 3) {{
        if (!atomic_exchange(&umat_said[0], 1))
            fprintf(stderr, "adgrad UMAT %s (model '%s'): called with NDI=%d, NSHR=%d; it is for 3D solid elements "
                    "(NDI=3, NSHR=3); cutting the increment\n", info.name, info.model, *NDI, *NSHR);
        umat_refuse(PNEWDT, DDSDDE);
        return;
    }}
    if (*NPROPS != UMAT_NPROPS) {{
        if (!atomic_exchange(&umat_said[1], 1))
            fprintf(stderr, "adgrad UMAT %s (model '%s'): the deck gives %d material constants (NPROPS, *USER "
                    "MATERIAL CONSTANTS=), the model reads %d: {props_text}; cutting the increment\n", info.name,
                    info.model, *NPROPS, UMAT_NPROPS);
        umat_refuse(PNEWDT, DDSDDE);
        return;
    }}
    if (*NSTATV != UMAT_NSTATV) {{
        if (!atomic_exchange(&umat_said[2], 1))
            fprintf(stderr, "adgrad UMAT %s (model '%s'): the deck gives %d state variables (NSTATV, *DEPVAR), the "
                    "model keeps %d: {statev_text}; cutting the increment\n", info.name, info.model, *NSTATV,
                    UMAT_NSTATV);
        umat_refuse(PNEWDT, DDSDDE);
        return;
    }}
{scratch_decl}    double *p = s;
    (void)SSE;
    memcpy(p, defaults, sizeof(double) * NP);
{copy_props}{body}{scratch_free}}}

API void {func}({args}) {{
    (void)SPD; (void)SCD; (void)RPL; (void)DDSDDT; (void)DRPLDE; (void)DRPLDT; (void)TIME; (void)DTIME; (void)TEMP;
    (void)DTEMP; (void)PREDEF; (void)DPRED; (void)CMNAME; (void)NTENS; (void)COORDS; (void)DROT; (void)CELENT;
    (void)NOEL; (void)NPT; (void)LAYER; (void)KSPT; (void)JSTEP; (void)KINC; (void)CMNAME_length;
    umat(STRESS, STATEV, DDSDDE, SSE, STRAN, DSTRAN, NDI, NSHR, NSTATV, PROPS, NPROPS, PNEWDT, DFGRD0, DFGRD1);
}}

API void {func_lower}_({args}) __attribute__((alias("{func}")));
"""

SMALL = r"""
/* STRAN (+ DSTRAN) in Voigt order 11 22 33 12 13 23 with engineering shears -> the strain tensor */
static void umat_strain(const double *stran, const double *dstran, double *x) {{
    for (int v = 0; v < 6; v++) {{
        int a = voigt[v][0], b = voigt[v][1];
        double e = dstran ? stran[v] + dstran[v] : stran[v];
        x[3 * a + b] = x[3 * b + a] = v < 3 ? e : 0.5 * e;
    }}
}}

/* DDSDDE(i, j) = d stress_i / d strain_j, column-major; an engineering shear strain moves both
   entries of the tensor by half of it */
static void umat_tangent(const double *t, double *ddsdde) {{
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {{
            const double *row = t + 9 * (3 * voigt[i][0] + voigt[i][1]);
            int c = voigt[j][0], d = voigt[j][1];
            ddsdde[i + 6 * j] = j < 3 ? row[3 * c + c] : 0.5 * (row[3 * c + d] + row[3 * d + c]);
        }}
}}
"""

SMALL_BODY = r"""    double x[9];
    (void)DFGRD0, (void)DFGRD1;
    umat_strain(STRAN, DSTRAN, x);
    if (umat_eval(x, STATEV, p, s)) {{
        for (int v = 0; v < 6; v++)
            STRESS[v] = s[{stress} + 3 * voigt[v][0] + voigt[v][1]];
        umat_tangent(s + {tangent}, DDSDDE);
{copy_state}{energy}    }} else {{
        /* STRESS and STATEV stay as they came; DDSDDE the tangent at the increment's start if the
           kernel gives one there (else the identity), for a code that assembles before it cuts */
        umat_refuse(PNEWDT, DDSDDE);
        umat_strain(STRAN, NULL, x);
        if (umat_eval(x, STATEV, p, s))
            umat_tangent(s + {tangent}, DDSDDE);
    }}
"""

FINITE = r"""
#define MEASURE_{measure} 1

static void mm(const double *a, const double *b, double *c) {{      /* c = a b */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            c[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
}}

static void mmt(const double *a, const double *b, double *c) {{     /* c = a b^T */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            c[3 * i + j] = a[3 * i] * b[3 * j] + a[3 * i + 1] * b[3 * j + 1] + a[3 * i + 2] * b[3 * j + 2];
}}

static double inv3(const double *a, double *ai) {{                  /* ai = a^-1; returns det a */
    ai[0] = a[4] * a[8] - a[5] * a[7];
    ai[3] = a[5] * a[6] - a[3] * a[8];
    ai[6] = a[3] * a[7] - a[4] * a[6];
    double det = a[0] * ai[0] + a[1] * ai[3] + a[2] * ai[6];
    ai[1] = a[2] * a[7] - a[1] * a[8];
    ai[4] = a[0] * a[8] - a[2] * a[6];
    ai[7] = a[1] * a[6] - a[0] * a[7];
    ai[2] = a[1] * a[5] - a[2] * a[4];
    ai[5] = a[2] * a[3] - a[0] * a[5];
    ai[8] = a[0] * a[4] - a[1] * a[3];
    for (int k = 0; k < 9; k++)
        ai[k] /= det;
    return det;
}}

/* a = q diag(w) q^T for a symmetric 3x3 a, by cyclic Jacobi rotations (to round-off in a few sweeps) */
static void eig3(const double *a0, double *w, double *q) {{
    double a[9];
    memcpy(a, a0, sizeof a);
    for (int k = 0; k < 9; k++)
        q[k] = k % 4 == 0;
    for (int sweep = 0; sweep < 50; sweep++) {{
        int rotated = 0;
        for (int r = 0; r < 3; r++) {{
            int i = r == 2, j = r == 0 ? 1 : 2;       /* (0,1), (0,2), (1,2) */
            double aij = a[3 * i + j];
            if (fabs(aij) <= 1e-20 * (fabs(a[4 * i]) + fabs(a[4 * j]))) {{   /* nothing to U or S in doubles */
                a[3 * i + j] = a[3 * j + i] = 0.0;
                continue;
            }}
            rotated = 1;
            double theta = (a[4 * j] - a[4 * i]) / (2.0 * aij);
            double t = isfinite(theta * theta) ? (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0))
                                               : 0.5 / theta;
            double c = 1.0 / sqrt(t * t + 1.0), sn = t * c;
            for (int k = 0; k < 3; k++) {{               /* a = g^T a g, q = q g: a_ij becomes 0 */
                double aki = a[3 * k + i], akj = a[3 * k + j];
                a[3 * k + i] = c * aki - sn * akj;
                a[3 * k + j] = sn * aki + c * akj;
            }}
            for (int k = 0; k < 3; k++) {{
                double aik = a[3 * i + k], ajk = a[3 * j + k];
                a[3 * i + k] = c * aik - sn * ajk;
                a[3 * j + k] = sn * aik + c * ajk;
            }}
            for (int k = 0; k < 3; k++) {{
                double qki = q[3 * k + i], qkj = q[3 * k + j];
                q[3 * k + i] = c * qki - sn * qkj;
                q[3 * k + j] = sn * qki + c * qkj;
            }}
            a[3 * i + j] = a[3 * j + i] = 0.0;
        }}
        if (!rotated)
            break;
    }}
    w[0] = a[0], w[1] = a[4], w[2] = a[8];
}}

/* The second Piola-Kirchhoff stress S from the model's stress t at F (g = F^-1, j = det F), and
   its change dS along dF from t's change dt */
static void pk2(const double *t, const double *g, double j, double *S) {{
    double m[9];
#if MEASURE_first_piola
    (void)m, (void)j;
    mm(g, t, S);                                    /* S = F^-1 P */
#elif MEASURE_second_piola
    (void)m, (void)g, (void)j;
    memcpy(S, t, sizeof(double) * 9);
#else
    mm(g, t, m);
    mmt(m, g, S);                                   /* F^-1 tau F^-T; sigma: times J */
#if MEASURE_cauchy
    for (int k = 0; k < 9; k++)
        S[k] *= j;
#else
    (void)j;
#endif
#endif
}}

static void dpk2(const double *t, const double *dt, const double *g, double j, const double *df, double *dS) {{
    double dg[9], m[9], a[9], b[9];
    mm(g, df, m);
    mm(m, g, dg);
    for (int k = 0; k < 9; k++)
        dg[k] = -dg[k];                             /* d F^-1 = -F^-1 dF F^-1 */
#if MEASURE_first_piola
    (void)j, (void)a, (void)b;
    mm(dg, t, dS);
    mm(g, dt, m);
    for (int k = 0; k < 9; k++)
        dS[k] += m[k];
#elif MEASURE_second_piola
    (void)j, (void)g, (void)dg, (void)t, (void)m, (void)a, (void)b;
    memcpy(dS, dt, sizeof(double) * 9);
#else
    mm(dg, t, a);
    mmt(a, g, dS);                                  /* dg t g^T + g dt g^T + g t dg^T */
    mm(g, dt, a);
    mmt(a, g, b);
    mm(g, t, a);
    mmt(a, dg, m);
    for (int k = 0; k < 9; k++)
        dS[k] += b[k] + m[k];
#if MEASURE_cauchy
    double dj = j * (g[0] * df[0] + g[1] * df[3] + g[2] * df[6] + g[3] * df[1] + g[4] * df[4] + g[5] * df[7]
                     + g[6] * df[2] + g[7] * df[5] + g[8] * df[8]);   /* dJ = J tr(F^-1 dF) */
    mm(g, t, a);
    mmt(a, g, b);
    for (int k = 0; k < 9; k++)
        dS[k] = j * dS[k] + dj * b[k];
#endif
#endif
}}

/* F (row-major), the model's stress t at F and its derivative dt/dF (row-major 3x3x3x3) ->
   the rotated Cauchy stress R^T sigma R = U S U / J and DDSDDE = (U x U) : dS/dE : (U x U) (F = R U,
   E = (F^T F - I)/2), in Voigt order: what CalculiX's @ABAQUSNL turns back into S and dS/dE.
   0 if F is not invertible with det F > 0, or a result is not finite. */
static int umat_finite(const double *F, const double *t, const double *dt, double *stress, double *ddsdde) {{
    double g[9], C[9], w[3], q[9], U[9], Ui[9], R[9], S[9], m[9], r[9];
    double j = inv3(F, g);
    if (!(j > 0.0) || !isfinite(j))
        return 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            C[3 * a + b] = F[a] * F[b] + F[3 + a] * F[3 + b] + F[6 + a] * F[6 + b];
    eig3(C, w, q);
    for (int k = 0; k < 3; k++)
        if (!(w[k] > 0.0))
            return 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {{
            U[3 * a + b] = Ui[3 * a + b] = 0.0;
            for (int k = 0; k < 3; k++) {{
                U[3 * a + b] += q[3 * a + k] * sqrt(w[k]) * q[3 * b + k];
                Ui[3 * a + b] += q[3 * a + k] / sqrt(w[k]) * q[3 * b + k];
            }}
        }}
    mm(F, Ui, R);
    pk2(t, g, j, S);
    mm(U, S, m);
    mm(m, U, r);
    for (int v = 0; v < 6; v++) {{
        int a = voigt[v][0], b = voigt[v][1];
        stress[v] = 0.5 * (r[3 * a + b] + r[3 * b + a]) / j;
    }}
    for (int col = 0; col < 6; col++) {{
        /* dE = U e U for e the symmetric unit of this column: dF = F^-T dE = R e U */
        double e[9] = {{0}}, df[9], dts[9], dS[9];
        int c = voigt[col][0], d = voigt[col][1];
        e[3 * c + d] += col < 3 ? 1.0 : 0.5;
        e[3 * d + c] += col < 3 ? 0.0 : 0.5;
        mm(R, e, m);
        mm(m, U, df);
        for (int k = 0; k < 9; k++) {{
            dts[k] = 0.0;
            for (int l = 0; l < 9; l++)
                dts[k] += dt[9 * k + l] * df[l];
        }}
        dpk2(t, dts, g, j, df, dS);
        mm(U, dS, m);
        mm(m, U, r);
        for (int v = 0; v < 6; v++) {{
            int a = voigt[v][0], b = voigt[v][1];
            ddsdde[v + 6 * col] = 0.5 * (r[3 * a + b] + r[3 * b + a]);
        }}
    }}
    for (int k = 0; k < 36; k++)
        if (!isfinite(ddsdde[k]))
            return 0;
    for (int v = 0; v < 6; v++)
        if (!isfinite(stress[v]))
            return 0;
    return 1;
}}

static void umat_F(const double *dfgrd, double *x) {{          /* column-major DFGRD -> row-major F */
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            x[3 * a + b] = dfgrd[a + 3 * b];
}}
"""

FINITE_BODY = r"""    double x[9], stress[6], ddsdde[36];
    (void)STRAN, (void)DSTRAN;
    umat_F(DFGRD1, x);
    if (umat_eval(x, STATEV, p, s) && umat_finite(x, s + {stress}, s + {tangent}, stress, ddsdde)) {{
        memcpy(STRESS, stress, sizeof stress);
        memcpy(DDSDDE, ddsdde, sizeof ddsdde);
{copy_state}{energy}    }} else {{
        /* STRESS and STATEV stay as they came; DDSDDE the tangent at the increment's start if the
           kernel gives one there (else the identity), for a code that assembles before it cuts */
        umat_refuse(PNEWDT, DDSDDE);
        umat_F(DFGRD0, x);
        if (umat_eval(x, STATEV, p, s) && umat_finite(x, s + {stress}, s + {tangent}, stress, ddsdde))
            memcpy(DDSDDE, ddsdde, sizeof ddsdde);
    }}
"""


def source(lay, pl):
    """The C of the UMAT, appended to the library's wrapper (engine/export/cwrap.py source), whose
    k_point, defaults, info, NP and WS it uses."""
    decl = pl.decl
    np_, off = lay.n_param_values, {}
    k = np_
    for a in lay.inputs:
        off[a.name] = k
        k += a.size
    result0 = k
    for a in lay.outputs:
        off[a.name] = k
        k += a.size
    results, work = k - result0, k
    scratch = max(1, work + lay.workspace_size)
    sv = {old: (first, size) for old, first, size in statev(lay, decl)}
    copy_inputs = []
    for a in lay.inputs:
        src = "x" if a.name == decl.input else f"statev + {sv[a.name][0]}"
        copy_inputs.append(f"    memcpy(s + {off[a.name]}, {src}, sizeof(double) * {a.size});\n")
    point_args = [f"s + {off[a.name]}" for a in lay.inputs] + [f"p + {a.offset}" for a in lay.params] + \
                 [f"s + {off[a.name]}" for a in lay.outputs] + [f"s + {work}"]
    copy_props = "".join(f"    memcpy(p + {offset}, PROPS + {first}, sizeof(double) * {size});    /* {name} */\n"
                         for name, first, size, offset in props(lay, decl))
    outs = {out: old for out, old in decl.state}
    copy_state = "".join(f"        memcpy(STATEV + {sv[old][0]}, s + {off[out]}, sizeof(double) * {sv[old][1]});"
                         f"    /* {out} */\n" for out, old in outs.items())
    energy = f"        *SSE = s[{off[pl.energy]}];\n" if pl.energy else ""
    fields = {"stress": off[pl.stress], "tangent": off[pl.tangent], "copy_state": copy_state, "energy": energy}
    body = (FINITE_BODY if pl.finite else SMALL_BODY).format(**fields)
    heap = scratch > STACK_DOUBLES
    if heap:
        scratch_decl = ("    double *s = malloc(sizeof(double) * UMAT_SCRATCH);\n"
                        "    if (!s) {\n"
                        "        fprintf(stderr, \"adgrad UMAT %s (model '%s'): out of memory; cutting the "
                        "increment\\n\", info.name, info.model);\n"
                        "        umat_refuse(PNEWDT, DDSDDE);\n        return;\n    }\n")
        scratch_free = "    free(s);\n"
    else:
        scratch_decl, scratch_free = "    double s[UMAT_SCRATCH];\n", ""
    pr = props(lay, decl)
    props_text = ", ".join(n if size == 1 else f"{n} ({size})" for n, _, size, _ in pr) or "none"
    sv_text = ", ".join(old if size == 1 else f"{old} ({size})" for old, _, size in statev(lay, decl)) or "none"
    kinematics = FINITE.format(measure=decl.measure) if pl.finite else SMALL.format()
    return SOURCE.format(
        nstatv=sum(s for _, _, s in statev(lay, decl)), nprops=sum(s for _, _, s, _ in pr), cut=CUT, scratch=scratch,
        results=results, result0=result0, copy_inputs="".join(copy_inputs), point_args=", ".join(point_args),
        kinematics=kinematics, props_text=props_text.replace("%", "%%"), statev_text=sv_text.replace("%", "%%"),
        scratch_decl=scratch_decl, copy_props=copy_props, body=body, scratch_free=scratch_free, func=FUNC,
        func_lower=FUNC.lower(), args=ARGS)
