"""A CalculiX job with adgrad's exported J2 as a UMAT against CalculiX's own J2 (*ELASTIC + *PLASTIC).

The same job three times: a block of size^3 C3D8 elements, clamped at its base, pulled at its top
into plasticity and partly back (CalculiX's automatic increments, at most 2/--increments), with the
material CalculiX's built-in linear-hardening J2, the UMAT of configs/models/
linear_elastic_plastic_isotropic_hardening.yaml (the same law: `adgrad export --umat`) and the UMAT of
configs/models/j2_voce.yaml (Voce hardening, a local Newton solve per point). Total wall time of
ccx, medians of --repeats runs after a warm-up, runs interleaved round-robin (benchmarks/_harness.py);
the ratio UMAT / built-in (target: <= 1.2 for the same law). Before timing, the UMAT's reaction
forces are checked against the built-in's and its increments and Newton iterations must be the same.

Needs a ccx built with external behaviours (.ci/calculix.sh caches one; or --ccx PATH).

    python benchmarks/calculix.py                       # 12^3 elements, one thread
    python benchmarks/calculix.py --size 20 --threads 2 --repeats 7
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import cpu_model, print_command, time_calls  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from calculix_jobs import environment, find_ccx, mesh, user_material  # noqa: E402  (shared with tests/test_umat.py)

ROOT = Path(__file__).resolve().parents[1]
STEEL = (210000.0, 0.3, 250.0, 20000.0)                       # E, nu, sy, K
VOCE = STEEL + (150.0, 300.0)                                 # ... q, b


def deck(n, material, section, increments):
    """Pull TOP to 1% of the height and back to 0.25%, in increments of 2/increments of the step time
    at first (CalculiX's automatic incrementation, which cuts an increment whose Newton iterations
    diverge: fixed ones at the reversal did, for the built-in too); print TOP's force."""
    lines = [mesh(n, n, n), material, f"*SOLID SECTION, ELSET=EALL, MATERIAL={section}", "*AMPLITUDE, NAME=PATH",
             "0., 0., 1., 1., 2., 0.25", "*BOUNDARY", "BOTTOM, 1, 3", "*STEP, INC=1000", "*STATIC",
             f"{2 / increments}, 2., 1e-5, {2 / increments}", "*BOUNDARY, AMPLITUDE=PATH", f"TOP, 3, 3, {0.01 * n}",
             "*NODE PRINT, NSET=TOP, TOTALS=ONLY", "RF", "*END STEP"]
    return "\n".join(lines) + "\n"


class Job:
    def __init__(self, ccx, directory, text, libs, threads):
        self.ccx, self.dir, self.libs, self.threads = ccx, directory, libs, threads
        directory.mkdir(parents=True)
        (directory / "job.inp").write_text(text)

    def __call__(self):
        done = subprocess.run([self.ccx, "-i", "job"], cwd=self.dir, env=environment(self.libs, self.threads),
                              capture_output=True, text=True)
        if done.returncode != 0 or "*ERROR" in done.stdout:
            sys.exit(f"ccx failed in {self.dir}:\n{done.stdout[-2000:]}")

    def iterations(self):
        sta = (self.dir / "job.sta").read_text().splitlines()
        return [int(line.split()[3]) for line in sta if re.match(r"\s+\d+\s+\d+\s+\d+\s+\d+\s", line)]

    def forces(self):
        """TOP's total reaction force (z) at each increment: the line after each "total force" header."""
        lines = [x for x in (self.dir / "job.dat").read_text().splitlines() if x.strip()]
        return [float(lines[k + 1].split()[2]) for k, x in enumerate(lines) if x.strip().startswith("total force")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=12, help="elements per edge of the block (default 12)")
    parser.add_argument("--increments", type=int, default=8, help="at least this many increments (default 8)")
    parser.add_argument("--threads", type=int, default=1, help="CalculiX's threads (default 1)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per job (median; default 5)")
    parser.add_argument("--ccx", help="ccx with external behaviours (default: .ci/calculix.sh's cache)")
    args = parser.parse_args(argv)
    ccx, why = find_ccx(args.ccx)
    if ccx is None:
        sys.exit(f"{why}; or pass --ccx")
    print_command()
    from adgrad.cli.common import load_model_or_config
    from adgrad.engine.export.build import export_model
    with tempfile.TemporaryDirectory(prefix="adgrad-calculix-") as tmp:
        tmp = Path(tmp)
        libs = {}
        for name, model in (("LINJ2", "linear_elastic_plastic_isotropic_hardening"), ("J2VOCE", "j2_voce")):
            m, c = load_model_or_config(str(ROOT / "configs/models" / f"{model}.yaml"))
            libs[name] = export_model(m, c, tmp / name, umat=True, name=name).directory
        builtin = (f"*MATERIAL, NAME=STEEL\n*ELASTIC\n{STEEL[0]}, {STEEL[1]}\n*PLASTIC\n{STEEL[2]}, 0.\n"
                   f"{STEEL[2] + STEEL[3] * 10.0}, 10.", "STEEL")
        jobs = {"built-in *ELASTIC + *PLASTIC": Job(ccx, tmp / "builtin", deck(args.size, *builtin, args.increments),
                                                    [], args.threads),
                "UMAT linear hardening": Job(ccx, tmp / "lin", deck(args.size, user_material(
                    "@ABAQUS_LINJ2_UMAT", STEEL, 10), "@ABAQUS_LINJ2_UMAT", args.increments), [libs["LINJ2"]],
                    args.threads),
                "UMAT j2_voce": Job(ccx, tmp / "voce", deck(args.size, user_material(
                    "@ABAQUS_J2VOCE_UMAT", VOCE, 10), "@ABAQUS_J2VOCE_UMAT", args.increments), [libs["J2VOCE"]],
                    args.threads)}
        timed = time_calls({name: (job, None) for name, job in jobs.items()}, (), args.repeats)
        base, lin = jobs["built-in *ELASTIC + *PLASTIC"], jobs["UMAT linear hardening"]
        if lin.iterations() != base.iterations():
            sys.exit(f"the UMAT took {lin.iterations()} iterations, the built-in {base.iterations()}")
        worst = max(abs(a - b) / max(abs(b), 1e-300) for a, b in zip(lin.forces(), base.forces()))
        if not worst < 1e-6:
            sys.exit(f"the UMAT's reaction forces differ from the built-in's by {worst:.2e} (relative)")
        print(f"CalculiX {ccx}; CPU {cpu_model()}, {os.cpu_count()} cores; {args.threads} thread(s)")
        print(f"{args.size ** 3:,} C3D8 elements ({8 * args.size ** 3:,} integration points), {len(base.iterations())} "
              f"increments; UMAT's reaction forces equal the built-in's to {worst:.1e}")
        print(f"{'job':<30} {'iterations':>10} {'warm-up s':>10} {'median s':>9} {'spread':>7} {'/ built-in':>10}")
        ref = timed["built-in *ELASTIC + *PLASTIC"][1]
        for name, (warm, med, spread) in timed.items():
            print(f"{name:<30} {sum(jobs[name].iterations()):>10} {warm:>10.2f} {med:>9.2f} {spread:>7.1%} "
                  f"{med / ref:>10.2f}")
        print("spread = (max - min) / median of the timed runs; iterations: Newton's, over all increments")


if __name__ == "__main__":
    main()
