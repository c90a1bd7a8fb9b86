"""`adgrad export MODEL_OR_CONFIG -o DIR`: the compiled model as a native library and a C header."""
import click

from adgrad.engine.errors import DataError
from adgrad.engine.export import CPUS

from .common import load_model_or_config, reports_errors


@click.command()
@click.argument("model_or_config", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "directory", type=click.Path(), required=True,
              help="Directory to write (made if missing): lib<NAME>.so, <NAME>.h, adgrad-export.json.")
@click.option("--name", default=None, help="Library name and prefix of its C symbols (default: the model's name).")
@click.option("--cpu", type=click.Choice(CPUS), default="x86-64", show_default=True,
              help="CPU to build for: any x86-64, a microarchitecture level (v3: AVX2 and FMA), or this machine's.")
@click.option("--mode", type=click.Choice(["auto", "forward", "reverse", "manual"]), default=None,
              help="Override the mode (default: the config's, else auto).")
@click.option("--umat", is_flag=True,
              help="Add an Abaqus UMAT (for CalculiX and other FE codes) as the model's export: umat: section says.")
@click.option("--kim", "kim_name", metavar="NAME", default=None,
              help="Add a KIM portable model NAME (DIR/NAME/) of the site-energy model, for LAMMPS's pair_style kim.")
@click.option("--species", default=None, metavar="A,B",
              help="--kim: KIM species names in the model's species order (default: its potential files' elements).")
@click.option("--cutoff", type=float, default=None,
              help="--kim: neighbour cutoff in A (default: the model's potential files').")
@click.option("--overwrite", is_flag=True, help="Replace an existing export in the directory.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@reports_errors
def export(model_or_config, directory, name, cpu, mode, umat, kim_name, species, cutoff, overwrite, quiet):
    """Write the compiled model as a shared library with a C ABI and its header.

    The library holds the same compiled kernel `adgrad run` uses (a config's values and derivatives;
    for a model file, every output and its gradient with respect to every input) and needs no Python
    at run time, only libc and libm: results are the same bits as the Python API's. Its C functions
    (a point call, a batch call over n points with strides and threads, params, metadata) are
    described in docs/native.md. Needs a C compiler and linker (cc, or $CC).

    With --umat the library computes what the model's (or the config's) `export: umat:` section
    names, the stress, its tangent and the state, and adds an Abaqus UMAT: CalculiX loads it as the
    material @ABAQUS_<NAME>_UMAT (@ABAQUSNL_ for finite strain) from lib<NAME>.so, NAME in upper
    case (default: the model's name, upper case without '_').

    With --kim NAME a site-energy model (inputs R [N, 3], valid [N], optionally s [] and sn [N]; the
    site energy E) becomes also a KIM portable model, DIR/NAME/libkim-api-portable-model.so: with
    KIM_API_PORTABLE_MODELS_DIR=DIR, LAMMPS runs it as `pair_style kim NAME` (docs/lammps.md).
    Needs the KIM API's development files (libkim-api-dev) and a C++ compiler.

    \b
    Example:
      adgrad export configs/eam.yaml -o build/eam
      adgrad export configs/models/j2_voce.yaml -o build/j2 --name j2 --cpu host --overwrite
      adgrad export configs/models/j2_voce.yaml --umat -o build/j2umat
      adgrad export configs/cu_eam_model.yaml --kim adgrad_cu_eam -o build/kim
    """
    if (species is not None or cutoff is not None) and kim_name is None:    # before the model is loaded
        raise DataError("--species and --cutoff go with --kim")
    model, config = load_model_or_config(model_or_config)
    from adgrad.engine.export.build import export_model
    kim = None if kim_name is None else {
        "name": kim_name, "cutoff": cutoff,
        "species": None if species is None else tuple(s.strip() for s in species.split(","))}
    done = export_model(model, config, directory, mode=mode, umat=umat, kim=kim, name=name, cpu=cpu,
                        overwrite=overwrite)
    if not quiet:
        click.echo(f"model '{model.name}' -> {done.library} and {done.header} (cpu {done.cpu}) in {done.seconds:.1f} s")
        if done.umat:
            u = done.umat
            click.echo(f"UMAT: *MATERIAL, NAME={u['material']}; *DEPVAR {u['nstatv']}; *USER MATERIAL, "
                       f"CONSTANTS={u['nprops']} ({', '.join(p['param'] for p in u['props']) or 'none'}); "
                       f"LD_LIBRARY_PATH={done.directory}")
        if done.kim:
            k = done.kim
            click.echo(f"KIM portable model {k['name']} ({', '.join(k['species'])}; cutoff {k['cutoff']:g} A; "
                       f"neighbour slots {', '.join(map(str, k['slots']))}): KIM_API_PORTABLE_MODELS_DIR="
                       f"{done.directory}, then in LAMMPS: units metal, pair_style kim {k['name']}, "
                       f"pair_coeff * * <species of types 1, 2, ...>")
