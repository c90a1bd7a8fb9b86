"""Cold compile times (issue 12, item 4): what `adgrad run` compiles for each shipped example config,
and the gradients of det and inv of a 16x16 matrix, each in a fresh process with empty adgrad and
numba caches, then once more from the caches that run filled (adgrad bench's measurement:
engine/tools/bench.py compile_seconds). Rounds are interleaved across the cases, so a change in the
machine's load hits all of them alike; the table gives medians.

    python benchmarks/compile_times.py                   # every example and det/inv 16x16, 3 rounds
    python benchmarks/compile_times.py --rounds 5 --only eam si_tersoff det16
"""
import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _harness import print_command
from adgrad.engine.tools.bench import compile_seconds

ROOT = Path(__file__).resolve().parent.parent
TARGET = 2.0          # seconds, cold, per shipped example
TARGET_LINALG = 10.0  # seconds, cold, the 16x16 det/inv gradient
LINALG = {
    "det16": "adgrad: 1\nname: det16\ninputs:\n  A: {shape: [16, 16]}\noutputs:\n  D: det(A)\n",
    "inv16": "adgrad: 1\nname: inv16\ninputs:\n  A: {shape: [16, 16]}\noutputs:\n  S: sum(inv(A))\n",
}


def cases(folder):
    """name -> (path, is_config): the example configs, and the det/inv models written to `folder`."""
    out = {p.stem: (p, True) for p in sorted((ROOT / "configs").glob("*.yaml"))
           if not p.stem.endswith("_model") and "model:" in p.read_text()}
    for name, text in LINALG.items():
        path = Path(folder) / f"{name}.yaml"
        path.write_text(text)
        out[name] = (path, False)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="fresh-process compiles per case (median)")
    parser.add_argument("--only", nargs="*", help="case names (config stems, det16, inv16)")
    args = parser.parse_args(argv)
    print_command()
    with tempfile.TemporaryDirectory() as folder:
        todo = {n: c for n, c in cases(folder).items() if not args.only or n in args.only}
        cold, cached = {n: [] for n in todo}, {n: [] for n in todo}
        for _ in range(args.rounds):
            for name, (path, is_config) in todo.items():
                a, b = compile_seconds(path, is_config)
                cold[name].append(a)
                cached[name].append(b)
    print(f"\n| case | cold (s), median of {args.rounds} | cold min-max | cached (s) | target |")
    print("|---|---:|---:|---:|---|")
    for name in todo:
        target = TARGET_LINALG if name in LINALG else TARGET
        med = statistics.median(cold[name])
        print(f"| {name} | {med:.2f} | {min(cold[name]):.2f}-{max(cold[name]):.2f} | "
              f"{statistics.median(cached[name]):.2f} | < {target:g} s: {'met' if med < target else 'missed'} |")


if __name__ == "__main__":
    sys.exit(main())
