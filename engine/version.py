"""adgrad's version: the installed distribution's (pyproject.toml is the one place it is written)."""
from importlib.metadata import version

__version__ = version("adgrad")
