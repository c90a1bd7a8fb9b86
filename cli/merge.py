"""`adgrad merge OUT SHARD...`: join the shard files of one run into one output file."""
import click

from .common import reports_errors


@click.command()
@click.argument("out", type=click.Path(dir_okay=False))
@click.argument("shards", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--copy", is_flag=True, help="Write a physical file instead of virtual datasets.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@reports_errors
def merge(out, shards, copy, overwrite):
    """Join shard outputs (adgrad run --shard I/N) into OUT, equal to a run without shards.

    By default OUT holds HDF5 virtual datasets that read the shard files through paths relative to
    OUT's directory: keep the shards, and move them together with OUT. Refuses missing, incomplete,
    duplicate or mismatched shards, and leaves no OUT behind when it does.

    \b
    Example:
      adgrad merge out/eam.h5 out/eam.shard*of4.h5
    """
    from adgrad.engine.tools.merge import merge as merge_shards
    res = merge_shards(out, shards, copy=copy, overwrite=overwrite)
    kind = "virtual datasets over the shard files" if res.virtual else "a physical copy"
    click.echo(f"{res.shards} shard(s), {res.points} points, {res.datasets} dataset(s) -> {res.path} ({kind})",
               err=True)
