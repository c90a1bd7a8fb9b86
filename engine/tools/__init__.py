"""The engines of the other commands: check, explain, sample, bench, merge, info (one module each)."""
