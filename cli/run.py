"""`adgrad run CONFIG`: the main job."""
import sys

import click

from adgrad.engine.runtime.job import run as run_job
from adgrad.engine.spec import load_config_file

from .common import reports_errors


@click.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--threads", type=click.IntRange(min=0), default=None, help="Threads (default: engine.threads, 0 = all cores).")
@click.option("--chunk", type=click.IntRange(min=1), default=None, help="Points per chunk (default: engine.chunk).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Output file (default: output.path).")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on when stderr is a terminal).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("-v", "--verbose", is_flag=True, help="Also print timings per phase.")
@reports_errors
def run(config, threads, chunk, output, overwrite, progress, quiet, verbose):
    """Compute the config's outputs and derivatives for every point of its input file."""
    cfg = load_config_file(config)
    if progress is None:
        progress = sys.stderr.isatty() and not quiet
    bar = None
    if progress:
        bar = click.progressbar(length=1, label="points", file=sys.stderr, show_eta=True)

    def on_chunk(done, total):
        if bar is not None:
            bar.length = total
            bar.update(done - bar.pos)
    summary = run_job(cfg, output=output, threads=threads or None, chunk=chunk, overwrite=overwrite,
                      progress=on_chunk)
    if bar is not None:
        bar.render_finish()
    if quiet:
        return
    modes = ", ".join(f"{k}: {v}" for k, v in summary.modes.items()) or "none"
    click.echo(f"{summary.points} points in {summary.seconds:.2f} s ({summary.rate:,.0f} points/s) "
               f"-> {summary.output}", err=True)
    click.echo(f"modes: {modes}; non-finite points: {summary.nan_points}; threads: {summary.threads}", err=True)
    if verbose:
        click.echo("timings: " + ", ".join(f"{k} {v:.3f} s" for k, v in summary.timings.items()), err=True)
