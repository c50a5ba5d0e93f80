"""The GPU check (`make gpu-check`): on a bare, offline NVIDIA machine, set up the engine from a
kit gathered beforehand (`make gpu-kit`), build for the GPU, run the seed study and the peer
benchmark, and write benchmarks/gpu.md. Standard library at module level: the machine's own
Python runs it before zerolab's dependencies are installed."""
