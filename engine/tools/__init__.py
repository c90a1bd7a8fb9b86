"""The engines of the other commands: check, explain, sample, bench, merge, info (one module each)."""


def labelled(log, label):
    """compile_model's `log` with `: label` after each line (which of a command's kernels a compile message
    is about), or None for None."""
    return None if log is None else (lambda line: log(f"{line}: {label}"))
