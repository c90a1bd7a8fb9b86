"""Vector math: which loop nests call engine/numeric/vecmath.py's branch-free functions instead of libm,
and the two things such a nest needs to vectorize (emit.py writes the nest itself).

A libm call (np.exp) in a loop keeps LLVM from vectorizing it; vecmath's functions, inlined by numba,
let it run 8 lanes at once (AVX-512; 4 with AVX2). But a vecmath function that is not vectorized is
slower than libm (measured here: scalar vexp 10.5 ns, libm exp 4.3 ns; vsin 15 ns, sin 11 ns), and
each inlined call costs 0.2-0.8 s of compile time. So the policy, with `math: vector` (the default):

- a loop nest calls the vector forms when LLVM will vectorize its innermost loop: at least
  MIN_LANES iterations (with fewer, LLVM keeps a constant-count loop scalar: 8 lanes times 2
  interleaved), nothing in it that stays a call (every lowering `inline` or a `MathLowering`),
  every array it reads or writes contiguous along the innermost axis, and at most MAX_CHECKS
  runtime alias checks (numba cannot tell LLVM that the output rows, the workspace and the inputs
  do not overlap, so LLVM compares every pair of a written array and another array before the
  vector loop: beyond its default of 8 comparisons it vectorizes narrower if its cost model
  accepts the checks, beyond about 128 not at all; an exp loop writing 4 to 8 arrays measured
  1.2-1.8x faster than libm, one with 90 comparisons slower);
- a straight-line kernel (scalarized) with few inputs and outputs per point (any number when the caller's
  arrays have the points last: compile_model's points_last, felupe's layout) runs as a lanes kernel:
  its body in a loop over a block of LANES_BLOCK points whose inputs and outputs the drivers move
  into the workspace, element k of point b at work[(row + k) * LANES_BLOCK + b], and back (see
  lanes_fit). The strides are literals, so LLVM sees unit-stride accesses a constant distance
  apart, needs no runtime alias check and vectorizes the loop over points with the vector forms
  (neo-Hookean W+P on one thread: 22.8 -> 12.4 ns/point, 2026-11-26; its tangent, 90 values a point,
  through the strided driver on felupe's arrays: 310 -> 177 ns/point, 2026-11-28). The point function goes
  through the same body for its one point, so kernel.point_kernel gives the drivers' bits;
- other straight-line code (statements outside loops) and every other nest call libm;
- `math: libm` calls libm everywhere (numpy's bits of every function); nothing else changes, the
  loop nests and the order of every sum are the same in both modes.

What else a vector nest needs (in both modes, so that they differ in the function calls only):
- a reduction over the innermost axis (a running sum) is a dependence from lane to lane that LLVM
  will not vectorize without `reassoc`, which would make the bits depend on the vector width. The
  nest instead stores the values it reduces, and after the loop they are folded with LANES partial
  accumulators (element j into accumulator j mod LANES), combined pairwise: an order written into
  the generated code, so the same bits on every machine, thread count and chunk size.
- sin, cos and tan return a NaN marker beyond vecmath.TRIG_MAX (2**30); the nest ORs
  `__trig_fallback(x)` over its lanes (vectorizes), and if any lane needs libm the whole nest is
  computed again as `math: libm` writes it, so those points get libm's values exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir.op import OPS, literal
from ..ir.ops.elementwise import Inline, MathLowering
from .plan import Buf
from .schedule import kind

MIN_LANES = 16      # innermost iterations below which LLVM leaves the loop scalar (measured, AVX-512)
LANES = 8           # partial accumulators of a split reduction (sum of 1000: 4 cost 260 ns, 8 and 16 10 ns)
LANES_IO = 32       # inputs + outputs per point of a lanes kernel: above, moving point-first rows costs more
                    # than vectorizing saves (neo-Hookean W+P, 19: 1.8x faster; W+P+A, 100: 1.9x slower);
                    # no limit for a caller whose arrays have the points last (lanes_fit's points_last)
LANES_BLOCK = 32    # points per pass of a lanes kernel (their values, LANES_IO * 32 * 8 bytes, stay in L1)
MAX_CHECKS = 32     # runtime alias checks beyond which a vector nest is no faster than libm (measured)


@dataclass
class Decision:
    """Whether a loop nest with math calls vectorizes with vecmath's functions (`vector`), why, and the
    reductions it splits off to do so (split in both math modes: the modes differ in the calls only)."""
    vector: bool
    reason: str
    split: dict = field(default_factory=dict)      # reduce Var -> its equation


def function(e):
    """The model language's name of a math op (pow for `**`)."""
    return OPS[e.op].function or e.op


def is_call(e, xs):
    """Whether an equation is a math function call (its two forms differ; x**3 is multiplications)."""
    lower = OPS[e.op].lower
    return isinstance(lower, MathLowering) and lower(*xs, math="libm") != lower(*xs, math="vector")


def _vectorizes(e):
    op = OPS[e.op]
    if op.kind in ("view", "reduce") or op.loop is not None:
        return True
    return op.kind == "elementwise" and isinstance(op.lower, (Inline, MathLowering))


def _contiguous(em, a):
    """Whether a complete value (read by the nest, not computed in it) is read with unit or zero stride
    along the innermost axis of the loop."""
    s = em.store[a]
    return isinstance(s, str) or not a.shape or a.shape[-1] == 1 or s.strides[-1] in (0, 1)


def decide(em, grp, calls):
    """The Decision for loop nest `grp` of emitter `em`; `calls`: its math-call equations."""
    if not calls:
        return Decision(False, "")
    n = grp.space[-1]
    if n < MIN_LANES:
        return Decision(False, f"a loop of {n} < {MIN_LANES} iterations, which LLVM keeps scalar")
    local = {e.out for e in grp.eqns if kind(e) != "reduce"}
    for e in grp.eqns:
        if not _vectorizes(e):
            return Decision(False, f"a loop with {function(e)}, a call that keeps it scalar")
        if any(a not in local and not _contiguous(em, a) for k, a in enumerate(e.args) if k not in OPS[e.op].whole):
            return Decision(False, "a loop reading an array with a stride, which LLVM keeps scalar")
    split = {}
    for e in grp.eqns:
        if kind(e) != "reduce" or len(grp.space) - 1 not in e.attr("axes"):
            continue                    # accumulates lane by lane in memory: vectorizes as it is
        axes, a = tuple(sorted(e.attr("axes"))), e.args[0]
        src = em.store.get(a)
        if axes != tuple(range(len(grp.space) - len(axes), len(grp.space))) or \
                not (a in local or (isinstance(src, Buf) and src.contiguous)):
            return Decision(False, f"a loop with a {e.op} over axes {axes}, which LLVM keeps scalar")
        split[e.out] = e
    checks = _alias_checks(em, grp, local, split)
    if checks > MAX_CHECKS:
        return Decision(False, f"a loop needing {checks} > {MAX_CHECKS} alias checks of its arrays, "
                               f"which LLVM keeps scalar")
    return Decision(True, f"a loop of {n} iterations", split)


def _alias_checks(em, grp, local, split):
    """The runtime alias checks LLVM needs to vectorize the nest: one per pair of an array the loop
    writes and another array it reads or writes (numba's arrays carry no noalias; places in one
    array LLVM tells apart itself, and module constants are never written)."""
    reads = {e.args[0] for e in split.values()}
    written = {em.out_of.get(e.out, "work") for e in grp.eqns if e.out not in split and
               (e.out in em.stored or e.out in reads or (kind(e) == "reduce" and e.out.shape))}
    read = {s.array for e in grp.eqns for a in e.args
            if a not in local and isinstance(s := em.store.get(a), Buf) and not s.array.startswith("__")}
    w, r = len(written), len(read - written)
    return w * (w - 1) // 2 + w * r


def reduce_tail(em, e, src, space, target):
    """After the loop: e (reducing a trailing block of axes of `space`) over src, a contiguous Buf of
    shape `space`, element j of the block into accumulator j % LANES, combined pairwise;
    `target(kept_idx)` is where the result goes."""
    red, r = OPS[e.op].lower, len(space) - len(e.attr("axes"))
    n, name = math.prod(space[r:]), em.vname[e.out]
    acc = [f"{name}_{k}" for k in range(LANES)]
    whole = n - n % LANES
    with em.loops(space[:r], "r") as kidx:
        base = [str(src.offset)] if src.offset else []
        base += [f"{i}*{math.prod(space[k + 1:r]) * n}" for k, i in enumerate(kidx)]

        def at(j):
            return f"{src.array}[{' + '.join(base + [j])}]"
        for a in acc:
            em.line(f"{a} = {literal(red.identity)}")
        if whole:
            with em.block(f"for j in range(0, {whole}, {LANES}):"):
                for k, a in enumerate(acc):
                    em.line(red.update.format(t=a, x=at(f"j + {k}" if k else "j")))
        for k in range(n % LANES):
            em.line(red.update.format(t=acc[k], x=at(str(whole + k))))
        em.line(f"{target(kidx)} = {_pairwise(OPS[red.combine].lower, acc)}")


def _pairwise(combine, terms):
    while len(terms) > 1:
        terms = [combine.format(*terms[k:k + 2]) if k + 1 < len(terms) else terms[k] for k in range(0, len(terms), 2)]
    return terms[0]


def lanes_fit(graph, math, points_last=False):
    """Whether straight-line (scalarized) `graph` runs as a lanes kernel: math "vector", at most
    LANES_IO values in and out per point (any number when `points_last`: the caller's arrays have the
    point axis last, so the strided driver moves each entry's run of points straight between them and
    the workspace rows, with no per-point rows to transpose), and every equation plain arithmetic or a
    math function whose vector form needs no libm fallback (sin, cos and tan beyond TRIG_MAX do)."""
    if math != "vector" or not graph.inputs or not graph.outputs:
        return False
    if not points_last and sum(max(1, v.size) for v in (*graph.inputs.values(), *graph.outputs.values())) > LANES_IO:
        return False
    for e in graph.eqns:
        lower = OPS[e.op].lower
        if kind(e) in ("load", "const") or e.op == "pack" or isinstance(lower, Inline):
            continue
        if not isinstance(lower, MathLowering) or lower.fallback:
            return False
    return True
