"""Does MPI_Allreduce let go of Python's GIL? Rank 1 enters 0.3 s late; on rank 0 a second thread
counts while the main thread waits in the all-reduce, through mpi4py and through ctypes (which lets
go of the GIL for every foreign call). A count near zero: the call held the GIL.
Run: mpirun -n 2 python3 experiments/pipelined/gil.py"""
import ctypes
import json
import threading
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
buf = np.ones(1 << 16, np.float32)
state = {"count": 0, "stop": False}


def spin():
    while not state["stop"]:
        state["count"] += 1


def run(label, call):
    comm.Barrier()
    if comm.rank == 1:
        time.sleep(0.3)
        call()
        return
    state.update(count=0, stop=False)
    counter = threading.Thread(target=spin)
    counter.start()
    start = time.perf_counter()
    call()
    seconds = time.perf_counter() - start
    state["stop"] = True
    counter.join()
    print(json.dumps({"call": label, "seconds": round(seconds, 3), "other_thread_count": state["count"],
                      "mpi": MPI.Get_library_version().splitlines()[0]}), flush=True)


def c_allreduce():
    for name in ("libmpi.so.40", "libmpi.so.12", "libmpi.so"):  # Open MPI, MPICH
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    handle = ctypes.c_void_p if MPI._sizeof(MPI.Comm) == 8 else ctypes.c_int
    f = lib.MPI_Allreduce
    f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, handle, handle, handle], ctypes.c_int
    return f


if __name__ == "__main__":
    run("mpi4py Allreduce", lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM))
    f = c_allreduce()
    run("ctypes MPI_Allreduce", lambda: f(int(MPI.IN_PLACE), buf.ctypes.data, buf.size, MPI._handleof(MPI.FLOAT),
                                          MPI._handleof(MPI.SUM), MPI._handleof(comm)))
