"""The documentation holds: every command has --help with an example and a line in the README, the
README's links to docs/ resolve, and the README stays a front door."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_every_command_has_help_with_an_example(command):
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    example = result.output.split("Example:", 1)
    assert len(example) == 2, f"`adgrad {command} --help` shows no example"
    assert re.search(rf"^\s+adgrad {command}\b", example[1], re.M), f"the example does not run `adgrad {command}`"


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_every_command_is_in_the_readme(command):
    assert re.search(rf"^\| `adgrad {command}\b", README, re.M), f"README.md has no line for `adgrad {command}`"


def test_readme_links_resolve_and_it_stays_short():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links and all((ROOT / link).exists() for link in links), links
    assert len(README.splitlines()) <= 150
    for doc in ("model-language", "production", "file-format", "cluster"):
        assert f"docs/{doc}.md" in links


def test_readme_starts_with_the_two_commands_of_a_fresh_machine():
    first = README.split("## ")[0]
    assert "pip install -e . && adgrad run configs/eam.yaml" in first
    assert 'pip install -e ".[test]" && python -m pytest -q' in first
