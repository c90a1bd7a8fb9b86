"""The engine of `adgrad run`: chunks streamed from a store source through the kernel into a store sink."""
