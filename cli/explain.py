"""`adgrad explain MODEL_OR_CONFIG`: shapes, mode per derivative and why, workspace, IR, source."""
import click

from adgrad.engine.tools.explain import PARTS

from .common import compile_log, load_model_or_config, quiet_option, reports_errors


@click.command()
@click.argument("model_or_config", type=click.Path(dir_okay=False))
@click.option("--show", default=",".join(PARTS), show_default=True,
              help=f"Comma-separated parts to show: {', '.join(PARTS)}.")
@click.option("--mode", type=click.Choice(["auto", "forward", "reverse", "manual"]), default=None,
              help="Override the mode (default: the config's, else auto).")
@quiet_option
@reports_errors
def explain(model_or_config, show, mode, quiet):
    """Show how adgrad compiles a model: shapes, modes and why, workspace, IR and kernel source.

    \b
    Example:
      adgrad explain configs/eam.yaml
      adgrad explain configs/eam.yaml --show cost --mode forward
    """
    parts = {p.strip() for p in show.split(",") if p.strip()}
    unknown = parts - set(PARTS)
    if unknown:
        raise click.BadParameter(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}",
                                 param_hint="--show")
    model, config = load_model_or_config(model_or_config)
    from adgrad.engine.tools.explain import explain as describe
    click.echo(describe(model, config, parts, mode, log=compile_log(quiet)))
