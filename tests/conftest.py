"""Shared fixtures: write a model's YAML text to a temporary file and load it."""
from __future__ import annotations

import textwrap

import pytest

from adgrad.engine import load_model


@pytest.fixture(scope="session")
def model_from_text(tmp_path_factory):
    """`model_from_text(yaml_text, name)` -> LoadedModel (the text is dedented and written to a file)."""
    root = tmp_path_factory.mktemp("models")

    def make(text, name="model"):
        path = root / f"{name}.yaml"
        path.write_text(textwrap.dedent(text).lstrip())
        return load_model(path)
    return make
