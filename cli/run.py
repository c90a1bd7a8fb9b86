"""`adgrad run CONFIG`: the main job."""
import shlex
import sys
import time

import click

from adgrad.engine.limits import MAX_CHUNK


from .common import compile_log, reports_errors


def run_job(*args, **kwargs):
    # engine.api.run is this function; engine.job.run imports the compile cache's hook (codegen/load.py)
    # before any numeric helper, which engine.api's imports do not (engine/codegen/load.py)
    from adgrad.engine.job.run import run
    return run(*args, **kwargs)


class Size(click.ParamType):
    """A size in bytes: 4GiB, 512 MiB, 1.5 GB or a number of bytes."""
    name = "size"

    def convert(self, value, param, ctx):
        from adgrad.engine.spec import parse_bytes
        try:
            return parse_bytes(int(value) if str(value).isdigit() else value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--threads", type=click.IntRange(min=0), default=None,
              help="Threads (default: engine.threads, 0 = all cores).")
@click.option("--chunk", type=click.IntRange(1, MAX_CHUNK), default=None,
              help="Points per chunk (default: engine.chunk, or as many as fit the memory budget).")
@click.option("--memory", type=Size(), metavar="SIZE", default=None,
              help="Memory budget of the chunk buffers, e.g. 4GiB (default: engine.memory, 2GiB); without "
                   "--chunk or engine.chunk a chunk is as many points as fit.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Output file (default: output.path).")
@click.option("--shard", metavar="I/N", default=None,
              help="Compute shard I of N (rows [I*M//N, (I+1)*M//N)) into OUTPUT with .shardIofN before the "
                   "extension (default: from SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT in a job array).")
@click.option("--resume", is_flag=True,
              help="Finish an interrupted output file without recomputing its finished chunks.")
@click.option("--trust-input", is_flag=True,
              help="With --resume: skip reading the finished chunks' input rows again to check their checksums.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@click.option("--native", metavar="DIR", type=click.Path(file_okay=False), default=None,
              help="Compute with the library `adgrad export CONFIG -o DIR` made (no compile, no numba kernel: a fast "
                   "start; the same results). The first run with it checks that it is this config's kernel.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on when stderr is a terminal).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors (no compile messages, no summary).")
@click.option("-v", "--verbose", is_flag=True, help="Also print timings per phase.")
@reports_errors
def run(config, threads, chunk, memory, output, shard, resume, trust_input, overwrite, native, progress, quiet,
        verbose):
    """Compute the config's outputs and derivatives for every point of its input file.

    Streams the input in chunks through the compiled (cached) kernel into the output file, then
    prints points, seconds and points/s of the run without the compile, the mode per derivative, the
    non-finite point count and the compile time. A kernel not in the compile cache says so on stderr
    before it is compiled (first use of a model and its derivatives) and how long it took.
    SIGTERM or Ctrl-C stops at the next chunk boundary, keeping every finished chunk (exit 1, with
    the command that resumes); --resume then finishes the file, once the input rows of its finished
    chunks match the checksums it recorded (--trust-input skips that read). Outputs are
    bit-identical for every --threads and --chunk. --native DIR computes with the config's exported
    library instead of numba, to the same results, and starts in a fraction of the time (the first run
    with a library compiles the config's kernel once to check it; docs/native.md). See
    docs/production.md and docs/cluster.md.

    \b
    Example:
      adgrad run configs/eam.yaml -o eam_out.h5 --overwrite
      adgrad run configs/eam.yaml -o eam_out.h5 --resume       # after a stop
      adgrad run configs/eam.yaml -o out/eam.h5 --shard 2/4    # writes out/eam.shard2of4.h5
      adgrad export configs/eam.yaml -o build/eam && adgrad run configs/eam.yaml --native build/eam
    """
    from adgrad.engine.spec import load_config_file
    cfg = load_config_file(config)
    library = None
    if native is not None:
        from adgrad.engine.export.native import load_library
        library = load_library(native)
    if progress is None:
        progress = sys.stderr.isatty()
    bar = ProgressBar() if progress and not quiet else None
    hint = ["adgrad", "run", config, "--resume"] + (["-o", output] if output else []) + \
        (["--shard", shard] if shard else []) + (["--native", native] if native else [])
    try:
        summary = run_job(cfg, output=output, threads=threads, chunk=chunk, memory=memory, overwrite=overwrite,
                          resume=resume, trust_input=trust_input, shard=shard, progress=bar,
                          resume_hint=shlex.join(hint), log=compile_log(quiet), native=library)
    finally:
        if bar is not None:
            bar.close()
    if quiet:
        return
    modes = ", ".join(f"{k}: {v}" for k, v in summary.modes.items()) or "none"
    resumed = f" (resumed: {summary.points - summary.computed} were done)" if summary.computed < summary.points else ""
    cached = "" if summary.compiled else " (cached)"
    click.echo(f"{summary.points} points{resumed} in {summary.run_seconds:.2f} s ({summary.rate:,.0f} points/s) "
               f"-> {summary.output}", err=True)
    code = f"native library {summary.native}" if summary.native else f"compile: {summary.compile_seconds:.2f} s{cached}"
    click.echo(f"modes: {modes}; non-finite points: {summary.nan_points}; threads: {summary.threads}; {code}",
               err=True)
    if verbose:
        t = summary.timings
        overlap = (t["read"] + t["compute"] + t["write"]) / max(summary.run_seconds, 1e-9)
        click.echo("timings: " + ", ".join(f"{k} {v:.3f} s" for k, v in t.items())
                   + f"; overlap {overlap:.2f}x (read + compute + write over wall time after compile)", err=True)


class ProgressBar:
    """click's progress bar on stderr, made on the first report: points done, points/s and ETA."""

    def __init__(self):
        self.bar, self.t0, self.first = None, time.perf_counter(), 0

    def __call__(self, done, total):
        if self.bar is None:            # the first report says how many points were done before
            self.t0, self.first = time.perf_counter(), done
            self.bar = click.progressbar(length=total, label="points", file=sys.stderr, show_eta=True,
                                         show_pos=True, item_show_func=lambda rate: rate)
            self.bar.__enter__()
        rate = (done - self.first) / max(time.perf_counter() - self.t0, 1e-9)
        self.bar.update(done - self.bar.pos, f"{rate:,.0f} points/s")

    def close(self):
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
