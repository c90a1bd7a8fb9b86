"""`adgrad check MODEL_OR_CONFIG`: every derivative by every mode, against each other and central FD."""
import sys

import click

from adgrad.engine.errors import DataError
from adgrad.engine.limits import MAX_CHUNK

from .common import compile_log, load_model_or_config, quiet_option, reports_errors


@click.command()
@click.argument("model_or_config", type=click.Path(dir_okay=False))
@click.option("--points", "k", type=click.IntRange(1, MAX_CHUNK), default=32, show_default=True,
              help="Points to check (from the config's input file, else sampled), held in memory.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for sampled points.")
@quiet_option
@reports_errors
def check(model_or_config, k, seed, quiet):
    """Check derivatives: forward, reverse and manual against each other and central differences.

    Every requested derivative (a config's compute.derivatives, or for a model file every output
    against every input) by forward, reverse and, where the model has one, its hand-written
    derivative, against each other (relative tolerance 1e-9) and against central differences (step
    1e-6 max(1, |x|), relative tolerance 1e-5), at K points from the config's input file, else
    sampled as `adgrad sample` would. Prints a table; exit 1 on a mismatch.

    \b
    Example:
      adgrad check configs/eam.yaml
      adgrad check configs/neohookean_model.yaml --points 8 --seed 3
    """
    model, config = load_model_or_config(model_or_config)
    from adgrad.engine.tools import check as oracle
    pairs = oracle.requested(model, config.compute.derivatives if config else None)
    try:
        points = oracle.points(model, config, k, seed)
        rows = oracle.check(model, pairs, points, math=config.engine.math if config else "vector",
                            log=compile_log(quiet))
    except MemoryError:
        raise DataError(f"--points {k}: the points and their differences do not fit in memory; use fewer "
                        f"points") from None
    click.echo(oracle.format_rows(rows))
    bad = [r for r in rows if not r.ok]
    if bad:
        click.echo(f"error: {len(bad)} comparison(s) out of tolerance", err=True)
        sys.exit(1)
    click.echo(f"all {len(rows)} comparisons agree at {next(iter(points.values())).shape[0]} points")
