"""Why the staged path's pageable image copy varies by +-20% between processes of one machine
(results/nvidia-h100-80gb-hbm3/staged_binding.txt): one process per call, each printing a JSON line.

Each process allocates the data set's layout (784 x 60000 float32, column-major) with transparent
huge pages left to NumPy (`default`), asked for (`huge`, madvise) or refused (`small`), then times:
  staged    the trainer's copy (Xb.set of a batch's columns + labels, pageable), walking the data set
  hot       the same batch again and again
  memcpy    the host alone: the batch's columns copied into a pinned buffer (what the driver's
            staging does before its DMA)
  pinned    a pinned batch host -> device (the link alone)
and reports the huge pages backing X (smaps) and the CPU the process ran on.

    for i in 1 2 3; do for t in default huge small; do python3 experiments/staged_copy/processes.py $t; done; done
"""
import json
import mmap
import os
import statistics
import sys
import time

import cupy as cp
import numpy as np

D, N = 784, 60000


def allocate(thp: str) -> np.ndarray:
    if thp == "default":
        return np.empty((D, N), np.float32, order="F")
    m = mmap.mmap(-1, D * N * 4)
    m.madvise(mmap.MADV_HUGEPAGE if thp == "huge" else mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(m, np.float32).reshape((D, N), order="F")


def huge_kib(a: np.ndarray) -> int:
    """AnonHugePages (KiB) of the mapping holding a."""
    addr, found = a.ctypes.data, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                found = lo <= addr < hi
            elif found and head[0] == "AnonHugePages:":
                return int(head[1])
    return -1


def cpu_now() -> int:
    """The CPU this process last ran on (/proc/self/stat, field 39)."""
    return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[36])


def median_ms(fn, repeats=15) -> float:
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times[1:])


def main(thp: str) -> None:
    rng = np.random.default_rng(0)
    X = allocate(thp)
    X[...] = rng.random((D, N), dtype=np.float32)
    y = rng.integers(0, 10, N)
    stream = cp.cuda.Stream(non_blocking=True)
    out = {"thp": thp, "huge_kib": huge_kib(X), "x_mib": X.nbytes >> 20, "cpu": cpu_now(),
           "pid": os.getpid(), "thp_sys": open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()}
    for B in (800, 3200, 12000):
        Xb, yb = cp.empty((D, B), cp.float32, order="F"), cp.empty(B, cp.int64)
        pinned = np.frombuffer(cp.cuda.alloc_pinned_memory(D * B * 4), np.float32, D * B).reshape((D, B), order="F")
        step = [0]

        def staged():
            s = (step[0] * B) % (N - B)
            step[0] += 1
            Xb.set(np.asfortranarray(X[:, s:s + B]), stream=stream)
            yb.set(np.ascontiguousarray(y[s:s + B]), stream=stream)
            stream.synchronize()

        def hot():
            Xb.set(np.asfortranarray(X[:, :B]), stream=stream)
            stream.synchronize()

        def memcpy():
            s = (step[0] * B) % (N - B)
            step[0] += 1
            np.copyto(pinned, X[:, s:s + B])

        def link():
            Xb.set(pinned, stream=stream)
            stream.synchronize()

        for name, fn in (("staged", staged), ("hot", hot), ("memcpy", memcpy), ("pinned", link)):
            out[f"{name}_{B}_ms"] = round(median_ms(fn), 4)
    out["cpu_end"] = cpu_now()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    thp = sys.argv[1] if len(sys.argv) > 1 else "default"
    if thp not in ("default", "huge", "small"):
        raise SystemExit(f"processes.py: transparent huge pages {thp!r}: say default, huge or small")
    main(thp)
