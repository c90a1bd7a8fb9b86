"""adgrad as an ASE calculator: AdgradCalculator runs a site-energy model file (configs/cu_eam_model.yaml
and the like) on ase.Atoms, for energies, forces, stress and molecular dynamics (docs/ase.md)."""
from .calculator import AdgradCalculator

__all__ = ["AdgradCalculator"]
