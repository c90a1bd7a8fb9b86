"""adgrad's KIM portable models (adgrad export --kim) in Debian's LAMMPS against LAMMPS's own pair styles.

For Cu_u3.eam (pair_style eam), Si.sw (sw) and Si.tersoff (tersoff) from Debian's lammps-data: the
model exported with neighbour slots N near the crystal's count, then the same NVE run (a ~4,000-atom
crystal from 600 K, --steps steps) under `pair_style kim` and under LAMMPS's own style, on 1 and 2 MPI
ranks, runs interleaved round-robin, --repeats times. LAMMPS's own timing breakdown (`timer full`)
gives the Pair time and its CPU share (averages over ranks); reported: ns of Pair time per atom-step
(wall: a 2-rank run's atoms are shared by both), the ratio KIM / own on the same ranks (targets: EAM
<= 1.3, SW and Tersoff <= 1.5), and the strong scaling 1 -> 2 ranks of each (time on 1 / time on 2)
with its ratio KIM / own (target >= 1), from the wall time and from the CPU time: on a machine busy
with other jobs a 2-rank run's ranks wait for a core and its wall time says more about the load than
about the code, while the CPU time counts the rank's own work only. Times are medians of the repeats;
a ratio KIM / own is the median of each repeat's ratio of its two runs, made one after the other (in
alternating order) so that they share the machine's load, with the lowest and highest; the load
average before and after. A PNG bar chart with --plot.

    python benchmarks/kim_lammps.py                          # 200 steps, 3 repeats
    python benchmarks/kim_lammps.py --steps 100 --repeats 5 --plot /tmp/lammps.png

Needs /usr/bin/lmp (Debian's lammps, built with KIM), /usr/bin/mpirun (openmpi-bin), libkim-api-dev
and lammps-data (.ci/kim.sh installs them).
"""
import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POTENTIALS = Path("/usr/share/lammps/potentials")
LMP, MPIRUN = "/usr/bin/lmp", "/usr/bin/mpirun"

sys.path.insert(0, str(ROOT / "tests"))
import lammps_oracle as lo  # noqa: E402  (the model texts; as potentials.py, nothing of benchmarks/ is named lammps)

# case: (model (None: configs/cu_eam_model.yaml), pair style, potential file, species, mass, lattice, a, cells,
# slots N, target ratio)
CASES = {
    "eam": (None, "eam", "Cu_u3.eam", "Cu", 63.55, "fcc", 3.615, 10, 44, 1.3),     # 42 neighbours within the cutoff
    "sw": ("si_sw_model.yaml", "sw", "Si.sw", "Si", 28.0855, "diamond", 5.431, 8, 4, 1.5),     # 4 (2N, 4N: more)
    "tersoff": ("si_tersoff_model.yaml", "tersoff", "Si.tersoff", "Si", 28.0855, "diamond", 5.431, 8, 4, 1.5),
}


def model_file(tmp, case):
    model, _, pot, *_, n, _ = CASES[case]
    if model is None:
        text = lo.eam_model(POTENTIALS / pot, n=n, name="bench_eam")
    else:
        text = lo.model_text(ROOT / "configs" / model, POTENTIALS / pot, n=n)
    path = tmp / f"{case}.yaml"
    path.write_text(text)
    return path


def export(tmp, case, cpu):
    out = tmp / f"export_{case}"
    argv = [str(Path(sys.executable).with_name("adgrad")), "export", str(model_file(tmp, case)), "--kim",
            f"bench_{case}", "-o", str(out), "--cpu", cpu, "-q", "--overwrite"]
    if case == "eam":
        argv += ["--species", "Cu"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"adgrad export failed: {done.stdout}{done.stderr}")
    return out


def run(tmp, case, style, ranks, steps, models):
    """(Pair seconds, Pair CPU seconds, the run's atoms) from LAMMPS's timing breakdown of one NVE run
    (averages over the ranks)."""
    _, own, pot, species, mass, lattice, a, cells, *_ = CASES[case]
    pair = (f"pair_style kim bench_{case}\npair_coeff * * {species}" if style == "kim" else
            f"pair_style {own}\npair_coeff * * {POTENTIALS / pot}" + ("" if own == "eam" else f" {species}"))
    d = tmp / f"{case}_{style}_{ranks}"
    d.mkdir(exist_ok=True)
    (d / "in.lmp").write_text(textwrap.dedent(f"""\
        units metal
        atom_style atomic
        boundary p p p
        lattice {lattice} {a}
        region box block 0 {cells} 0 {cells} 0 {cells}
        create_box 1 box
        create_atoms 1 box
        mass 1 {mass}
        """) + pair + textwrap.dedent(f"""
        velocity all create 600.0 4928459 loop geom
        fix nve all nve
        timestep 0.001
        thermo {steps}
        timer full
        run {steps}
        """))
    argv = [LMP, "-in", "in.lmp", "-log", "log.lammps", "-screen", "none", "-nocite"]
    if ranks > 1:
        argv = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + argv
    env = {**os.environ, "KIM_API_PORTABLE_MODELS_DIR": str(models), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, cwd=d, env=env, capture_output=True, text=True)
    log = (d / "log.lammps").read_text() if (d / "log.lammps").exists() else ""
    if done.returncode != 0:
        sys.exit(f"LAMMPS failed in {d}:\n{log[-2000:]}{done.stderr[-2000:]}")
    # Section | min time | avg time | max time | %varavg | %CPU | %total
    pair = next(line for line in log.splitlines() if line.startswith("Pair ")).split("|")
    atoms = next(line for line in log.splitlines() if line.startswith("Loop time of"))
    return float(pair[2]), float(pair[2]) * float(pair[5]) / 100, int(atoms.split()[-2])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--cpu", default="x86-64", help="adgrad export --cpu (default: any x86-64)")
    parser.add_argument("--plot", default=None, help="write a PNG bar chart here")
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    print("command: " + shlex.join([sys.executable] + sys.argv))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        models = {case: export(tmp, case, args.cpu) for case in cases}
        times, cpus = {}, {}     # ns per atom-step: Pair wall time, Pair CPU time
        for rep in range(args.repeats):         # round-robin: the machine's load falls on every variant alike
            for case in cases:
                for ranks in (1, 2):
                    for style in ("kim", "own")[::1 if rep % 2 == 0 else -1]:
                        sec, cpu, n = run(tmp, case, style, ranks, args.steps, models[case])
                        times.setdefault((case, style, ranks), []).append(sec / (n * args.steps) * 1e9)
                        cpus.setdefault((case, style, ranks), []).append(cpu / (n * args.steps) * 1e9)
    med = {k: statistics.median(v) for k, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in cpus.items()}
    print(f"load after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print(f"Pair time per atom-step (ns, wall; median of {args.repeats}), {args.steps} NVE steps from 600 K; KIM/own: "
          f"the median of the repeats' ratios (lowest-highest)")
    print(f"{'model':8} {'ranks':>5} {'KIM':>8} {'own':>8} {'KIM/own':>8} {'range':>11} {'target':>7}")
    for case in cases:
        for ranks in (1, 2):
            k, o = med[case, "kim", ranks], med[case, "own", ranks]
            ratios = [a / b for a, b in zip(times[case, "kim", ranks], times[case, "own", ranks])]
            print(f"{case:8} {ranks:5d} {k:8.1f} {o:8.1f} {statistics.median(ratios):8.2f} "
                  f"{min(ratios):5.2f}-{max(ratios):<5.2f} {'<= ' + str(CASES[case][-1]):>7}")
    print("Pair CPU time per atom-step (ns; a rank's CPU time over all the run's atoms, as the wall time above)")
    for case in cases:
        print(f"{case:8} " + "  ".join(f"{r} rank{'s' if r > 1 else ' '}: KIM {cmed[case, 'kim', r]:7.1f} own "
                                       f"{cmed[case, 'own', r]:7.1f}" for r in (1, 2)))
    print("strong scaling 1 -> 2 ranks (time on 1 / time on 2), from the wall time and from the CPU time; KIM/own "
          "of the medians, and the lowest-highest of the repeats' own (their four runs made one after the other)")
    for case in cases:
        for what, m, t in (("wall", med, times), ("CPU", cmed, cpus)):
            sk = m[case, "kim", 1] / m[case, "kim", 2]
            so = m[case, "own", 1] / m[case, "own", 2]
            each = [k1 / k2 / (o1 / o2) for k1, k2, o1, o2 in zip(*(t[case, s, r] for s in ("kim", "own")
                                                                     for r in (1, 2)))]
            print(f"{case:8} {what:4} KIM {sk:5.2f}  own {so:5.2f}  KIM/own {sk / so:5.2f} "
                  f"({min(each):.2f}-{max(each):.2f}; target >= 1)")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 3.5))
        labels = [f"{c}\n{r} rank{'s' if r > 1 else ''}" for c in cases for r in (1, 2)]
        xs = range(len(labels))
        ax.bar([x - 0.2 for x in xs], [med[c, "kim", r] for c in cases for r in (1, 2)], 0.4, label="adgrad (KIM)")
        ax.bar([x + 0.2 for x in xs], [med[c, "own", r] for c in cases for r in (1, 2)], 0.4, label="LAMMPS's own")
        ax.set_xticks(list(xs), labels)
        ax.set_ylabel("Pair ns per atom-step (wall)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
