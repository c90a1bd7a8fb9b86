"""The `adgrad` command group: one module per command, this file only wires them together."""
import click

from adgrad.engine.version import __version__

from .bench import bench
from .check import check
from .explain import explain
from .export import export
from .info import info
from .merge import merge
from .run import run
from .sample import sample


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="adgrad")
def cli():
    """adgrad: outputs and derivatives of YAML models at every point of an HDF5 point cloud."""


cli.add_command(run)
cli.add_command(check)
cli.add_command(explain)
cli.add_command(sample)
cli.add_command(merge)
cli.add_command(info)
cli.add_command(bench)
cli.add_command(export)
