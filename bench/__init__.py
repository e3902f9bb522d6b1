"""Benchmarks that print figures. Run each from the repository root as a module,
`python3 -m bench.NAME --help`; the GPU machine's plain Python needs nothing installed for the
ones that import only the standard-library payloads (`gpu_run`, `tune`, `gate_ops_vulkan`)."""
