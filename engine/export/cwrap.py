"""The C side of an exported model: its header and the C wrapper around the object code.

The ABI (docs/native.md is its contract): a context holding the params, a per-point function, a
batch function over n points with strides and threads, the workspace sizes, the params' setters and
the model's metadata. The wrapper checks every argument it can (NULL pointers, n, strides, the
params' length, the workspace's size), then calls the inner functions objcode.py keeps: the
kernel's `batch` driver for rows, its `strided` driver for any other layout, on `threads` threads
(POSIX threads; each takes blocks of rows from one shared counter, as engine/kernel.py's drivers).
"""
from __future__ import annotations

import json

from ..codegen.load import STRIDED_BLOCK
from ..kernel import MIN_BLOCK, SERIAL_BELOW
from .objcode import inner_name

MAX_THREADS = 1024

COMMON = r"""
#ifndef ADGRAD_ABI_VERSION
/* Shared by every adgrad export (docs/native.md). */
#define ADGRAD_ABI_VERSION 1
enum {
    ADGRAD_OK = 0,
    ADGRAD_ERR_ARGUMENT = 1,    /* a NULL pointer, n < 0, a negative stride, an output whose points or
                                   entries share memory, a thread count outside 0..1024 */
    ADGRAD_ERR_PARAMS = 2,      /* a params array of the wrong length, or an unknown param name */
    ADGRAD_ERR_WORKSPACE = 3,   /* a workspace smaller than the size function says */
    ADGRAD_ERR_MEMORY = 4,      /* out of memory (the batch call's own workspace) */
    ADGRAD_ERR_KERNEL = 5       /* the compiled kernel reported an error (a bug in adgrad) */
};
typedef struct adgrad_array {
    const char *name;           /* the model's name of the input, param or result */
    const char *kind;           /* "input", "param", "value" or "derivative" */
    const char *of;             /* a derivative: the output it differentiates; else "" */
    const char *wrt;            /* a derivative: "F", or "F,F" for a second derivative; else "" */
    const char *variant;        /* a derivative: "" , "sum" (per-point rows of a summed one), "jvp", "vjp" */
    int32_t rank;
    const int64_t *shape;       /* rank entries */
    int64_t size;               /* doubles per point (a param: in all); 1 for a scalar */
    int64_t offset;             /* a param: its first double in the params array; else 0 */
} adgrad_array;
typedef struct adgrad_model_info {
    int32_t abi_version;        /* ADGRAD_ABI_VERSION of the library */
    const char *name;           /* the library's name: the prefix of its symbols */
    const char *model;          /* the model's name */
    const char *adgrad_version;
    const char *model_sha256;   /* of the model's YAML text (the output files' model_sha256) */
    const char *kernel_sha256;  /* of the generated kernel source (the output files' kernel_sha256) */
    const char *cpu;            /* the code in use: built for "x86-64", "x86-64-v3", ... or "host" */
    int32_t n_inputs, n_params, n_outputs;
    const adgrad_array *inputs, *params, *outputs;
    int64_t n_param_values;     /* the length of a params array */
    const double *param_defaults;   /* n_param_values doubles: the params as exported */
    int64_t workspace_size;     /* doubles of scratch for one call of the point function */
} adgrad_model_info;
#endif
"""

HEADER = r"""/* {name}.h: model '{model}' as a native library (lib{name}.so), written by adgrad {version}
   (`adgrad export`); do not edit. The ABI is described in adgrad's docs/native.md.
{contents} */
#ifndef ADGRAD_{NAME}_H
#define ADGRAD_{NAME}_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {{
#endif
{common}
/* indices into the inputs and outputs arrays, sizes in doubles, params' offsets */
{defines}

typedef struct {name}_ctx {name}_ctx;   /* the params; read-only during calls, shared by threads */

const adgrad_model_info *{name}_info(void);
{name}_ctx *{name}_new(void);          /* params = the defaults; NULL if out of memory */
void {name}_free({name}_ctx *ctx);
int {name}_set_params({name}_ctx *ctx, const double *values, int64_t n);
int {name}_set_param({name}_ctx *ctx, const char *name, const double *values, int64_t n);
int {name}_get_params(const {name}_ctx *ctx, double *values, int64_t n);
int64_t {name}_workspace_size(void);
int {name}_point(const {name}_ctx *ctx, const double *const *inputs, double *const *outputs, double *work);
int64_t {name}_batch_workspace_size(int32_t threads);
int {name}_batch(const {name}_ctx *ctx, int64_t n, const double *const *inputs, const int64_t *input_strides,
        double *const *outputs, const int64_t *output_strides, int32_t threads, double *work,
        int64_t work_size, unsigned char *nonfinite);
const char *{name}_error_string(int code);
{extra}
#ifdef __cplusplus
}}
#endif
#endif
"""


def _c_string(s):
    return json.dumps(s)            # a JSON string of ASCII is a C string literal


def _describe(a):
    shape = "x".join(map(str, a.shape)) or "scalar"
    what = {"input": "input", "param": "param", "value": "output"}.get(a.kind, f"d{a.of}/d({a.wrt})")
    return f"{a.name} ({what}, {shape}{'; ' + a.variant if a.variant else ''})"


def header(lay, extra=""):
    """<NAME>.h of the library of `lay`; extra: more declarations (the UMAT's)."""
    n, up = lay.name, lay.name.upper()
    defines = [f"#define {up}_N_INPUTS {len(lay.inputs)}", f"#define {up}_N_OUTPUTS {len(lay.outputs)}",
               f"#define {up}_N_PARAM_VALUES {lay.n_param_values}"]
    for k, a in enumerate(lay.inputs):
        defines += [f"#define {up}_IN_{a.name} {k}", f"#define {up}_SIZE_IN_{a.name} {a.size}"]
    for k, a in enumerate(lay.outputs):
        defines += [f"#define {up}_OUT_{a.name} {k}", f"#define {up}_SIZE_OUT_{a.name} {a.size}"]
    for a in lay.params:
        defines += [f"#define {up}_PARAM_{a.name} {a.offset}", f"#define {up}_SIZE_PARAM_{a.name} {a.size}"]
    contents = "\n".join(f"   {title}: " + ", ".join(_describe(a) for a in arrays)
                         for title, arrays in (("inputs", lay.inputs), ("params", lay.params), ("outputs", lay.outputs))
                         if arrays)
    return HEADER.format(name=n, NAME=n.upper(), model=lay.model, version=lay.version, contents=contents,
                         common=COMMON, defines="\n".join(defines), extra=extra)


SOURCE = r"""/* The C wrapper of lib{name}.so, written by adgrad {version}; do not edit. */
#define _POSIX_C_SOURCE 200809L
{includes}#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "{name}.h"

#define API __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))
#define NI {ni}
#define NO {no}
#define NP {np}
#define WS {ws}                  /* doubles of scratch of one point call */
#define WS8 {ws8}                /* WS rounded up to 64 bytes */
#define REGION {region}          /* doubles per thread of a batch call: WS8 and its strided row buffers */
#define MAX_THREADS {max_threads}
#define SERIAL_BELOW {serial_below}
#define MIN_BLOCK {min_block}

/* the kernel's point function and its two drivers (numba's inner functions; 0 = success), per CPU variant */
typedef int32_t point_fn(void **ret, void **exc, {point_params});
typedef int32_t batch_fn(void **ret, void **exc, int64_t m, int64_t *next_row, int64_t block, {batch_params});
typedef int32_t strided_fn(void **ret, void **exc, int64_t m, int64_t *next_row, int64_t block, {strided_params});
{declarations}
{helpers}
struct {name}_ctx {{ double params[NP > 0 ? NP : 1]; }};

{tables}

static adgrad_model_info info = {{      /* cpu: the variant in use, set when the library is loaded */
    ADGRAD_ABI_VERSION, {s_name}, {s_model}, {s_version}, {s_model_sha}, {s_kernel_sha}, {s_cpu},
    NI, {nparams}, NO, {info_inputs}, {info_params}, {info_outputs}, NP, {info_defaults}, WS
}};

{dispatch}
API const adgrad_model_info *{name}_info(void) {{ return &info; }}

API {name}_ctx *{name}_new(void) {{
    {name}_ctx *ctx = malloc(sizeof *ctx);
    if (ctx && NP > 0)
        memcpy(ctx->params, defaults, sizeof(double) * NP);
    return ctx;
}}

API void {name}_free({name}_ctx *ctx) {{ free(ctx); }}

API int {name}_set_params({name}_ctx *ctx, const double *values, int64_t n) {{
    if (!ctx || (!values && n))
        return ADGRAD_ERR_ARGUMENT;
    if (n != NP)
        return ADGRAD_ERR_PARAMS;
    if (n)
        memmove(ctx->params, values, sizeof(double) * n);
    return ADGRAD_OK;
}}

API int {name}_get_params(const {name}_ctx *ctx, double *values, int64_t n) {{
    if (!ctx || (!values && n))
        return ADGRAD_ERR_ARGUMENT;
    if (n != NP)
        return ADGRAD_ERR_PARAMS;
    if (n)
        memmove(values, ctx->params, sizeof(double) * n);
    return ADGRAD_OK;
}}

API int {name}_set_param({name}_ctx *ctx, const char *name, const double *values, int64_t n) {{
    if (!ctx || !name || (!values && n))
        return ADGRAD_ERR_ARGUMENT;
    for (int32_t k = 0; k < info.n_params; k++) {{
        const adgrad_array *p = &info.params[k];
        if (strcmp(p->name, name) == 0) {{
            if (n != p->size)
                return ADGRAD_ERR_PARAMS;
            memmove(ctx->params + p->offset, values, sizeof(double) * n);
            return ADGRAD_OK;
        }}
    }}
    return ADGRAD_ERR_PARAMS;
}}

API int64_t {name}_workspace_size(void) {{ return WS; }}

API int {name}_point(const {name}_ctx *ctx, const double *const *inputs, double *const *outputs, double *work) {{
    if (!ctx || (NI && !inputs) || !outputs || !work)
        return ADGRAD_ERR_ARGUMENT;
    for (int k = 0; k < NI; k++)
        if (!inputs[k])
            return ADGRAD_ERR_ARGUMENT;
    for (int k = 0; k < NO; k++)
        if (!outputs[k])
            return ADGRAD_ERR_ARGUMENT;
    void *ret = NULL, *exc = NULL;
    double *p = (double *)ctx->params;
    return k_point(&ret, &exc, {point_args}) ? ADGRAD_ERR_KERNEL : ADGRAD_OK;
}}

/* ---- batch ---------------------------------------------------------------------------------- */

typedef struct job {{
    double *params;
    int64_t n, block, next_row;     /* next_row: the drivers' shared counter, taken atomically */
    int strided;                    /* 0: rows (the batch driver); 1: the strided driver */
    double *a[NI + NO + 1];         /* first entries: inputs, then outputs */
    int64_t span[NI + NO + 1], sk[NI + NO + 1], si[NI + NO + 1];
    double *work;                   /* REGION doubles per thread */
    unsigned char *bad;
    int64_t nbad;
}} job;

typedef struct worker {{ job *j; int64_t w; int32_t status; }} worker;

static int32_t run(job *j, int64_t w) {{
    double *work = j->work + w * REGION, *p = j->params, **a = j->a;
    double *buf = work + WS8;       /* the strided driver's row buffers */
    int64_t *span = j->span, *sk = j->sk, *si = j->si;
    void *ret = NULL, *exc = NULL;
    (void)buf; (void)span; (void)sk; (void)si;
    if (!j->strided)
        return k_batch(&ret, &exc, j->n, &j->next_row, j->block, {batch_args}, work, j->bad, j->nbad);
    return k_strided(&ret, &exc, j->n, &j->next_row, j->block, {strided_args}, work, {buf_args}, j->bad, j->nbad);
}}

static void *thread_main(void *arg) {{
    worker *t = arg;
    t->status = run(t->j, t->w);
    return NULL;
}}

static int64_t workers_for(int32_t threads) {{
    if (threads < 0 || threads > MAX_THREADS)
        return -1;
    if (threads > 0)
        return threads;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : cpus;
}}

API int64_t {name}_batch_workspace_size(int32_t threads) {{
    int64_t w = workers_for(threads);
    return w < 0 ? -1 : w * REGION;
}}

/* Point i's entry k of array a is at base[a] + i * si[a] + k * sk[a]; checks them and sets the
   job's arrays, spans and driver. An output's points and entries must not share memory. */
static int layout(job *j, const double *const *inputs, const int64_t *input_strides, double *const *outputs,
                  const int64_t *output_strides) {{
    int rows = 1;
    for (int k = 0; k < NI + NO; k++) {{
        int out = k >= NI;
        int64_t size = sizes[k];
        const int64_t *st = out ? output_strides : input_strides;
        int64_t si = st ? st[2 * (k - out * NI)] : size, sk = st ? st[2 * (k - out * NI) + 1] : 1;
        double *base = out ? outputs[k - NI] : (double *)inputs[k];
        if (!base || si < 0 || sk < 0)
            return ADGRAD_ERR_ARGUMENT;
        if (size == 1)
            sk = 1;
        if (out && j->n > 1 && (si == 0 || (size > 1 && !(sk >= (j->n - 1) * si + 1 || si >= (size - 1) * sk + 1))))
            return ADGRAD_ERR_ARGUMENT;
        if (out && size > 1 && sk == 0)
            return ADGRAD_ERR_ARGUMENT;
        rows &= si == size && sk == 1;
        j->a[k] = base;
        j->sk[k] = sk;
        j->si[k] = j->n > 1 ? si : 0;
        j->span[k] = (j->n - 1) * j->si[k] + (size - 1) * sk + 1;
    }}
    j->strided = !rows;
    return ADGRAD_OK;
}}

API int {name}_batch(const {name}_ctx *ctx, int64_t n, const double *const *inputs, const int64_t *input_strides,
        double *const *outputs, const int64_t *output_strides, int32_t threads, double *work,
        int64_t work_size, unsigned char *nonfinite) {{
    static unsigned char no_flags;
    job j;
    int64_t limit = workers_for(threads);
    if (!ctx || n < 0 || (NI && !inputs) || !outputs || limit < 0)
        return ADGRAD_ERR_ARGUMENT;
    if (work && work_size < limit * REGION)
        return ADGRAD_ERR_WORKSPACE;
    j.n = n;
    int status = layout(&j, inputs, input_strides, outputs, output_strides);
    if (status != ADGRAD_OK || n == 0)
        return status;
    int64_t workers = n < SERIAL_BELOW ? 1 : (limit < n ? limit : n);
    j.params = (double *)ctx->params;
    j.block = workers == 1 ? n : (n / (64 * workers) > MIN_BLOCK ? n / (64 * workers) : MIN_BLOCK);
    j.next_row = 0;
    j.bad = nonfinite ? nonfinite : &no_flags;
    j.nbad = nonfinite ? n : 0;
    j.work = work ? work : malloc(sizeof(double) * workers * REGION);
    if (!j.work)
        return ADGRAD_ERR_MEMORY;
    worker t[MAX_THREADS];
    pthread_t id[MAX_THREADS];
    int64_t started = 1;
    for (int64_t w = 0; w < workers; w++)
        t[w] = (worker){{&j, w, 0}};
    /* a thread that cannot start leaves its share to the others: every row is still done */
    while (started < workers && pthread_create(&id[started], NULL, thread_main, &t[started]) == 0)
        started++;
    t[0].status = run(&j, 0);
    for (int64_t w = 1; w < started; w++)
        pthread_join(id[w], NULL);
    if (!work)
        free(j.work);
    for (int64_t w = 0; w < started; w++)
        if (t[w].status)
            return ADGRAD_ERR_KERNEL;
    return ADGRAD_OK;
}}

API const char *{name}_error_string(int code) {{
    switch (code) {{
    case ADGRAD_OK: return "success";
    case ADGRAD_ERR_ARGUMENT: return "bad argument: a NULL pointer, n < 0, a negative stride, an output whose "
                                     "points or entries share memory, or a thread count outside 0..1024";
    case ADGRAD_ERR_PARAMS: return "wrong params: a params array of the wrong length, or an unknown param name";
    case ADGRAD_ERR_WORKSPACE: return "the workspace is smaller than {name}_batch_workspace_size(threads)";
    case ADGRAD_ERR_MEMORY: return "out of memory";
    case ADGRAD_ERR_KERNEL: return "the compiled kernel reported an error (a bug in adgrad)";
    default: return "unknown error code";
    }}
}}
"""


# numba's C helpers the object code may call (objcode.HELPERS), with numba's contracts
HELPERS = {"numba_attempt_nocopy_reshape": r"""
/* numba's helper (numba/_helperlib.c, after numpy's _attempt_nocopy_reshape): if an array of `nd`
   dims with these byte strides can be viewed with `newnd` dims `newdims` without a copy, set
   newstrides and return 1, else return 0. The kernels' drivers reshape C-contiguous rows flat. Weak: a
   KIM model links several kernels' wrappers, each with its copy. */
HIDDEN __attribute__((weak)) int numba_attempt_nocopy_reshape(int64_t nd, const int64_t *dims, const int64_t *strides, int64_t newnd,
        const int64_t *newdims, int64_t *newstrides, int64_t itemsize, int is_f_order) {
    int64_t od[64], os[64], on = 0, total = 1, newtotal = 1;
    if (nd > 64)
        return 0;
    for (int64_t k = 0; k < nd; k++)
        if (dims[k] != 1) {            /* axes of length 1: their strides do not matter */
            od[on] = dims[k];
            os[on++] = strides[k];
            total *= dims[k];
        }
    for (int64_t k = 0; k < newnd; k++)
        newtotal *= newdims[k];
    if (newtotal != total)
        return 0;
    if (total == 0) {
        for (int64_t k = 0; k < newnd; k++)
            newstrides[k] = itemsize;
        return 1;
    }
    int64_t oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < newnd && oi < on) {     /* old axes [oi, oj) become new axes [ni, nj): equal products */
        int64_t np = newdims[ni], op = od[oi];
        while (np != op) {
            if (np < op)
                np *= newdims[nj++];
            else
                op *= od[oj++];
        }
        for (int64_t k = oi; k < oj - 1; k++)
            if (is_f_order ? os[k + 1] != od[k] * os[k] : os[k] != od[k + 1] * os[k + 1])
                return 0;               /* these old axes are not one contiguous run */
        if (is_f_order) {
            newstrides[ni] = os[oi];
            for (int64_t k = ni + 1; k < nj; k++)
                newstrides[k] = newstrides[k - 1] * newdims[k - 1];
        } else {
            newstrides[nj - 1] = os[oj - 1];
            for (int64_t k = nj - 1; k > ni; k--)
                newstrides[k - 1] = newstrides[k] * newdims[k];
        }
        ni = nj++;
        oi = oj++;
    }
    int64_t last = ni >= 1 ? newstrides[ni - 1] : itemsize;   /* trailing new axes of length 1 */
    if (is_f_order && ni >= 1)
        last *= newdims[ni - 1];
    for (int64_t k = ni; k < newnd; k++)
        newstrides[k] = last;
    return 1;
}
"""}


# x86-64-v3 (AVX, AVX2, BMI1, BMI2, F16C, FMA, LZCNT, MOVBE) and x86-64-v4 (AVX-512 F, BW, CD, DQ, VL),
# each with the OS saving its registers
DISPATCH = r"""
/* The best code the CPU can run: x86-64-v4 where it has AVX-512 (F, BW, CD, DQ, VL), x86-64-v3 where
   it has AVX, AVX2, BMI1, BMI2, F16C, FMA, LZCNT and MOVBE (each level with the OS saving its
   registers), else the baseline x86-64 code: the same bits either way. ADGRAD_NATIVE_CPU=x86-64 or
   x86-64-v3 in the environment keeps that level's code at most (to test or compare it). */
static int cpu_level(void) {{
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 1;
    if (!((c >> 12) & (c >> 22) & (c >> 27) & (c >> 28) & (c >> 29) & 1))   /* FMA MOVBE OSXSAVE AVX F16C */
        return 1;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6)                          /* the OS saves the SSE and AVX registers */
        return 1;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((b >> 3) & (b >> 5) & (b >> 8) & 1))   /* BMI1 AVX2 BMI2 */
        return 1;
    unsigned ebx7 = b;
    if (!__get_cpuid(0x80000001, &a, &b, &c, &d) || !((c >> 5) & 1))                   /* LZCNT */
        return 1;
    /* AVX512F DQ CD BW VL, and the OS saves the opmask and ZMM registers */
    if ((ebx7 >> 16) & (ebx7 >> 17) & (ebx7 >> 28) & (ebx7 >> 30) & (ebx7 >> 31) & 1 && (lo & 0xe0) == 0xe0)
        return 4;
    return 3;
}}

__attribute__((constructor)) static void choose_variant(void) {{
    const char *force = getenv("ADGRAD_NATIVE_CPU");
    int level = cpu_level();
    if (force && strcmp(force, "x86-64") == 0)
        level = 1;
    else if (force && strcmp(force, "x86-64-v3") == 0 && level > 3)
        level = 3;
    if (level == 4) {{
        k_point = {v4_point};
        k_batch = {v4_batch};
        k_strided = {v4_strided};
        info.cpu = "x86-64-v4";
    }} else if (level == 3) {{
        k_point = {v3_point};
        k_batch = {v3_batch};
        k_strided = {v3_strided};
        info.cpu = "x86-64-v3";
    }}
}}
"""


def _double(x):
    """A C literal of the double x, exact (hexadecimal) and for inf and NaN too."""
    if x != x:
        return "NAN"
    if x in (float("inf"), float("-inf")):
        return "INFINITY" if x > 0 else "-INFINITY"
    return float(x).hex()


def _tables(lay):
    """The C definitions of the metadata (shapes, adgrad_array rows, defaults) and the sizes table."""
    lines = [f"static const int64_t sizes[NI + NO + 1] = {{{', '.join(str(a.size) for a in lay.per_point)}}};"]
    for group in ("inputs", "params", "outputs"):
        rows = []
        for k, a in enumerate(getattr(lay, group)):
            shape = f"shape_{group}_{k}"
            dims = ", ".join(map(str, a.shape)) or "0"
            lines.append(f"static const int64_t {shape}[{max(1, len(a.shape))}] = {{{dims}}};")
            rows.append(f"    {{{_c_string(a.name)}, {_c_string(a.kind)}, {_c_string(a.of)}, {_c_string(a.wrt)}, "
                        f"{_c_string(a.variant)}, {len(a.shape)}, {shape}, {a.size}, {a.offset}}},")
        if rows:
            lines += [f"static const adgrad_array info_{group}[] = {{", *rows, "};"]
    values = [_double(v) for v in lay.defaults] or ["0.0"]
    lines.append("static const double defaults[NP > 0 ? NP : 1] = {")
    lines += ["    " + ", ".join(values[k:k + 4]) + "," for k in range(0, len(values), 4)]
    lines.append("};")
    return "\n".join(lines)


def _variants(n, variants):
    """(declarations of the inner functions and the pointers the wrapper calls, the dispatch code)."""
    lines = []
    for kind in ("point", "batch", "strided"):
        lines.append(f"HIDDEN {kind}_fn {', '.join(inner_name(n, kind, tag) for tag, _ in variants)};")
    for kind in ("point", "batch", "strided"):
        lines.append(f"static {kind}_fn *k_{kind} = {inner_name(n, kind, variants[0][0])};")
    if len(variants) == 1:
        return "\n".join(lines), ""
    assert [cpu for _, cpu in variants] == ["x86-64", "x86-64-v3", "x86-64-v4"], variants
    return "\n".join(lines), DISPATCH.format(**{f"{tag}{kind}": inner_name(n, kind, tag) for tag, _ in variants[1:]
                                                for kind in ("point", "batch", "strided")})


def source(lay, variants, helpers=(), extra=""):
    """The C wrapper of the library of `lay` (layout.Layout) whose object code holds `variants`
    ([(tag, cpu)], engine/export variants) and calls `helpers` (objcode.object_code's); extra: C
    appended to it (the UMAT's, which calls k_point)."""
    n, ni = lay.name, len(lay.inputs)
    declarations, dispatch = _variants(n, variants)
    index = {a.arg: (k if a.kind == "input" else ni + k - len(lay.inputs) - len(lay.params))
             for k, a in enumerate(lay.arrays) if a.kind != "param"}
    ws8 = -(-lay.workspace_size // 8) * 8
    bufs = [STRIDED_BLOCK * a.size for a in lay.per_point]
    region = -(-(ws8 + sum(bufs)) // 8) * 8
    point_params = [f"double *{a.arg}" for a in lay.arrays] + ["double *work"]
    strided_params = [q for a in lay.arrays for q in ([f"double *{a.arg}"] if a.kind == "param" else
                      [f"double *{a.arg}", f"int64_t {a.arg}_span", f"int64_t {a.arg}_sk", f"int64_t {a.arg}_si"])]
    strided_params += ["double *work", *(f"double *b_{a.arg}" for a in lay.per_point), "void *bad", "int64_t nbad"]

    def arg(a, point=False):
        if a.kind == "param":
            return f"p + {a.offset}"
        if point:
            return f"(double *)inputs[{index[a.arg]}]" if a.kind == "input" else f"outputs[{index[a.arg] - ni}]"
        return f"a[{index[a.arg]}]"
    strided_args = [arg(a) if a.kind == "param" else
                    ", ".join(f"{v}[{index[a.arg]}]" for v in ("a", "span", "sk", "si")) for a in lay.arrays]
    offsets = [sum(bufs[:k]) for k in range(len(bufs))]
    return SOURCE.format(
        name=n, version=lay.version, ni=ni, no=len(lay.outputs), np=lay.n_param_values, ws=lay.workspace_size,
        ws8=ws8, region=region, max_threads=MAX_THREADS, serial_below=SERIAL_BELOW, min_block=MIN_BLOCK,
        declarations=declarations, dispatch=dispatch, includes="#include <cpuid.h>\n" if dispatch else "",
        point_params=", ".join(point_params), batch_params=", ".join(point_params + ["void *bad", "int64_t nbad"]),
        strided_params=", ".join(strided_params), tables=_tables(lay),
        helpers="".join(HELPERS[h] for h in helpers),
        s_name=_c_string(n), s_model=_c_string(lay.model), s_version=_c_string(lay.version),
        s_model_sha=_c_string(lay.model_sha256), s_kernel_sha=_c_string(lay.kernel_sha256),
        s_cpu=_c_string(variants[0][1]),
        nparams=len(lay.params), info_inputs="info_inputs" if lay.inputs else "NULL",
        info_params="info_params" if lay.params else "NULL", info_outputs="info_outputs" if lay.outputs else "NULL",
        info_defaults="defaults",
        point_args=", ".join([arg(a, point=True) for a in lay.arrays] + ["work"]),
        batch_args=", ".join(arg(a) for a in lay.arrays), strided_args=", ".join(strided_args),
        buf_args=", ".join(f"buf + {o}" for o in offsets)) + extra
