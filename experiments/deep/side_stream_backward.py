"""Issue 52, FP32 deeper nets: does the backward pass of the hidden layers gain from running each
layer's weight gradient dW_l = dz_l a_{l-1}^T on a side stream, beside its input gradient
W_l^T dz_l and the sigmoid' pass that follows it (they all read dz_l, none writes what another reads)?

The backward of 784-H-...-H-10 below the fused output layer, as FusedGPU.gradients runs it, in a CUDA
graph: serial (the trainer's order today) against forked (dW_l on a second stream, joined before the
step's last GEMM ends), each timed by graph replays (device time), plus each GEMM and the sigmoid' pass
alone. Usage: python3 experiments/deep/side_stream_backward.py [H-H B ...]   (default the issue's points)
"""
from __future__ import annotations

import json
import sys

import cupy as cp

from perflab import kernels
from perflab.results import git_commit
from perflab.timing import time_graph_ms

ORDERS = ("serial", "each layer", "before", "after")


def backward(layers: int, H: int, B: int, order: str):
    """The backward pass in one of ORDERS: serial; dW_l forked before W_l^T dz_l and joined at each layer (session
    38's first build); forked before it and joined once after dW_1 (the trainer from 4b9c13c); forked after it, so
    that dW_l runs beside sigmoid' and the GEMMs below (joined once)."""
    rng = cp.random.default_rng(0)
    X = rng.random((784, B), dtype=cp.float32)
    a = [rng.random((H, B), dtype=cp.float32) for _ in range(layers)]
    W = [rng.random((H, H), dtype=cp.float32) * 0.01 for _ in range(layers)]
    dz = [rng.random((H, B), dtype=cp.float32) for _ in range(layers)]
    dW = [cp.empty((H, 784), cp.float32)] + [cp.empty((H, H), cp.float32) for _ in range(layers - 1)]
    db = [cp.empty(H, cp.float32) for _ in range(layers)]
    side = cp.cuda.Stream(non_blocking=True)
    fork, join = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)

    def gemm(x, y, out):
        kernels.gemm(x, y, out=out, variant="cublas")

    def run():
        main = cp.cuda.get_current_stream()
        for l in range(layers - 1, 0, -1):  # hidden layer l + 1 over hidden layer l, as the trainer numbers them
            if order == "serial":
                gemm(dz[l], a[l - 1].T, dW[l])
            elif order in ("each layer", "before"):
                beside(main, lambda l=l: gemm(dz[l], a[l - 1].T, dW[l]))
            gemm(W[l].T, dz[l], dz[l - 1])
            if order == "after":  # forked once the input gradient is made: beside sigmoid' and what follows
                beside(main, lambda l=l: gemm(dz[l], a[l - 1].T, dW[l]))
            kernels.sigmoid_backward_rows(dz[l - 1], a[l - 1], db[l - 1])
            if order == "each layer":
                main.wait_event(join)  # the side's dW_l done before the next layer forks again (one event)
        gemm(dz[0], X.T, dW[0])
        if order in ("before", "after"):
            main.wait_event(join)  # joined once, after dW_1, as the trainer joins (4b9c13c)

    def beside(main, call):
        fork.record(main)
        side.wait_event(fork)
        with side:
            call()
            join.record(side)

    parts = {"dW_l": lambda: gemm(dz[-1], a[-2].T, dW[-1]), "W_l^T dz_l": lambda: gemm(W[-1].T, dz[-1], dz[-2]),
             "sigmoid'": lambda: kernels.sigmoid_backward_rows(dz[-2], a[-2], db[-2]),
             "dW_1": lambda: gemm(dz[0], X.T, dW[0])}
    return run, parts


def main(argv):
    points = [(2, 1024, 12000), (2, 1024, 3200), (2, 2048, 12000), (2, 2048, 3200), (3, 1024, 12000)]
    if argv:
        points = [(len(n.split("-")), int(n.split("-")[0]), int(b)) for n, b in zip(argv[0::2], argv[1::2])]
    for layers, H, B in points:
        runs = {order: backward(layers, H, B, order)[0] for order in ORDERS}
        parts = backward(layers, H, B, "serial")[1]
        row = {"net": "-".join([str(H)] * layers), "B": B, "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
               "git_commit": git_commit()}
        row |= {f"{k}_ms": time_graph_ms(cp, f, calls=5, repeats=15) for k, f in parts.items()}
        for _ in range(2):  # alternate, so a drift of the clocks falls on all
            row |= {f"{order}_ms": time_graph_ms(cp, run, calls=5, repeats=15) for order, run in runs.items()}
        row |= {f"{order}_over_serial": row[f"{order}_ms"] / row["serial_ms"] for order in ORDERS[1:]}
        print(json.dumps(row), flush=True)

if __name__ == "__main__":
    main(sys.argv[1:])
