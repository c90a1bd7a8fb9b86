"""HDF5 input sources and output sinks; mapped reads, O_DIRECT writes and the two-slot commit stay inside."""
