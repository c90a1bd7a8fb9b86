"""`adgrad bench CONFIG`: compute-only timings per kernel variant and mode, and compile times."""
import click

from adgrad.engine.limits import MAX_CHUNK

from .common import compile_log, load_model_or_config, quiet_option, reports_errors


@click.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--points", "m", type=click.IntRange(1, MAX_CHUNK), default=100_000, show_default=True,
              help="Sampled points per timed call (from the model's sample: ranges, else [0, 1)), held in memory.")
@click.option("--repeat", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed calls per kernel after one warm-up call; the median is reported.")
@click.option("--threads", type=click.IntRange(min=0), default=None,
              help="Threads (default: engine.threads, 0 = all cores).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sampled points.")
@click.option("--compile-time/--no-compile-time", default=True, show_default=True,
              help="Also time compilation, cold and cached, in fresh processes.")
@quiet_option
@reports_errors
def bench(config, m, repeat, threads, seed, compile_time, quiet):
    """Time the kernels of CONFIG (or of a model file: every output against every input) on M
    sampled points, compute only (no HDF5): values only, then values and derivatives by the
    config's modes and by forward, reverse and, where the model has hand-written derivatives,
    manual mode. Prints ns/point and points/s (the median of --repeat calls after a warm-up, the
    variants taking turns), and compile time in fresh processes, cold (empty caches) and cached.

    \b
    Example:
      adgrad bench configs/eam.yaml --points 1000000 --threads 2
    """
    model, cfg = load_model_or_config(config)
    from adgrad.engine.tools.bench import bench as run_bench, format_table
    report = run_bench(config, model, cfg, points=m, repeat=repeat, threads=threads or None, seed=seed,
                       compile_time=compile_time, log=compile_log(quiet))
    click.echo(f"model {report.model}: {report.points} sampled points, {report.threads} thread(s), "
               f"median of {report.repeat}, compute only, math: {report.math}")
    click.echo(format_table(report.timings, report.compile_times))
