"""Measuring the machine and perflab beside its peers: benchmarks, the ceilings the predictor
reads, PyTorch/JAX/cuBLAS peers, clock and power under load, timelines of a few steps."""
