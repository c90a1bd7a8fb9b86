"""Numba-level numeric helpers with no upward imports: exact sums, scalar functions the kernels call."""
