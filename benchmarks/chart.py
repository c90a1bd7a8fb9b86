"""Bar chart of ns/point per implementation (hand, adgrad, JAX, floor) per model and kernel.

Reads the JSON files that eam.py, neohookean.py, formulations.py and gaussian.py write with
--json PATH, and draws one grouped bar chart (log scale: the kernels span 3 ns to 10 us per point):

    python benchmarks/eam.py --json /tmp/eam.json          # and the same for the other three
    python benchmarks/chart.py /tmp/eam.json /tmp/nh.json /tmp/f.json /tmp/g.json   # -> benchmarks/chart.png

Needs matplotlib (pip install -e ".[bench]").
"""
import argparse
import json
from pathlib import Path

ORDER = ["hand", "adgrad", "adgrad (slices)", "JAX", "JAX jvp", "floor"]
COLORS = {"hand": "#4c72b0", "adgrad": "#dd8452", "adgrad (slices)": "#f2b279", "JAX": "#55a868",
          "JAX jvp": "#9fd39f", "floor": "#8c8c8c"}
LABELS = {"hand": "hand-written (numba)", "adgrad": "adgrad", "adgrad (slices)": "adgrad, slices formulation",
          "JAX": "JAX jit(vmap(...))", "JAX jvp": "JAX jvp", "floor": "memory floor"}


def load(paths):
    """Rows of every file, in file order, and the files' time and load average for the caption."""
    rows, notes = [], []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        rows += doc["rows"]
        notes.append(f"{doc['script']} {doc['time']} (load {doc['load_average'][0]:.1f})")
    return rows, notes


def draw(rows, notes, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r["model"], r["kernel"]) for r in rows))
    impls = [i for i in ORDER if any(r["impl"] == i for r in rows)]
    impls += sorted({r["impl"] for r in rows} - set(impls))
    value = {(r["model"], r["kernel"], r["impl"]): r["ns_per_point"] for r in rows}
    width = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.3 * len(groups)), 5.5))
    for j, impl in enumerate(impls):
        xs = [g for g in range(len(groups)) if (*groups[g], impl) in value]
        ys = [value[(*groups[g], impl)] for g in xs]
        pos = [g - 0.4 + (j + 0.5) * width for g in xs]
        ax.bar(pos, ys, width, label=LABELS.get(impl, impl), color=COLORS.get(impl))
        for x, y in zip(pos, ys):
            ax.text(x, y * 1.05, f"{y:.0f}" if y >= 10 else f"{y:.1f}", ha="center", va="bottom",
                    fontsize=6, rotation=90)
    ax.set_yscale("log")
    ax.set_ylabel("ns per point (median; lower is faster)")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{m}\n{k}" for m, k in groups], fontsize=8)
    ax.set_ylim(top=ax.get_ylim()[1] * 3)
    ax.legend(fontsize=8, ncol=3, loc="upper left")
    ax.set_title("adgrad, hand-written numba and JAX, same process, interleaved rounds (2 threads)", fontsize=10)
    fig.text(0.01, 0.005, "; ".join(notes), fontsize=6, color="#555555")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", nargs="+", help="files written by the benchmark scripts' --json")
    p.add_argument("-o", "--output", default=str(Path(__file__).resolve().parent / "chart.png"),
                   help="the PNG to write (default benchmarks/chart.png)")
    args = p.parse_args(argv)
    rows, notes = load(args.json)
    draw(rows, notes, args.output)


if __name__ == "__main__":
    main()
