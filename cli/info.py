"""`adgrad info FILE`: datasets, completeness and provenance of an adgrad HDF5 file."""
import click

from adgrad.engine.errors import DataError

from .common import reports_errors


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--text/--no-text", default=True, show_default=True, help="Print the model and config text.")
@reports_errors
def info(file, text):
    """Summarize an output, shard, merged or sampled FILE: datasets with shapes and dtypes,
    completeness, shard rows, modes, threads, versions, times, input path and the model and config.

    For a merged file every virtual source is checked, for an incomplete output its commit record; a
    missing source or a damaged record exits 2.

    \b
    Example:
      adgrad info configs/eam_out.h5 --no-text
    """
    from adgrad.engine.tools.info import describe
    report = describe(file, text=text)
    click.echo("\n".join(report.lines))
    if report.damaged:
        raise DataError(f"{file}: the commit record of this incomplete output is damaged ({report.damaged})")
    if report.missing_sources:
        gone = "; ".join(f"'{name}' rows [{lo}, {hi}) from {src}" for name, src, (lo, hi) in report.missing_sources)
        raise DataError(f"{file}: virtual source(s) missing, these rows read as fill values: {gone}")
