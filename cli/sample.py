"""`adgrad sample MODEL_OR_CONFIG -n M -o FILE`: a synthetic point cloud for the model's inputs."""
import click

from adgrad.engine.limits import MAX_CHUNK


from .common import is_config, reports_errors


@click.command()
@click.argument("model_or_config", type=click.Path(dir_okay=False))
@click.option("-n", "--points", "n", type=click.IntRange(min=1), required=True, help="Number of points M (at least 1).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="HDF5 file to write.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of numpy's SeedSequence.")
@click.option("--low", type=float, default=None,
              help="Lower end of every input's range (default: the model's sample: block, else 0).")
@click.option("--high", type=float, default=None,
              help="Upper end of every input's range (default: the model's sample: block, else 1).")
@click.option("--chunk", type=click.IntRange(1, MAX_CHUNK), default=65536, show_default=True,
              help="Points per write; memory is bounded by it, the values do not depend on it.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@reports_errors
def sample(model_or_config, n, output, seed, low, high, chunk, overwrite):
    """Write M points, uniform in each input's range, one dataset per input (M, *shape).

    With a config, dataset names follow its input.datasets, and the directions and cotangents of
    its jvp/vjp requests are written too, so `adgrad run` can read the file as its input. The values
    depend only on the seed and the ranges (not on --chunk; a smaller M is a prefix of a larger one).

    \b
    Example:
      adgrad sample configs/eam.yaml -n 1000000 -o points.h5 --seed 7
    """
    from adgrad.engine.model import build
    from adgrad.engine.spec import load_config_file, load_model_file
    from adgrad.engine.tools import sample as sampling
    config = load_config_file(model_or_config) if is_config(model_or_config) else None
    model = config.model if config else load_model_file(model_or_config)
    build(model)        # the whole model is checked (names, shapes) before a file is written for it
    cols = sampling.columns(model, config, low, high)
    sampling.write(output, cols, n, seed=seed, chunk=chunk, overwrite=overwrite, model=model, config=config)
    ranges = ", ".join(f"{c.dataset} {(n,) + c.shape} in [{c.low:g}, {c.high:g})" for c in cols)
    click.echo(f"{n} points -> {output}: {ranges}", err=True)
