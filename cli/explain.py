"""`adgrad explain MODEL_OR_CONFIG`: shapes, mode per derivative and why, workspace, IR, source."""
import click

from adgrad.engine import compile_model
from adgrad.engine.check import requested
from adgrad.engine.ir.printer import format_graph, shape_str

from .common import load_model_or_config, reports_errors

PARTS = ("shapes", "cost", "ir", "source")


@click.command()
@click.argument("model_or_config", type=click.Path(dir_okay=False))
@click.option("--show", default=",".join(PARTS), show_default=True,
              help=f"Comma-separated parts to show: {', '.join(PARTS)}.")
@click.option("--mode", type=click.Choice(["auto", "forward", "reverse", "manual"]), default=None,
              help="Override the mode (default: the config's, else auto).")
@reports_errors
def explain(model_or_config, show, mode):
    """Show how adgrad compiles a model: shapes, modes and why, workspace, IR and kernel source."""
    parts = {p.strip() for p in show.split(",") if p.strip()}
    unknown = parts - set(PARTS)
    if unknown:
        raise click.BadParameter(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}",
                                 param_hint="--show")
    model, config = load_model_or_config(model_or_config)
    derivs = config.derivatives if config else [(o, w) for o, (w,) in requested(model)]
    mode = mode or (config.mode if config else "auto")
    values = list(config.values) if config else None
    kernel = compile_model(model, derivs, mode=mode, values=values)
    g = model.graph
    if "shapes" in parts:
        click.echo(f"model {model.name}: {model.spec.path}")
        for n, v in g.inputs.items():
            click.echo(f"  input  {n}: {shape_str(v)}")
        for n, v in g.params.items():
            click.echo(f"  param  {n}: {shape_str(v)}")
        for n, v in g.outputs.items():
            click.echo(f"  output {n}: {shape_str(v)}")
    if "cost" in parts:
        click.echo("derivatives:")
        for d in kernel.derivatives:
            c = d.choice
            click.echo(f"  {d.name}: {d.mode} ({c.reason}; estimated work forward {c.forward_cost}, "
                       f"reverse {c.reverse_cost})")
        click.echo(f"workspace: {kernel.workspace_size} floats per thread")
        click.echo("kernel: " + ("straight-line scalar code (small tensors scalarized)" if kernel.scalarized
                                 else "loop nests over the tensor axes"))
    if "ir" in parts:
        click.echo("\n# IR (values and derivatives, after optimization)")
        click.echo(format_graph(kernel.graph))
    if "source" in parts:
        click.echo("\n# generated kernel")
        click.echo(kernel.source)
