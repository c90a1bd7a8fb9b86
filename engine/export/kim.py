"""`adgrad export MODEL --kim NAME`: a site-energy model as a KIM portable model, which LAMMPS (and any
simulator with the KIM API) loads as `pair_style kim NAME` (docs/lammps.md is its contract).

The model must be a site energy on the atoms contract: inputs R [N, 3] (neighbour vectors x_j - x_i),
valid [N] and optionally s [] and sn [N] (species of the atom and of each neighbour), and a scalar
output, the site energy. Its kernel is compiled for E and dE/dR at a ladder of slot counts (N, 2N, 4N)
and linked, with its C wrapper (cwrap.py) per slot count, to the KIM driver below: the compute routine
gathers each contributing atom's neighbours within the cutoff from KIM's full neighbour list into the
padded rows of the smallest kernel they fit, calls that kernel's batch function on blocks of atoms,
and scatters -dE_i/dR to the atom and its neighbours (ghosts included: the simulator sums them back
and computes the pressure from them). An atom with more neighbours than the largest kernel has slots
stops the compute with a KIM error naming the atom, the count and the size to export with: a site
energy is not a sum that can be split over calls, so no neighbour is ever dropped.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np

from ..errors import DataError, JobError, SpecError
from ..potentials.cutoff import CUTOFFS, CutoffError, model_cutoff

MODEL_LIBRARY = "libkim-api-portable-model.so"  # what KIM looks for in <collection dir>/<NAME>/
LADDER = (1, 2, 4)          # kernels of N, 2N and 4N slots
BLOCK = 64                  # atoms per batch call
ELEMENTS = set("""H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se Br
Kr Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy Ho Er Tm Yb Lu Hf Ta W
Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu Am Cm Bk Cf Es Fm Md No Lr Rf Db Sg Bh Hs Mt Ds Rg Cn
Nh Fl Mc Lv Ts Og electron""".split()) | {f"user{k:02d}" for k in range(1, 21)}   # KIM's species names
KIM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Plan:
    """What the KIM model of a site-energy model is: its KIM name, species (KIM code k is species
    index k of the model), cutoff (A), energy output, and the slot counts of its kernels."""
    name: str
    species: tuple
    cutoff: float
    energy: str
    slots: tuple
    size: str | None        # the model's size that is N (to export with a larger one), None if N is a literal
    has_species: bool       # the model reads s and sn


def check_contract(model):
    """(energy output, N) of a site-energy model on the atoms contract, else a SpecError saying why."""
    path = model.spec.path
    inputs = {name: tuple(v.shape) for name, v in model.graph.inputs.items()}
    if not {"R", "valid"} <= set(inputs) <= {"R", "valid", "s", "sn"} or ("s" in inputs) != ("sn" in inputs):
        raise SpecError(f"model '{model.name}' is not a site energy on the atoms contract (inputs R [N, 3], valid [N], "
                        f"and s [] with sn [N] for species): its inputs are {', '.join(inputs)}; adgrad export --kim "
                        f"needs that contract (docs/lammps.md)", path)
    n = inputs["R"][0] if len(inputs["R"]) == 2 else None
    want = {"R": (n, 3), "valid": (n,), "s": (), "sn": (n,)}
    if n is None or any(shape != want[name] for name, shape in inputs.items()):
        raise SpecError(f"model '{model.name}': a site energy's inputs are R [N, 3], valid [N] and optionally s [] and "
                        f"sn [N]; this one has " + ", ".join(f"{k} {list(v)}" for k, v in inputs.items()), path)
    scalars = [name for name, v in model.graph.outputs.items() if tuple(v.shape) == ()]
    energy = "E" if "E" in scalars else (scalars[0] if len(scalars) == 1 else None)
    if energy is None:
        raise SpecError(f"model '{model.name}': adgrad export --kim needs the site energy as an output 'E' (or the "
                        f"model's only scalar output); its outputs are {', '.join(model.graph.outputs)}", path)
    return energy, n


def plan(model, name, species=None, cutoff=None) -> Plan:
    """The KIM model of `model` named `name`, checked (SpecError/DataError: exit 2). species: KIM
    species names in the model's species order (default: the elements of its potential files);
    cutoff: the neighbour distance in A (default: its potential files')."""
    from ..potentials.base import Potential
    if not KIM_NAME.match(name or ""):
        raise DataError(f"--kim {name!r}: a KIM model's name is a C identifier (letters, digits and _, not starting "
                        f"with a digit)")
    energy, n = check_contract(model)
    path = model.spec.path
    try:
        known, complete = model_cutoff(model)
    except CutoffError as exc:
        raise DataError(f"{exc}; adgrad export --kim takes neighbours within it") from None
    if cutoff is None:
        if known is None or not complete:
            raise DataError(f"model '{model.name}': its cutoff is not known from its params (only potential files "
                            f"of format {', '.join(CUTOFFS)} give one, and a table param none); give --cutoff, the "
                            f"distance (A) beyond which no neighbour changes a site energy")
        cutoff = known[0]
    elif not (np.isfinite(cutoff) and cutoff > 0):
        raise DataError(f"--cutoff {cutoff}: give a positive distance in A")
    elif known is not None and cutoff < known[0]:
        raise DataError(f"--cutoff {cutoff:g} is smaller than the model's cutoff {known[0]:g} A ({known[1]} of "
                        f"{path}): neighbours between them would be left out")
    potentials = [v.elements for v in model.tables.values() if isinstance(v, Potential)]
    if species is None:
        if not potentials:
            raise DataError(f"model '{model.name}' has no potential file to name its species: give --species "
                            f"(chemical symbols in the model's species order, e.g. --species Cu,Ni)")
        species = max(potentials, key=len)
        bad = [e for e in species if e not in ELEMENTS]
        if bad:
            raise DataError(f"model '{model.name}': its potential file names the species {', '.join(species)}, and "
                            f"{', '.join(bad)} is not a KIM species (a chemical symbol); give --species, e.g. "
                            f"--species Cu")
    species = tuple(species)
    for e in species:
        if e not in ELEMENTS:
            raise DataError(f"--species: {e!r} is not a KIM species name (a chemical symbol such as Cu, or user01)")
    if len(set(species)) != len(species) or not species:
        raise DataError(f"--species {','.join(species)}: give each species once")
    has_species = "s" in model.graph.inputs
    if not has_species and len(species) > 1:
        raise DataError(f"model '{model.name}' reads no species (no inputs s, sn): it can be one species only, "
                        f"not {', '.join(species)}")
    for elements in potentials:
        if len(species) > len(elements):
            raise DataError(f"--species {','.join(species)}: {len(species)} species, but a potential file of "
                            f"{path} has {len(elements)} element(s) ({', '.join(elements)})")
    size = _slot_size(model, n)
    slots = tuple(n * k for k in LADDER) if size is not None else (n,)
    return Plan(name, species, float(cutoff), energy, slots, size, has_species)


def _slot_size(model, n):
    """The model's named size that is R's N, if the model's own file can be loaded again with it doubled
    (a model inline in a config, or with a literal N, cannot: its KIM model then has N slots only). Only
    the file is read again: R's declared shape is its graph's, and kernels() builds the larger models."""
    from ..spec import load_model_file
    sizes = [k for k, v in model.spec.sizes.items() if v == n]
    if len(sizes) != 1 or not os.path.isfile(model.spec.path):
        return None
    try:
        again = load_model_file(model.spec.path, sizes={**model.spec.sizes, sizes[0]: 2 * n})
    except SpecError:           # a config file (the model inline), or a file changed since
        return None
    return sizes[0] if tuple(again.inputs["R"].shape) == (2 * n, 3) else None


def kernels(model, config, kim: Plan, mode, math):
    """[(slots, compiled kernel)] of the ladder: E and dE/dR at each slot count."""
    from ..compile import compile_model
    from ..model import build
    from ..spec import load_model_file
    out = []
    for n in kim.slots:
        m = model
        if n != kim.slots[0]:
            m = build(load_model_file(model.spec.path, sizes={**model.spec.sizes, kim.size: n}))
            if config is not None:
                m = m.with_params(config.params)
        if tuple(m.graph.inputs["R"].shape) != (n, 3):     # the driver sizes its rows by kim.slots
            raise AssertionError(f"the kernel of {n} slots has R {m.graph.inputs['R'].shape}")
        out.append((n, compile_model(m, [(kim.energy, "R")], mode=mode, values=[kim.energy], math=math)))
    return out


# ---- the build ----------------------------------------------------------------------------------------
def toolchain():
    """(C++ compiler argv, KIM include directory, directory of KIM_SharedLibrarySchema.hpp), or a
    DataError (exit 2) saying what to install."""
    cxx = shlex.split(os.environ.get("CXX") or "c++")
    found = shutil.which(cxx[0]) if cxx else None
    if not found:
        raise DataError("adgrad export --kim needs a C++ compiler for KIM's shared-library record: no `c++` on PATH "
                        "(install g++, or set CXX)")
    include = None
    try:
        flags = subprocess.run(["pkg-config", "--cflags-only-I", "libkim-api"], capture_output=True, text=True)
        dirs = [f[2:] for f in flags.stdout.split() if f.startswith("-I")] if flags.returncode == 0 else []
    except OSError:
        dirs = []
    for d in dirs + ["/usr/include/kim-api", "/usr/local/include/kim-api"]:
        if os.path.isfile(os.path.join(d, "KIM_ModelHeaders.h")):
            include = os.path.realpath(d)
            break
    if include is None:
        raise DataError("adgrad export --kim needs the KIM API's development files (KIM_ModelHeaders.h): install "
                        "libkim-api-dev (Debian, Ubuntu) or kim-api")
    prefix = os.path.dirname(os.path.dirname(include))
    items = os.path.join(prefix, "share", "cmake", "kim-api-items")
    if not os.path.isfile(os.path.join(items, "KIM_SharedLibrarySchema.hpp")):
        raise DataError(f"adgrad export --kim: the KIM API's KIM_SharedLibrarySchema.hpp is not in {items}; install "
                        f"the KIM API with its CMake files (libkim-api-dev)")
    return [found, *cxx[1:]], include, items


def _c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def driver_source(kim: Plan, lays):
    """The KIM driver (C) over the kernels' wrappers `lays` (layout.Layout, one per slot count)."""
    k = len(lays)
    energy = kim.energy
    calls = []
    for i, lay in enumerate(lays):
        p = lay.name
        idx = {a.name: j for j, a in enumerate(lay.inputs)}
        out = {a.name: j for j, a in enumerate(lay.outputs)}
        sets = [f"in[{idx['R']}] = kb->R;", f"in[{idx['valid']}] = kb->valid;"]
        if kim.has_species:
            sets += [f"in[{idx['s']}] = kb->s;", f"in[{idx['sn']}] = kb->sn;"]
        sets += [f"out[{out[energy]}] = kb->E;", f"out[{out['d' + energy + '_dR']}] = kb->g;"]
        calls.append(f"""    case {i}: {{
        const double *in[{len(lay.inputs)}];
        double *out[{len(lay.outputs)}];
        {' '.join(sets)}
        return {p}_batch((const {p}_ctx *)kb->ctx, m, in, NULL, out, NULL, 1, kb->work, kb->nwork, NULL);
    }}""")
    includes = "".join(f'#include "{lay.name}.h"\n' for lay in lays)
    news = "\n".join(f"    b->kernel[{i}].ctx = {lay.name}_new();\n"
                     f"    b->kernel[{i}].nwork = {lay.name}_batch_workspace_size(1);" for i, lay in enumerate(lays))
    frees = "\n".join(f"    {lay.name}_free(({lay.name}_ctx *)b->kernel[{i}].ctx);" for i, lay in enumerate(lays))
    species = "\n".join(f"    error = error || KIM_ModelCreate_SetSpeciesCode(mc, KIM_SpeciesName_FromString("
                        f"{_c_string(s)}), {j});" for j, s in enumerate(kim.species))
    return DRIVER % {
        "includes": includes, "name": _c_string(kim.name), "nk": k, "slots": ", ".join(str(n) for n in kim.slots),
        "nspecies": len(kim.species), "species_rows": int(kim.has_species and len(kim.species) > 1),
        "cutoff": float(kim.cutoff).hex(), "block": BLOCK, "calls": "\n".join(calls),
        "news": news, "frees": frees, "species": species, "create": f"{kim.name}_kim_create",
        "species_list": _c_string(", ".join(kim.species)),
        "size_hint": _c_string(f"sizes: {kim.size}" if kim.size else "N in the model's R [N, 3]"),
    }


DRIVER = r"""/* KIM portable model %(name)s: the KIM driver over adgrad's exported kernels; written by adgrad. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "KIM_ModelHeaders.h"
#include "KIM_LogMacros.h"
%(includes)s
#define NK %(nk)d                   /* kernels, by slot count */
#define NSPECIES %(nspecies)d
#define SPECIES_ROWS %(species_rows)d       /* sn is read and not always 0 */
#define CUTOFF %(cutoff)s           /* A */
#define BLOCK %(block)d             /* atoms per batch call */
static const int SLOTS[NK] = {%(slots)s};
#define RATIO (SLOTS[NK - 1] / SLOTS[0])   /* the largest kernel's slots per slot of the model's N */

typedef struct model_buffer {
    double influence, cutoff;
    int no_ghost_neighbours;
    struct { void *ctx; int64_t nwork; } kernel[NK];
} model_buffer;

typedef struct kernel_block {       /* the padded rows of BLOCK atoms of one kernel */
    void *ctx;
    int n, m;                       /* slots, atoms in the block */
    double *R, *valid, *s, *sn, *E, *g, *work;
    int64_t nwork;
    int *atom, *nb;                 /* the block's atoms, and their neighbours' particle numbers per slot */
    int *filled;                    /* per row: its atom's neighbour count, its valid slots (the rest zeros) */
} kernel_block;

typedef struct args_buffer {
    kernel_block k[NK];
    int cap, *near;                 /* one atom's neighbours within the cutoff */
} args_buffer;

typedef struct state {              /* one compute call */
    const KIM_ModelComputeArguments *args;
    const double *x;
    const int *codes;
    double *energy, *forces, *particle_energy, *virial, *particle_virial;
} state;

#undef KIM_LOGGER_FUNCTION_NAME
#define KIM_LOGGER_FUNCTION_NAME KIM_ModelComputeArguments_LogEntry
#undef KIM_LOGGER_OBJECT_NAME
#define KIM_LOGGER_OBJECT_NAME args

static int call(kernel_block *kb, int64_t m, int which) {
    switch (which) {
%(calls)s
    }
    return -1;
}

/* the block's batch call, then each atom's energy and -dE/dR on it and its neighbours */
static int flush(state *st, kernel_block *kb, int which) {
    const KIM_ModelComputeArguments *args = st->args;
    char message[512];
    int n = kb->n, status;
    if (kb->m == 0)
        return 0;
    status = call(kb, kb->m, which);
    if (status) {
        snprintf(message, sizeof message, "adgrad: the kernel of %%d slots failed (error %%d)", n, status);
        LOG_ERROR(message);
        return 1;
    }
    double *forces = st->forces;
    for (int a = 0; a < kb->m; a++) {
        int i = kb->atom[a], count = kb->filled[a];
        const int *nb = kb->nb + (int64_t)a * n;
        const double *g = kb->g + 3 * (int64_t)a * n;
        double e = kb->E[a], f0 = 0.0, f1 = 0.0, f2 = 0.0;     /* the sum of dE/dR: -(the atom's force) */
        if (forces)
            for (int q = 0; q < count; q++) {
                double *fj = forces + 3 * (int64_t)nb[q];
                f0 += g[3 * q];
                f1 += g[3 * q + 1];
                f2 += g[3 * q + 2];
                fj[0] -= g[3 * q];
                fj[1] -= g[3 * q + 1];
                fj[2] -= g[3 * q + 2];
            }
        else
            for (int q = 0; q < count; q++) {
                f0 += g[3 * q];
                f1 += g[3 * q + 1];
                f2 += g[3 * q + 2];
            }
        /* a sum with a NaN or an infinity in it is not finite: one test for E and the whole gradient */
        if (!(isfinite(e) && isfinite(f0) && isfinite(f1) && isfinite(f2))) {
            snprintf(message, sizeof message, "adgrad: particle %%d (at %%g %%g %%g) has a non-finite site energy "
                     "or gradient", i, st->x[3 * i], st->x[3 * i + 1], st->x[3 * i + 2]);
            LOG_ERROR(message);
            return 1;
        }
        if (forces) {
            forces[3 * i] += f0;
            forces[3 * i + 1] += f1;
            forces[3 * i + 2] += f2;
        }
        if (st->energy)
            *st->energy += e;
        if (st->particle_energy)
            st->particle_energy[i] += e;
        if (st->virial || st->particle_virial)
            for (int q = 0; q < count; q++) {
                int j = nb[q];
                const double *gq = g + 3 * q, *R = kb->R + 3 * ((int64_t)a * n + q);
                /* KIM's virial: sum of r (x) dE/dr, Voigt order xx yy zz yz xz xy */
                double v[6] = {R[0] * gq[0], R[1] * gq[1], R[2] * gq[2], R[1] * gq[2], R[0] * gq[2], R[0] * gq[1]};
                for (int c = 0; c < 6; c++) {
                    if (st->virial)
                        st->virial[c] += v[c];
                    if (st->particle_virial) {
                        st->particle_virial[6 * i + c] += 0.5 * v[c];
                        st->particle_virial[6 * j + c] += 0.5 * v[c];
                    }
                }
            }
    }
    kb->m = 0;
    return 0;
}

static int grow(args_buffer *ab, int count) {
    if (count <= ab->cap)
        return 0;
    int cap = count + count / 2 + 16;
    int *near = realloc(ab->near, sizeof(int) * cap);
    if (!near)
        return 1;
    ab->near = near;
    ab->cap = cap;
    return 0;
}

static int compute(const KIM_ModelCompute *mc, const KIM_ModelComputeArguments *args) {
    model_buffer *b;
    args_buffer *ab;
    int *np, *codes, *contributing, error;
    double *x;
    char message[1024];
    state st;
    KIM_ModelCompute_GetModelBufferPointer(mc, (void **)&b);
    KIM_ModelComputeArguments_GetModelBufferPointer(args, (void **)&ab);
    error = KIM_ModelComputeArguments_GetArgumentPointerInteger(args, KIM_COMPUTE_ARGUMENT_NAME_numberOfParticles, &np)
        || KIM_ModelComputeArguments_GetArgumentPointerInteger(args, KIM_COMPUTE_ARGUMENT_NAME_particleSpeciesCodes,
                                                               &codes)
        || KIM_ModelComputeArguments_GetArgumentPointerInteger(args, KIM_COMPUTE_ARGUMENT_NAME_particleContributing,
                                                               &contributing)
        || KIM_ModelComputeArguments_GetArgumentPointerDouble(args, KIM_COMPUTE_ARGUMENT_NAME_coordinates, &x)
        || KIM_ModelComputeArguments_GetArgumentPointerDouble(args, KIM_COMPUTE_ARGUMENT_NAME_partialEnergy,
                                                              &st.energy)
        || KIM_ModelComputeArguments_GetArgumentPointerDouble(args, KIM_COMPUTE_ARGUMENT_NAME_partialForces,
                                                              &st.forces)
        || KIM_ModelComputeArguments_GetArgumentPointerDouble(args, KIM_COMPUTE_ARGUMENT_NAME_partialParticleEnergy,
                                                              &st.particle_energy)
        || KIM_ModelComputeArguments_GetArgumentPointerDouble(args, KIM_COMPUTE_ARGUMENT_NAME_partialVirial,
                                                              &st.virial)
        || KIM_ModelComputeArguments_GetArgumentPointerDouble(args, KIM_COMPUTE_ARGUMENT_NAME_partialParticleVirial,
                                                              &st.particle_virial);
    if (error) {
        LOG_ERROR("adgrad: cannot get the compute arguments");
        return 1;
    }
    int n = *np;
    for (int w = 0; w < NK; w++)
        ab->k[w].m = 0;             /* a compute that stopped with an error may have left atoms in a block */
    st.args = args;
    st.x = x;
    st.codes = codes;
    if (st.energy)
        *st.energy = 0.0;
    if (st.forces)
        memset(st.forces, 0, sizeof(double) * 3 * (size_t)n);
    if (st.particle_energy)
        memset(st.particle_energy, 0, sizeof(double) * (size_t)n);
    if (st.virial)
        memset(st.virial, 0, sizeof(double) * 6);
    if (st.particle_virial)
        memset(st.particle_virial, 0, sizeof(double) * 6 * (size_t)n);
    for (int i = 0; i < n; i++)
        if (codes[i] < 0 || codes[i] >= NSPECIES) {
            snprintf(message, sizeof message, "adgrad: particle %%d has species code %%d; this model knows %%d species "
                     "(%%s: codes 0 to %%d)", i, codes[i], NSPECIES, %(species_list)s, NSPECIES - 1);
            LOG_ERROR(message);
            return 1;
        }
    /* every position finite, checked once (a pass that vectorizes): then no distance below is NaN, and one
       that overflows to infinity is beyond the cutoff, as it is */
    int finite = 1;
    for (int64_t k = 0; k < 3 * (int64_t)n; k++)
        finite &= isfinite(x[k]) != 0;
    if (!finite)
        for (int i = 0; i < n; i++)
            if (!(isfinite(x[3 * i]) && isfinite(x[3 * i + 1]) && isfinite(x[3 * i + 2]))) {
                snprintf(message, sizeof message, "adgrad: particle %%d has a non-finite position (%%g %%g %%g)", i,
                         x[3 * i], x[3 * i + 1], x[3 * i + 2]);
                LOG_ERROR(message);
                return 1;
            }
    const double cut2 = CUTOFF * CUTOFF * (1.0 + 1e-12);   /* the model masks what is beyond its cutoff */
    for (int i = 0; i < n; i++) {
        int count = 0, nn;
        const int *list;
        if (!contributing[i])
            continue;
        if (KIM_ModelComputeArguments_GetNeighborList(args, 0, i, &nn, &list)) {
            LOG_ERROR("adgrad: GetNeighborList failed");
            return 1;
        }
        if (grow(ab, nn)) {
            LOG_ERROR("adgrad: out of memory");
            return 1;
        }
        const double x0 = x[3 * i], x1 = x[3 * i + 1], x2 = x[3 * i + 2];
        int *near = ab->near;
        for (int q = 0; q < nn; q++) {
            int j = list[q];
            double d0 = x[3 * j] - x0, d1 = x[3 * j + 1] - x1, d2 = x[3 * j + 2] - x2;
            near[count] = j;        /* stored always, kept if inside: no branch to mispredict on most of the list */
            count += d0 * d0 + d1 * d1 + d2 * d2 < cut2;
        }
        int which = 0;
        while (which < NK && SLOTS[which] < count)
            which++;
        if (which == NK) {
            snprintf(message, sizeof message, "adgrad: particle %%d has %%d neighbours within the cutoff %%g A, more "
                     "than the %%d slots of this model's largest kernel; export it again with a larger neighbour "
                     "count (%%s >= %%d)", i, count, CUTOFF, SLOTS[NK - 1], %(size_hint)s,
                     (count + RATIO - 1) / RATIO);
            LOG_ERROR(message);
            return 1;
        }
        kernel_block *kb = &ab->k[which];
        int s = kb->n, a = kb->m++;
        double *R = kb->R + 3 * (int64_t)a * s, *valid = kb->valid + (int64_t)a * s, *sn = kb->sn + (int64_t)a * s;
        int *nb = kb->nb + (int64_t)a * s;
        kb->atom[a] = i;
        kb->s[a] = codes[i];
        for (int q = 0; q < count; q++) {
            int j = near[q];
            R[3 * q] = x[3 * j] - x0;
            R[3 * q + 1] = x[3 * j + 1] - x1;
            R[3 * q + 2] = x[3 * j + 2] - x2;
            nb[q] = j;
#if SPECIES_ROWS
            sn[q] = codes[j];
#endif
        }
        /* the row holds the last atom's: only the slots between its count and this one's change */
        for (int q = kb->filled[a]; q < count; q++)
            valid[q] = 1.0;
        for (int q = count; q < kb->filled[a]; q++) {
            R[3 * q] = R[3 * q + 1] = R[3 * q + 2] = 0.0;
            valid[q] = sn[q] = 0.0;
        }
        kb->filled[a] = count;
        if (kb->m == BLOCK && flush(&st, kb, which))
            return 1;
    }
    for (int w = 0; w < NK; w++)
        if (flush(&st, &ab->k[w], w))
            return 1;
    return 0;
}

#undef KIM_LOGGER_FUNCTION_NAME
#define KIM_LOGGER_FUNCTION_NAME KIM_ModelCompute_LogEntry
#undef KIM_LOGGER_OBJECT_NAME
#define KIM_LOGGER_OBJECT_NAME mc

static void free_arguments(args_buffer *ab) {
    if (!ab)
        return;
    for (int w = 0; w < NK; w++) {
        kernel_block *kb = &ab->k[w];
        free(kb->R); free(kb->g); free(kb->valid); free(kb->sn); free(kb->s); free(kb->E); free(kb->work);
        free(kb->atom); free(kb->nb); free(kb->filled);
    }
    free(ab->near);
    free(ab);
}

static int arguments_create(const KIM_ModelCompute *mc, KIM_ModelComputeArgumentsCreate *ac) {
    model_buffer *b;
    int error = 0;
    KIM_ModelCompute_GetModelBufferPointer(mc, (void **)&b);
    KIM_ComputeArgumentName names[5];
    names[0] = KIM_COMPUTE_ARGUMENT_NAME_partialEnergy;
    names[1] = KIM_COMPUTE_ARGUMENT_NAME_partialForces;
    names[2] = KIM_COMPUTE_ARGUMENT_NAME_partialParticleEnergy;
    names[3] = KIM_COMPUTE_ARGUMENT_NAME_partialVirial;
    names[4] = KIM_COMPUTE_ARGUMENT_NAME_partialParticleVirial;
    for (int q = 0; q < 5; q++)
        error = error || KIM_ModelComputeArgumentsCreate_SetArgumentSupportStatus(ac, names[q],
                                                                                   KIM_SUPPORT_STATUS_optional);
    args_buffer *ab = calloc(1, sizeof *ab);
    if (error || !ab) {
        free(ab);
        LOG_ERROR("adgrad: cannot create the compute arguments");
        return 1;
    }
    for (int w = 0; w < NK; w++) {
        kernel_block *kb = &ab->k[w];
        int64_t s = SLOTS[w];
        kb->ctx = b->kernel[w].ctx;
        kb->nwork = b->kernel[w].nwork;
        kb->n = (int)s;
        kb->R = calloc(BLOCK * s * 3, sizeof(double));     /* zeros: rows of no neighbours yet (filled) */
        kb->g = malloc(sizeof(double) * BLOCK * s * 3);
        kb->valid = calloc(BLOCK * s, sizeof(double));
        kb->sn = calloc(BLOCK * s, sizeof(double));
        kb->s = malloc(sizeof(double) * BLOCK);
        kb->E = malloc(sizeof(double) * BLOCK);
        kb->work = malloc(sizeof(double) * (kb->nwork > 0 ? kb->nwork : 1));
        kb->atom = malloc(sizeof(int) * BLOCK);
        kb->nb = malloc(sizeof(int) * BLOCK * s);
        kb->filled = calloc(BLOCK, sizeof(int));
        error = error || !kb->R || !kb->g || !kb->valid || !kb->sn || !kb->s || !kb->E || !kb->work || !kb->atom
                || !kb->nb || !kb->filled || kb->nwork < 0;
    }
    if (error) {
        free_arguments(ab);
        LOG_ERROR("adgrad: out of memory");
        return 1;
    }
    KIM_ModelComputeArgumentsCreate_SetModelBufferPointer(ac, ab);
    return 0;
}

static int arguments_destroy(const KIM_ModelCompute *mc, KIM_ModelComputeArgumentsDestroy *ad) {
    args_buffer *ab;
    (void)mc;
    KIM_ModelComputeArgumentsDestroy_GetModelBufferPointer(ad, (void **)&ab);
    free_arguments(ab);
    return 0;
}

static void free_model(model_buffer *b) {
    if (b) {
%(frees)s
        free(b);
    }
}

static int destroy(KIM_ModelDestroy *md) {
    model_buffer *b;
    KIM_ModelDestroy_GetModelBufferPointer(md, (void **)&b);
    free_model(b);
    return 0;
}

#undef KIM_LOGGER_FUNCTION_NAME
#define KIM_LOGGER_FUNCTION_NAME KIM_ModelCreate_LogEntry
#undef KIM_LOGGER_OBJECT_NAME
#define KIM_LOGGER_OBJECT_NAME mc

int %(create)s(KIM_ModelCreate *mc, KIM_LengthUnit length, KIM_EnergyUnit energy, KIM_ChargeUnit charge,
               KIM_TemperatureUnit temperature, KIM_TimeUnit time) {
    int error;
    char message[512];
    (void)charge; (void)temperature; (void)time;
    if (KIM_LengthUnit_NotEqual(length, KIM_LENGTH_UNIT_A) || KIM_EnergyUnit_NotEqual(energy, KIM_ENERGY_UNIT_eV)) {
        /* the simulator then refuses the model (LAMMPS: "did not accept the requested unit system") */
        snprintf(message, sizeof message, "adgrad: KIM model %%s computes in A and eV (LAMMPS: units metal); the "
                 "simulator asked for length %%s and energy %%s", %(name)s, KIM_LengthUnit_ToString(length),
                 KIM_EnergyUnit_ToString(energy));
        LOG_ERROR(message);
    }
    error = KIM_ModelCreate_SetUnits(mc, KIM_LENGTH_UNIT_A, KIM_ENERGY_UNIT_eV, KIM_CHARGE_UNIT_unused,
                                     KIM_TEMPERATURE_UNIT_unused, KIM_TIME_UNIT_unused)
        || KIM_ModelCreate_SetModelNumbering(mc, KIM_NUMBERING_zeroBased);
%(species)s
    error = error
        || KIM_ModelCreate_SetRoutinePointer(mc, KIM_MODEL_ROUTINE_NAME_ComputeArgumentsCreate, KIM_LANGUAGE_NAME_c,
                                             1, (KIM_Function *)arguments_create)
        || KIM_ModelCreate_SetRoutinePointer(mc, KIM_MODEL_ROUTINE_NAME_Compute, KIM_LANGUAGE_NAME_c, 1,
                                             (KIM_Function *)compute)
        || KIM_ModelCreate_SetRoutinePointer(mc, KIM_MODEL_ROUTINE_NAME_ComputeArgumentsDestroy, KIM_LANGUAGE_NAME_c,
                                             1, (KIM_Function *)arguments_destroy)
        || KIM_ModelCreate_SetRoutinePointer(mc, KIM_MODEL_ROUTINE_NAME_Destroy, KIM_LANGUAGE_NAME_c, 1,
                                             (KIM_Function *)destroy);
    model_buffer *b = calloc(1, sizeof *b);
    if (error || !b) {
        free(b);
        LOG_ERROR("adgrad: cannot create the model");
        return 1;
    }
%(news)s
    for (int w = 0; w < NK; w++)
        if (!b->kernel[w].ctx) {
            free_model(b);          /* <name>_free(NULL) does nothing */
            LOG_ERROR("adgrad: out of memory");
            return 1;
        }
    b->influence = CUTOFF;
    b->cutoff = CUTOFF;
    b->no_ghost_neighbours = 1;      /* site energies of contributing atoms only */
    KIM_ModelCreate_SetModelBufferPointer(mc, b);
    KIM_ModelCreate_SetInfluenceDistancePointer(mc, &b->influence);
    KIM_ModelCreate_SetNeighborListPointers(mc, 1, &b->cutoff, &b->no_ghost_neighbours);
    return 0;
}
"""

SCHEMA = r"""// KIM's record of the portable model %(name)s (KIM_SharedLibrarySchema.hpp, schema version 2);
// written by adgrad.
#include <cstddef>
#include "KIM_FunctionTypes.hpp"
#include "KIM_LanguageName.hpp"
#include "KIM_CollectionItemType.hpp"
#include "KIM_SharedLibrarySchema.hpp"

using namespace KIM::SHARED_LIBRARY_SCHEMA;

extern "C" {
void %(create)s();     // the C create routine (KIM_ModelCreateFunction); only its address is taken here
int kim_shared_library_schema_version = 2;
SharedLibrarySchemaV2 kim_shared_library_schema = {
    KIM::COLLECTION_ITEM_TYPE::portableModel, "%(name)s", KIM::LANGUAGE_NAME::c,
    reinterpret_cast<KIM::Function *>(%(create)s), NULL, NULL, 0, NULL, 0, NULL};
}
"""

# only KIM's two symbols leave the library (the kernels' C ABI stays inside)
VERSION_SCRIPT = "{ global: kim_shared_library_schema; kim_shared_library_schema_version; local: *; };\n"


def build(kim: Plan, units, cc, tmp):
    """tmp/<NAME>/libkim-api-portable-model.so from `units` [(layout, C wrapper source path, [object
    files])], one per kernel (their headers in tmp), with the C compiler `cc`."""
    cxx, include, items = toolchain()
    lays = [lay for lay, _, _ in units]
    driver, schema, script = (os.path.join(tmp, f) for f in ("kim_driver.c", "kim_schema.cpp", "kim.version"))
    with open(driver, "w") as f:
        f.write(driver_source(kim, lays))
    with open(schema, "w") as f:
        f.write(SCHEMA % {"name": kim.name, "create": f"{kim.name}_kim_create"})
    with open(script, "w") as f:
        f.write(VERSION_SCRIPT)
    objects = []
    for src in [driver] + [s for _, s, _ in units]:
        obj = src[:-2] + ".o"
        _run([*cc, "-O3", "-fPIC", "-fvisibility=hidden", "-pthread", "-I", include, "-I", tmp, "-c", "-o", obj, src],
             "compiling " + os.path.basename(src))
        objects.append(obj)
    obj = schema[:-4] + ".o"
    _run([*cxx, "-O2", "-fPIC", "-I", include, "-I", items, "-c", "-o", obj, schema], "compiling the KIM record")
    objects.append(obj)
    out = os.path.join(tmp, kim.name)
    os.mkdir(out)
    lib = os.path.join(out, MODEL_LIBRARY)
    _run([*cxx, "-shared", "-fPIC", "-pthread", "-Wl,-z,defs", f"-Wl,--version-script={script}", "-o", lib,
          *objects, *(o for _, _, objs in units for o in objs), "-lkim-api", "-lm"]
         + [f"-L{d}" for d in _libdirs(include)], f"linking {MODEL_LIBRARY}")
    for path in (driver, schema, script, *objects):
        os.remove(path)
    return lib


def _libdirs(include):
    """Where libkim-api.so may be, next to the include directory's prefix (for a KIM API not in /usr)."""
    prefix = os.path.dirname(os.path.dirname(include))
    return [d for d in (os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")) if os.path.isdir(d)]


def _run(argv, what):
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-12:])
        raise JobError(f"adgrad export --kim: {what} failed (`{shlex.join(argv[:1])}`):\n{tail}")


def manifest(kim: Plan):
    return {"name": kim.name, "library": f"{kim.name}/{MODEL_LIBRARY}", "species": list(kim.species),
            "cutoff": kim.cutoff, "energy": kim.energy, "slots": list(kim.slots), "units": "metal (A, eV)"}
