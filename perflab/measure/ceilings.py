"""`perflab ceilings`: microbenchmarks of the machine it runs on, for the rooflines.

Rows (tidy): ceiling, size_bytes or shape, ranks, value, unit. Measured where they apply:
  gemm_flops       GEMM rate at the training shapes: BLAS on the CPU; cuBLAS and perflab's
                   best kernel on the GPU, and on a Hopper its tensor-core GEMMs (wgmma, x3tf32);
                   the half-precision roof: cuBLAS's BF16 and FP16 GEMMs as --dtype runs them
                   (impl cublas-bf16, cublas-fp16; from compute capability 8.0, FP16 from 7.0)
  h2d / d2h        host <-> device bandwidth against size, pageable and pinned (GPU)
  device_copy      device-to-device copy, bytes read + written (GPU)
  mpi_allreduce    host MPI all-reduce against size and p: algorithm bandwidth S/t and the
                   bus bandwidth 2(p-1)/p * S/t (the nccl-tests definition)
  nccl_allreduce   the same through NCCL on device buffers (several GPUs), launched one by one
  nccl_allreduce_graph  the same replayed in a CUDA graph, as an epoch graph holds it (device time)
  p2p_exchange_update   --comm p2p's exchange: the peers' gradients read over NVLink, summed and
                   applied to the parameters in one kernel, with the wait before the next
                   backward, in a CUDA graph, the L2 pushed out first (device time; GPUs of one node
                   with peer access);
                   p2p_exchange_update_bf16: as a bfloat16 run makes it, the peers' BF16 copies
                   read (size: the FP32 gradient's bytes, as the run's)
  overlap_exchange --overlap's backward GEMM 3 in row chunks, each chunk all-reduced by NCCL on a
                   second stream under the next, over the grid of H and B' (device time in a graph)
  pipelined_allreduce   the host all-reduce of a gradient piece as the pipelined trainer makes it:
                   pinned, just copied down, copied up after, a chain of pieces, the GPU computing
  step_kernel      each kernel of perflab's training step timed alone over a grid of hidden
                   sizes H and per-rank batches B (GPU: device time in a replayed graph; CPU:
                   the reference's forward, backward and update, on every rank at once, so the
                   ranks' contention for cores is in the number)
                   and the whole step's kernels in sequence, per GEMM (`step in sequence (<gemm>)`);
                   what one more hidden layer of H over one of H adds to the step (GPU: its kernels
                   in sequence, `hidden layer (<gemm>)`; CPU: the reference's parts of 784-H-H-10,
                   `<part>, two hidden layers`, up to CPU_DEEP_MAX), for deeper nets
  step_floor       the host's floor of one step, at a size where the GPU finishes first: one
                   graph replay of the fused step, the fused step launched kernel by kernel;
                   perflab's trainer itself at H = 16 (trainer_floor) and what a resident epoch
                   costs beyond its graph at real sizes (epoch_overhead)
  staged_images    the staged path's per-batch input copy, host -> device (seconds against B)
  staged_allreduce the staged path's gradient exchange (device -> host, MPI, host -> device)
The predictor (perflab.analysis.predictor) composes a training step from these rows alone.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from perflab.config import HALF_CAPABILITY, HALF_IMPLS, PIPELINED_CHUNKS, TWO_SHOT_FROM, TWO_SHOT_IMPL, ConfigError
from perflab.timing import median_seconds, repeat_seconds, side_by_side_seconds

SIZES = [2**k for k in range(12, 29, 2)]  # 4 KiB .. 256 MiB
HIDDEN_GRID = (256, 512, 1024, 2048, 4096)             # the step's kernels are timed at every (H, B)
BATCH_GRID = (400, 800, 1600, 3200, 6400, 12800)       # per-rank batch B' = B / p
CPU_HIDDEN_GRID = (128, 512, 1024, 2048)
CPU_BATCH_GRID = (200, 800, 1600, 3200, 12800)
CPU_DEEP_MAX = (1024, 3200)  # the CPU times 784-H-H-10 up to this (H, B); larger ones extrapolate (docs/DECISIONS.md, D27)
TRAINING_SHAPES = [(512, 784, 3200), (1024, 784, 3200), (2048, 784, 12000), (512, 3200, 784)]


def cpu_gemm(shapes=TRAINING_SHAPES, dtype="float32", repeats=5) -> list[dict]:
    rows = []
    rng = np.random.default_rng(0)
    for M, K, N in shapes:
        a, b = rng.random((M, K)).astype(dtype), rng.random((K, N)).astype(dtype)
        out = np.empty((M, N), dtype)
        t = median_seconds(lambda: np.matmul(a, b, out=out), repeats)
        rows.append({"ceiling": "gemm_flops", "device": "cpu", "impl": "numpy BLAS", "dtype": dtype,
                     "shape": f"{M}x{K}x{N}", "size_bytes": a.nbytes + b.nbytes, "ranks": 1,
                     "value": 2 * M * K * N / t, "unit": "FLOP/s"})
    return rows


def mpi_allreduce(comm, sizes=SIZES, repeats=10, ceiling: str = "mpi_allreduce") -> list[dict]:
    """Host all-reduce of float32 buffers as comm.reduce_host does it (MPI_Allreduce; with a
    SharedMemoryComm, the sum through shared memory: ceiling shm_allreduce); rank 0's median over
    repeats (barrier first)."""
    rows = []
    p = comm.size
    impl = comm.MPI.Get_library_version().split()[0] if ceiling == "mpi_allreduce" else comm.strategy
    for size in sizes:
        buf = np.ones(size // 4, np.float32)
        comm.barrier()
        rows.append(allreduce_row(ceiling, "cpu", impl, size, p, repeat_seconds(lambda: comm.reduce_host(buf), repeats,
                                                                                sync=comm.barrier)))
    return rows


def shm_allreduce(comm, sizes=SIZES, repeats=10) -> list[dict]:
    """The shared-memory host all-reduce (--comm shm) beside MPI's, where all ranks share a node."""
    from perflab.config import ConfigError
    from perflab.train.comm import SharedMemoryComm
    try:
        shm = SharedMemoryComm(comm)
    except ConfigError:  # ranks on several nodes: nothing to compare
        return []
    return mpi_allreduce(shm, sizes, repeats, ceiling="shm_allreduce")


def gpu_ceilings(sizes=SIZES, shapes=TRAINING_SHAPES, repeats=10) -> list[dict]:
    import cupy as cp

    from perflab import kernels
    from perflab.kernels import wgmma
    from perflab.measure.bench import device_copy_rate
    from perflab.timing import time_graph_ms, time_ms
    rows = []
    rng = np.random.default_rng(0)
    for M, K, N in shapes:
        a = cp.asarray(rng.random((M, K), dtype=np.float32))
        b = cp.asarray(rng.random((K, N), dtype=np.float32))
        out = cp.empty((M, N), cp.float32)
        timed = {impl: time_ms(cp, lambda: kernels.gemm(a, b, out=out, variant=impl), repeats)
                 for impl in ("cublas", "best")}
        if wgmma.hopper():  # the tensor-core GEMMs' roofs beside the FP32 one (P_flops stays cuBLAS's): the kernel
            # alone, tuned, on operands prepared once (K-major, split), as the trainer reads its images
            for x in (a, b):
                wgmma.constant(x)
            for impl in kernels.WGMMA_VARIANTS:
                kernels.tune(a, b, out, impl)
                timed[impl] = time_graph_ms(cp, lambda: kernels.gemm(a, b, out=out, variant=impl), calls=5, repeats=repeats)
            for x in (a, b):
                wgmma.forget(x)
            wgmma.release()
        dtypes = dict.fromkeys(timed, "float32")
        for kind, impl in HALF_IMPLS.items():
            if int(cp.cuda.Device().compute_capability) >= HALF_CAPABILITY[kind]:
                timed[impl], dtypes[impl] = half_gemm_ms(cp, kernels, M, K, N, kind, repeats), kind
        for impl, ms in timed.items():
            rows.append({"ceiling": "gemm_flops", "device": "gpu", "impl": impl, "dtype": dtypes[impl],
                         "shape": f"{M}x{K}x{N}", "size_bytes": (M * K + K * N) * (2 if impl in HALF_IMPLS.values() else 4),
                         "ranks": 1,
                         "value": 2 * M * K * N / (ms * 1e-3), "unit": "FLOP/s"})
    rows.append({"ceiling": "device_copy", "device": "gpu", "impl": "cupy copy", "dtype": "float32", "shape": "",
                 "size_bytes": 1 << 30, "ranks": 1, "value": device_copy_rate(cp), "unit": "B/s"})
    stream = cp.cuda.Stream(non_blocking=True)
    for pinned in (False, True):
        for size in sizes:
            dev = cp.empty(size, cp.uint8)
            if pinned:
                host = np.frombuffer(cp.cuda.alloc_pinned_memory(size), np.uint8, size)
            else:
                host = np.empty(size, np.uint8)
            host[:] = 1
            for direction in ("h2d", "d2h"):
                def copy():
                    if direction == "h2d":
                        dev.set(host, stream=stream)
                    else:
                        dev.get(out=host, stream=stream)
                t = median_seconds(copy, repeats, sync=stream.synchronize)
                rows.append({"ceiling": direction, "device": "gpu", "impl": "pinned" if pinned else "pageable",
                             "dtype": "uint8", "shape": "", "size_bytes": size, "ranks": 1, "value": size / t, "unit": "B/s"})
    return rows




def half_gemm_ms(cp, kernels, M: int, K: int, N: int, kind: str, repeats: int) -> float:
    """cuBLAS's half GEMM (out in half, FP32 accumulation) at one shape, as the trainer calls it:
    device milliseconds of graph replays, on random operands rounded to `kind`."""
    from perflab.timing import time_graph_ms
    rng = np.random.default_rng(1)
    store = kernels.HALF_STORAGE[kind]
    a, b = (kernels.narrow_copy(x, cp.empty(x.shape, store)) for x in
            (cp.asarray(rng.random(shape, dtype=np.float32)) for shape in ((M, K), (K, N))))
    out = cp.empty((M, N), store)
    return time_graph_ms(cp, lambda: kernels.half_gemm(a, b, out), calls=5, repeats=repeats)


def nccl_allreduce(comm, sizes=SIZES, repeats=20) -> list[dict]:
    """NCCL all-reduce of float32 device buffers (the comm must be an NCCLComm)."""
    import cupy as cp
    rows = []
    p = comm.size
    stream = cp.cuda.Stream(non_blocking=True)
    for size in sizes:
        call = nccl_call(comm, cp.ones(size // 4, cp.float32))
        with stream:
            comm.barrier()
            t = median_seconds(call, repeats, sync=stream.synchronize)
        rows.append(allreduce_row("nccl_allreduce", "gpu", "nccl", size, p, t))
    return rows


def nccl_call(comm, buf):
    """One in-place NCCL all-reduce of the float32 device buffer buf on the current stream, as a call
    (the one both NCCL ceilings time, launched and in a graph)."""
    import cupy as cp
    return lambda: comm.communicator.allReduce(buf.data.ptr, buf.data.ptr, buf.size, comm.types["float32"],
                                               comm.nccl.NCCL_SUM, cp.cuda.get_current_stream().ptr)


def allreduce_row(ceiling: str, device: str, impl: str, size: int, p: int, seconds: float | list[float]) -> dict:
    """An all-reduce ceiling's row: algorithm bandwidth S/t and the bus bandwidth 2(p-1)/p * S/t at the
    median; given every repeat's seconds, also the fastest and slowest (a host-paced prediction's band)."""
    spread = {}
    if isinstance(seconds, list):
        spread = {"min_seconds": min(seconds), "max_seconds": max(seconds)}
        seconds = statistics.median(seconds)
    return {"ceiling": ceiling, "device": device, "impl": impl, "dtype": "float32", "shape": "", "size_bytes": size,
            "ranks": p, "seconds": seconds, "value": size / seconds, "bus_value": 2 * (p - 1) / p * size / seconds,
            "unit": "B/s", **spread}


def ranks_together(comm):
    """A graph replay's `before` for collectives: the last replay done here, then every rank starts
    the next at once."""
    import cupy as cp

    def together():
        cp.cuda.get_current_stream().synchronize()
        comm.barrier()
    return together


def nccl_allreduce_graph(comm, sizes=SIZES, calls=10, repeats=10) -> list[dict]:
    """NCCL all-reduce of float32 device buffers inside a CUDA graph (`calls` a graph, device time
    between events, the ranks' replays started together): where an epoch graph holds it, the host's
    launch is gone and it runs faster than launched (docs/DECISIONS.md, D25). The graphs go before
    the communicator they hold (perflab.train.gpu.FusedGPU.close): time_graph_ms keeps none."""
    import cupy as cp

    from perflab.timing import time_graph_ms
    rows = []
    for size in sizes:
        call = nccl_call(comm, cp.ones(size // 4, cp.float32))
        t = time_graph_ms(cp, call, calls=calls, repeats=repeats, before=ranks_together(comm)) / 1e3
        rows.append(allreduce_row("nccl_allreduce_graph", "gpu", "nccl in a CUDA graph", size, comm.size, t))
    return rows


def p2p_exchange_update(comm, sizes=SIZES, calls=10, repeats=10, bf16: bool = False) -> list[dict]:
    """--comm p2p's exchange and update of a float32 gradient of each size (the comm a P2PComm), in
    a CUDA graph as the epoch graph holds it: the wait for the peers' reads of the last round,
    then the kernel. Each call as a step meets it: after a fill of four times the L2, whose own time
    is taken off, so that the parameters and the copies come from memory, not from the L2 of the call
    before, and the wait finds the peers' last reads long done (in a step they finished during
    forward). Back to back and warm (ceilings files before D85), small nets' exchanges read short
    (docs/DECISIONS.md, D15, D85).
    bf16: as a bfloat16 run exchanges it, through the gradient's BF16 copies, which its GEMMs wrote (docs/DECISIONS.md,
    D64, D81)."""
    import cupy as cp

    from perflab.timing import time_graph_ms
    rows = []
    regs = cp.zeros(1, cp.float32)  # one segment, no L2 term: the kernel's work is the same
    flood = cp.empty(cp.cuda.Device().attributes["L2CacheSize"], cp.float32)  # four times the L2's bytes
    name, what = ("p2p_exchange_update_bf16", "read BF16 copies, sum, update") if bf16 else \
        ("p2p_exchange_update", "read, sum, update")
    for size in sizes:
        n = size // 4
        comm.register(n + 1, np.float32, bf16_copy=bf16).fill(1e-3)
        if bf16:  # the trainer's GEMMs write most of a gradient into the copy: the kernel narrows no more of it here
            comm.in_copy([None], [(n,)], [0])
        params, ends = cp.ones(n, cp.float32), cp.asarray([n], np.int64)
        rounded = cp.empty(n, cp.uint16) if bf16 else None

        def call():
            flood.fill(0)
            comm.read_wait()
            comm.exchange_update(params, 0.1, ends, regs, rounded=rounded)
        t = time_graph_ms(cp, call, calls=calls, repeats=repeats, before=ranks_together(comm)) / 1e3
        t -= time_graph_ms(cp, lambda: flood.fill(0), calls=calls, repeats=repeats) / 1e3
        kind = TWO_SHOT_IMPL if comm.size >= TWO_SHOT_FROM else "p2p"
        rows.append(allreduce_row(name, "gpu", f"{kind}: {what} in one kernel, L2 cold", size, comm.size, t))
    return rows


def overlap_exchange(comm, hidden=HIDDEN_GRID, batches=BATCH_GRID, repeats: int = 10) -> list[dict]:
    """--overlap's backward GEMM 3 and gradient exchange at each (H, B') on every rank (the comm an
    NCCLComm), as the trainer runs it (perflab.train.overlap.overlapped_gemm3) inside its step's graph:
    dW1 in row chunks, each chunk's all-reduce on a second stream while the next computes, device
    seconds of the whole in a replayed graph, the ranks' replays started together. NCCL's kernels
    and the GEMM run at once and share the SMs, which no sum of the two alone says."""
    import cupy as cp

    from perflab import kernels
    from perflab.analysis.predictor import overlap_name
    from perflab.config import OVERLAP_CHUNKS as chunks
    from perflab.measure.bench import C, D
    from perflab.timing import time_graph_ms
    from perflab.train.overlap import overlapped_gemm3, row_chunks
    rng = np.random.default_rng(0)
    side, handoff = cp.cuda.Stream(non_blocking=True), cp.cuda.Event(disable_timing=True)
    gemm = lambda a, b, out: kernels.gemm(a, b, out=out, variant="cublas")  # noqa: E731
    rows = []
    for H in hidden:
        for B in batches:
            da1 = cp.asarray(rng.uniform(-1e-3, 1e-3, (H, B)).astype(np.float32))
            X = cp.asfortranarray(cp.asarray(rng.uniform(0, 1, (D, B)).astype(np.float32)))
            G = cp.zeros(H * D + H + C * H + C + 1, np.float32)
            dW1 = G[:H * D].reshape(H, D)
            call = lambda: overlapped_gemm3(gemm, comm.allreduce, da1, X, dW1, G, row_chunks(H, chunks), side,  # noqa: E731
                                            handoff)
            seconds = time_graph_ms(cp, call, calls=2, repeats=repeats, before=ranks_together(comm)) * 1e-3
            rows.append(kernel_row("gpu", overlap_name(chunks), H, B, seconds, ranks=comm.size) | {"ceiling": "overlap_exchange"})
    cp.get_default_memory_pool().free_all_blocks()
    return rows


PIECE_SIZES = [2**k for k in range(16, 25, 2)]  # 64 KiB .. 16 MiB: the pipelined trainer's pieces


def pipelined_allreduce(comm, sizes=PIECE_SIZES, pieces=4, repeats=5) -> list[dict]:
    """The host all-reduce of one gradient piece as perflab.train.pipelined runs it, rank 0's median:
    `pieces` pieces of a size copied down into pinned memory, then each all-reduced in turn (no
    barrier between them) and copied up, while the GPU runs GEMMs on a third stream as backward
    does. The idle, barrier-first all-reduce (mpi_allreduce) misses what this costs
    (docs/DECISIONS.md, D28)."""
    import cupy as cp

    from perflab.train.gpu import pinned_copy
    copy = cp.cuda.runtime.memcpyAsync
    down, up, work = (cp.cuda.Stream(non_blocking=True) for _ in range(3))
    A = cp.ones((4096, 4096), cp.float32)  # a product long enough to keep the GPU busy (docs/DECISIONS.md, D28)
    rows = []
    for size in sizes:
        n = size // 4
        dev = cp.ones(pieces * n, cp.float32)
        host = pinned_copy(np.zeros(pieces * n, np.float32))
        landed = [cp.cuda.Event(disable_timing=True) for _ in range(pieces)]
        times = []
        for round_ in range(repeats + 1):  # the first round warms up
            with work:
                for _ in range(max(4, pieces * size // 2**21)):  # busy past the last piece
                    A @ A
            comm.barrier()
            for j in range(pieces):
                copy(host[j * n:].ctypes.data, dev[j * n:].data.ptr, size, cp.cuda.runtime.memcpyDeviceToHost, down.ptr)
                landed[j].record(down)
            for j in range(pieces):
                landed[j].synchronize()
                start = time.perf_counter()
                comm.reduce_host(host[j * n:(j + 1) * n])
                if round_:
                    times.append(time.perf_counter() - start)
                copy(dev[j * n:].data.ptr, host[j * n:].ctypes.data, size, cp.cuda.runtime.memcpyHostToDevice, up.ptr)
            up.synchronize()
            work.synchronize()
        rows.append(allreduce_row("pipelined_allreduce", "cpu", comm.MPI.Get_library_version().split()[0], size,
                                  comm.size, times))
    return rows


def measure_on_world(p: int, grid, sizes=SIZES, nets=()) -> list[dict] | None:
    """On every MPI engine: the ceilings of the first p ranks (GPU where CuPy sees one), the step's
    kernels at `grid`, the all-reduces at `nets`' gradients too; rank 0 returns the rows, the others
    None (the notebook's entry point)."""
    from perflab.backend import cupy_or_none
    from perflab.train.comm import on_first_ranks
    return on_first_ranks(p, lambda comm: measure(comm, cupy_or_none() is not None, sizes, log=lambda m: None, grid=grid,
                                                  nets=nets))


def kernel_row(device: str, name: str, H: int, B: int, seconds: float, ranks: int = 1, nbytes: float = 0) -> dict:
    return {"ceiling": "step_kernel", "device": device, "impl": name, "dtype": "float32", "shape": f"H={H} B={B}",
            "H": H, "B": B, "size_bytes": nbytes, "ranks": ranks, "seconds": seconds, "value": seconds, "unit": "s"}


def gpu_step_kernels(hidden=HIDDEN_GRID, batches=BATCH_GRID, repeats: int = 10, progress: bool = False) -> list[dict]:
    """Device seconds of every kernel of the training step (fused and unfused) at each (H, B')."""
    import cupy as cp
    from tqdm.auto import tqdm

    from perflab.analysis.predictor import hidden_layer_name, sequence_name
    from perflab.kernels import wgmma
    from perflab.measure.bench import half_step, hidden_layer_kernels, step_kernels, tensor_core_step_kernels
    from perflab.timing import time_graph_ms, time_ms
    from perflab.train import step as trainstep
    rows = []
    gemms = ("cublas",) + (wgmma.WGMMA_VARIANTS if wgmma.hopper() else ())
    for H, B in tqdm([(H, B) for H in hidden for B in batches], desc="step kernels", disable=not progress):
        # on a Hopper also the kernels its tensor-core GEMMs change (the predictor's TENSOR_CORE_STEPS)
        calls = {}
        for name, call, nbytes in step_kernels(H, B) + (tensor_core_step_kernels(H, B) if wgmma.hopper() else []):
            calls[name] = call
            rows.append(kernel_row("gpu", name, H, B, time_graph_ms(cp, call, calls=5, repeats=repeats) * 1e-3,
                                   nbytes=nbytes))
        for gemm in gemms:  # the step's kernels one after another, as its graph runs them: over their sum
            # alone, each kernel's operands no longer where the one before left them (docs/DECISIONS.md, D24)
            step = [calls[k.name] for k in trainstep.step((H,), B, gemm=gemm)]
            seconds = time_graph_ms(cp, lambda: [call() for call in step], calls=5, repeats=repeats) * 1e-3
            rows.append(kernel_row("gpu", sequence_name(gemm), H, B, seconds))
            # and launched one by one, five steps between two events, as a step launched kernel by kernel
            # runs where its host keeps ahead: each launch leaves the GPU a gap a graph does not
            seconds = time_ms(cp, lambda: [call() for _ in range(5) for call in step], repeats=repeats) * 1e-3 / 5
            rows.append(kernel_row("gpu", sequence_name(gemm, eager=True), H, B, seconds))
            # what one more hidden layer of H adds (deeper nets: the predictor adds one a layer), both ways
            layer = hidden_layer_kernels(H, B, gemm)
            seconds = time_graph_ms(cp, lambda: [call() for call in layer], calls=5, repeats=repeats) * 1e-3
            rows.append(kernel_row("gpu", hidden_layer_name(gemm), H, B, seconds))
            seconds = time_ms(cp, lambda: [call() for _ in range(5) for call in layer], repeats=repeats) * 1e-3 / 5
            rows.append(kernel_row("gpu", hidden_layer_name(gemm, eager=True), H, B, seconds))
        for kind, gemm in HALF_IMPLS.items():  # the mixed-precision step, where this GPU runs it: the trainer's own
            if int(cp.cuda.Device().compute_capability) < HALF_CAPABILITY[kind]:
                continue
            step = half_step(H, B, kind)
            layer = hidden_layer_kernels(H, B, half=kind)
            for name, calls in ((sequence_name(gemm), (step,)), (hidden_layer_name(gemm), layer)):
                seconds = time_graph_ms(cp, lambda: [call() for call in calls], calls=5, repeats=repeats) * 1e-3
                rows.append(kernel_row("gpu", name, H, B, seconds))
            for name, calls in ((sequence_name(gemm, eager=True), (step,)), (hidden_layer_name(gemm, eager=True), layer)):
                seconds = time_ms(cp, lambda: [call() for _ in range(5) for call in calls], repeats=repeats) * 1e-3 / 5
                rows.append(kernel_row("gpu", name, H, B, seconds))
            step.trainer.close()
        wgmma.release()
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def gpu_step_floors(steps: int = 40, repeats: int = 7) -> list[dict]:
    """Host seconds per step where the host, not the GPU, is the bound (H = B = 16): the fused step
    replayed as one graph, and launched kernel by kernel (as the profiled run and --launch eager launch it). The
    median over `repeats` runs of `steps` steps: one run's mean carries any hiccup of the host."""
    import cupy as cp

    from perflab.measure.bench import step_kernels
    from perflab.train import step as trainstep
    fused = trainstep.names(trainstep.step((16,), 16))  # the fused step, without what the bench times beside it
    calls = [call for name, call, _ in step_kernels(16, 16) if name in fused]
    stream = cp.cuda.Stream(non_blocking=True)

    def eager():
        for call in calls:
            call()
    with stream:
        eager()
        stream.begin_capture()
        eager()
        graph = stream.end_capture()
        rows = []
        for name, step in (("graph replay", lambda: graph.launch(stream)), ("eager launch", eager)):
            def run(step=step):
                for _ in range(steps):
                    step()
            seconds = median_seconds(run, repeats, warmup=1, sync=stream.synchronize) / steps
            rows.append({"ceiling": "step_floor", "device": "gpu", "impl": name, "dtype": "float32", "shape": "",
                         "size_bytes": 0, "ranks": 1, "kernels": len(calls), "seconds": seconds, "unit": "s"})
            rows[-1]["value"] = rows[-1]["seconds"]
    return rows


def trainer_floor(comm, mode: str = "resident", batches=(20, 400), graphs: bool = True, gemm: str = "cublas",
                  repeats: int = 1) -> list[dict]:
    """perflab's trainer itself at H = 16 and 16 samples a rank, on every rank of comm, where the
    GPU's work is negligible: epochs of two lengths give its host cost per step (the loop, the
    graph replay or the eager launches and the copies' latency; on several GPUs the all-reduce
    and update) and per epoch (the synchronizations and the loss at its end). Named `trainer
    <mode>`, how it launched and, kernel by kernel, its GEMM (perflab.analysis.predictor.floor_name).
    With `repeats`, the pair is timed that many times: the median, and the fastest and slowest as
    min_seconds and max_seconds (a step launched kernel by kernel moves with the host:
    docs/DECISIONS.md, D29)."""
    from perflab.analysis.predictor import floor_name
    from perflab.config import Config
    from perflab.train.runner import train_on_ranks
    from perflab.train.spec import RunSpec
    steps, fixed = [], []
    for _ in range(repeats):
        epochs = []
        for n in batches:
            cfg = Config(dataset="synthetic", hidden_sizes=(16,), batch_size=16 * comm.size,
                         train_size=16 * comm.size * n, num_epochs=4, test_size=0, learning_rate=0.01, dtype="float32")
            spec = RunSpec(backend="cupy", parallel="data", mode=mode, gemm=gemm, launch="graph" if graphs else "eager",
                           exchange="nccl" if mode == "resident" else "mpi")
            history, _ = train_on_ranks(cfg, "data", comm, spec, log=None)
            epochs.append(statistics.median(e["seconds"] for e in history.epochs[1:]))
        steps.append((epochs[1] - epochs[0]) / (batches[1] - batches[0]))
        fixed.append(max(epochs[0] - batches[0] * steps[-1], 0.0))
    row = {"ceiling": "step_floor", "device": "gpu", "dtype": "float32", "shape": "", "size_bytes": 0, "ranks": comm.size,
           "unit": "s"}
    step, per_epoch = statistics.median(steps), statistics.median(fixed)
    spread = {"min_seconds": min(steps), "max_seconds": max(steps)} if repeats > 1 else {}
    name = floor_name(mode, graphs, gemm)
    return [{**row, "impl": name, "seconds": step, "value": step, **spread},
            {**row, "impl": f"{name} epoch", "seconds": per_epoch, "value": per_epoch}]


def epoch_overhead(shapes=((1024, 1600, 30), (2048, 800, 60)), epochs: int = 8, repeats: int = 10) -> list[dict]:
    """What a resident epoch on one GPU (one CUDA graph, `FusedGPU.epoch`) costs beyond its graph's
    device time, at real sizes: the trainer's host-timed epoch (fit's median after the first,
    epoch_seconds) and its own epoch graph replayed between events (graph_seconds); seconds is
    the difference, a share of the epoch rather than a fixed cost like the trainer's floor at H = 16,
    so the predictor takes the ratio (Ceilings.epoch_stretch; docs/DECISIONS.md, D24). Per (H, B,
    batches an epoch): step_floor `trainer resident epoch graph`."""
    import cupy as cp

    from perflab.config import Config
    from perflab.timing import replay_ms
    from perflab.train.comm import Serial
    from perflab.train.runner import train_on_ranks
    from perflab.train.spec import RunSpec
    rows = []
    for H, B, batches in shapes:
        cfg = Config(dataset="synthetic", hidden_sizes=(H,), batch_size=B, train_size=B * batches, num_epochs=epochs,
                     test_size=0, learning_rate=0.01, dtype="float32")
        history, trainer = train_on_ranks(cfg, "data", Serial(), RunSpec(backend="cupy", exchange="nccl"), log=None)
        graphs = [graph for key, graph in trainer.cache.items() if key[0] == "epoch"]
        if len(graphs) != 1:
            raise RuntimeError(f"the trainer ran {len(graphs)} epoch graphs at H={H} B={B}, not one: "
                               "FusedGPU.graphs_an_epoch no longer holds for a plain resident run")
        epoch = statistics.median(e["seconds"] for e in history.epochs[1:])
        graph = replay_ms(cp, graphs, trainer.stream, repeats) * 1e-3
        trainer.close()
        rows.append({"ceiling": "step_floor", "device": "gpu", "impl": "trainer resident epoch graph", "dtype": "float32",
                     "shape": f"H={H} B={B}", "H": H, "B": B, "batches": batches, "size_bytes": 0, "ranks": 1,
                     "epoch_seconds": epoch, "graph_seconds": graph, "seconds": epoch - graph, "value": epoch - graph,
                     "unit": "s"})
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def trainer_floors(comm) -> list[dict]:
    """The trainer's floor alone on rank 0 (resident and staged, each as a graph and kernel by kernel;
    kernel by kernel also with the tensor-core GEMMs, on a Hopper, and three times: the host's
    spread), then resident on all ranks."""
    from perflab.kernels import wgmma
    from perflab.train.comm import Serial
    rows = []
    if comm.rank == 0:
        rows += epoch_overhead()
        for mode in ("resident", "staged"):
            rows += trainer_floor(Serial(), mode)
            for gemm in ("cublas",) + (wgmma.WGMMA_VARIANTS if wgmma.hopper() else ()):
                rows += trainer_floor(Serial(), mode, graphs=False, gemm=gemm, repeats=3)
    comm.idle_barrier()
    if comm.size > 1:
        on_all = trainer_floor(comm)
        rows += on_all if comm.rank == 0 else []
    return rows


def staged_images(batches=BATCH_GRID, N: int = 60000, walks: int = 7) -> list[dict]:
    """Seconds of the staged path's per-batch input copy, made as the trainer makes it: every batch
    of columns of a D x N pageable host array (the data set's layout) and its labels in turn, host ->
    device, one stream, synchronized once a walk (the trainer never waits for a copy, so the copies
    stream through the driver's staging). Per B: the median over `walks` walks of the data set, the
    walks of every B interleaved, because the copy is the host's one-core memcpy into staging, which
    drifts over seconds: a few copies in a row measure the moment, not the machine
    (docs/DECISIONS.md, D30)."""
    import cupy as cp
    rng = np.random.default_rng(0)
    X, y = np.asfortranarray(rng.random((784, N), dtype=np.float32)), rng.integers(0, 10, N)
    stream = cp.cuda.Stream(non_blocking=True)
    buffers = {B: (cp.empty((784, B), cp.float32, order="F"), cp.empty(B, cp.int64)) for B in batches}
    times: dict = {B: [] for B in batches}
    for walk in range(walks + 1):  # the first walk warms up
        for B in batches:
            Xb, yb = buffers[B]
            starts = range(0, N - B + 1, B)
            start = time.perf_counter()
            for s in starts:
                Xb.set(np.asfortranarray(X[:, s:s + B]), stream=stream)
                yb.set(np.ascontiguousarray(y[s:s + B]), stream=stream)
            stream.synchronize()
            if walk:
                times[B].append((time.perf_counter() - start) / len(starts))
    rows = []
    for B, t in times.items():
        mid = statistics.median(t)
        rows.append({"ceiling": "staged_images", "device": "gpu", "impl": "pageable", "dtype": "float32", "shape": "",
                     "B": B, "size_bytes": 784 * B * 4 + 8 * B, "ranks": 1, "seconds": mid, "value": mid, "unit": "s",
                     "min_seconds": min(t), "max_seconds": max(t)})
    return rows


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {  // one thread busy for `cycles` clocks: a stand-in step
    const long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def staged_overlap(batches=(800, 3200, 12800), kernel_us=(50, 100, 200, 400, 800, 1600), N: int = 60000,
                   walks: int = 3) -> list[dict]:
    """How much of the staged copy runs under the step before it. The graphed staged trainer launches
    batch k's graph and then copies batch k+1 from pageable memory: the host's memcpy into the
    driver's staging proceeds while the GPU runs, until the staging buffers fill. Per B and kernel
    time T, a walk of the data set launches a kernel that keeps the GPU busy T, then copies the next
    batch, synchronized once a walk; the same walk without the kernel is the copy alone.
    hidden = T + copy - (the walk's time a batch): what the predictor takes off copy + kernels. The
    walks of every (B, T) interleaved, the median of `walks` kept (the copy drifts)."""
    import cupy as cp
    rng = np.random.default_rng(0)
    X = np.asfortranarray(rng.random((784, N), dtype=np.float32))
    stream = cp.cuda.Stream(non_blocking=True)
    spin = cp.RawKernel(SPIN, "spin")
    hz = cp.cuda.Device().attributes["ClockRate"] * 1e3
    cycles = {us: np.int64(us * 1e-6 * hz) for us in (0,) + tuple(kernel_us)}
    def kernel_seconds(c, n=5):  # a spin's own time, as the GPU ran it (CUDA events around n in a row)
        spin((1,), (1,), (c,), stream=stream)
        first, last = cp.cuda.Event(), cp.cuda.Event()
        first.record(stream)
        for _ in range(n):
            spin((1,), (1,), (c,), stream=stream)
        last.record(stream)
        last.synchronize()
        return cp.cuda.get_elapsed_time(first, last) / 1e3 / n
    kernel_s = {us: kernel_seconds(c) if us else 0.0 for us, c in cycles.items()}
    buffers = {B: cp.empty((784, B), cp.float32, order="F") for B in batches}
    times: dict = {(B, us): [] for B in batches for us in cycles}
    for walk in range(walks + 1):  # the first walk warms up
        for B in batches:
            for us, c in cycles.items():
                starts = range(0, N - B + 1, B)
                start = time.perf_counter()
                for s in starts:
                    if us:
                        spin((1,), (1,), (c,), stream=stream)
                    buffers[B].set(X[:, s:s + B], stream=stream)
                stream.synchronize()
                if walk:
                    times[(B, us)].append((time.perf_counter() - start) / len(starts))
    rows = []
    for B in batches:
        copy = statistics.median(times[(B, 0)])
        for us in kernel_us:
            t = statistics.median(times[(B, us)])
            hidden = max(kernel_s[us] + copy - t, 0.0)
            rows.append({"ceiling": "staged_overlap", "device": "gpu", "impl": "pageable", "dtype": "float32", "shape": "",
                         "B": B, "size_bytes": 784 * B * 4, "ranks": 1, "kernel_seconds": kernel_s[us],
                         "copy_seconds": copy, "seconds": t, "hidden_seconds": hidden, "value": hidden, "unit": "s"})
    return rows


def staged_allreduce(comm, sizes=SIZES, repeats: int = 10) -> list[dict]:
    """The staged path's gradient exchange, the very call training makes (MPIComm.allreduce of a
    device buffer: device -> host, MPI_Allreduce, host -> device), host seconds against size."""
    import cupy as cp
    rows = []
    for size in sizes:
        buf = cp.ones(size // 4, cp.float32)
        times = repeat_seconds(lambda: comm.allreduce(buf), repeats,
                               sync=lambda: (cp.cuda.Device().synchronize(), comm.barrier()))
        rows.append(allreduce_row("staged_allreduce", "gpu", "mpi", size, comm.size, times))
    return rows


def cpu_step_kernels(comm, hidden=CPU_HIDDEN_GRID, batches=CPU_BATCH_GRID, repeats: int = 3) -> list[dict]:
    """The NumPy reference's forward, backward (+ L2) and update at each (H, B'), timed on every rank
    at once (a barrier starts each) with the BLAS threads training gives a rank, so p ranks
    sharing the cores show in the times."""
    from perflab.backend import blas_threads
    with blas_threads(comm):
        return cpu_step_kernel_rows(comm, hidden, batches, repeats)


def cpu_step_kernel_rows(comm, hidden, batches, repeats) -> list[dict]:
    """The rows of cpu_step_kernels: 784-H-10's parts at every (H, B), and 784-H-H-10's up to CPU_DEEP_MAX (at
    least the two smallest of each; the predictor adds their excess over 784-H-10's per hidden layer). Where both
    are timed, they are timed side by side, call for call (side_by_side_seconds): timed one after the other,
    seconds apart, a loaded machine's drift between them outweighed the excess (docs/DECISIONS.md, D62)."""
    from perflab.analysis.predictor import CPU_DEEP_SUFFIX
    from perflab.train import model
    rng = np.random.default_rng(comm.rank)
    X_all = np.asfortranarray(rng.random((784, 2 * max(batches)), dtype=np.float32))  # the data set's layout
    rows = []
    small = sorted(hidden)[:2] + [H for H in hidden if H <= CPU_DEEP_MAX[0]]  # at least two of each, to interpolate
    small_b = sorted(batches)[:2] + [B for B in batches if B <= CPU_DEEP_MAX[1]]
    for H in hidden:
        nets = {"": model.init_params((784, H, 10), "float32", 0)}
        if H in small:
            nets[CPU_DEEP_SUFFIX] = model.init_params((784, H, H, 10), "float32", 0)
        for B in batches:
            X, y = X_all[:, :B], rng.integers(0, 10, B)
            parts = {suffix: step_parts(model, params, X, y, B) for suffix, params in nets.items()
                     if not suffix or B in small_b}
            for name in ("forward", "backward", "step"):
                comm.barrier()
                times = side_by_side_seconds([calls[name] for calls in parts.values()], repeats, warmup=1)
                rows += [kernel_row("cpu", name + suffix, H, B, statistics.median(seconds), ranks=comm.size)
                         for suffix, seconds in zip(parts, times)]
    return rows


def step_parts(model, params, X, y, B: int) -> dict:
    """The reference's forward, backward (+ L2) and update of one net at a batch, as calls to time."""
    acts = model.forward(params, X)
    grads = model.backward(params, acts, y, B)
    return {"forward": lambda: model.forward(params, X),
            "backward": lambda: (model.backward(params, acts, y, B, out=grads),
                                 model.add_regularization(grads, params, 1e-4)),
            "step": lambda: model.sgd_step(params, grads, 0.0)}


def default_grid(gpu: bool) -> tuple:
    """(hidden sizes, per-rank batches) at which the step's kernels are timed unless told."""
    return (HIDDEN_GRID, BATCH_GRID) if gpu else (CPU_HIDDEN_GRID, CPU_BATCH_GRID)


def step_grid(gpu: bool, nets=(), batches=(), asked_only: bool = False) -> tuple[list, list]:
    """(hidden sizes, per-rank batches) at which `perflab ceilings` times the step's kernels: the default grid
    joined with every width of the nets asked and the batches asked, or (asked_only) those alone, as the main job
    times its sweep's shapes (a CPU's grid takes minutes at its largest batches)."""
    hidden, grid_batches = ((), ()) if asked_only else default_grid(gpu)
    return sorted({*hidden, *(h for net in nets for h in net)}), sorted({*grid_batches, *batches})


def exchange_sizes(sizes, nets=()) -> tuple[list[int], list[int]]:
    """(all-reduce sizes, the pipelined trainer's piece sizes): the grids', and each net's own gradient
    and pieces (hidden widths), so a prediction for those nets reads its exchanges as measured, not
    fitted across sizes where the host MPI's protocol changes (docs/DECISIONS.md, D22)."""
    from perflab.analysis.perfmodel import gradient_buffer_bytes, gradient_pieces
    whole = {gradient_buffer_bytes(net) for net in nets}
    pieces = {size for net in nets for size in gradient_pieces(net, PIPELINED_CHUNKS)}
    return sorted({*sizes, *whole}), sorted({*PIECE_SIZES, *pieces})


def measure(comm, gpu: bool, sizes=SIZES, log=print, kernels: bool = True, grid=None, nets=()) -> list[dict]:
    """Everything that applies here; rank 0's rows are the ones kept. `grid` = (hidden sizes,
    per-rank batches) at which the step's kernels are timed (default the module's grids); `nets`
    (hidden widths) whose gradients and pipelined pieces the all-reduces are also timed at."""
    hidden, batches = grid or default_grid(gpu)
    sizes, pieces = exchange_sizes(sizes, nets)
    rows = []
    if comm.rank == 0:
        log("CPU GEMM ...")
        rows += cpu_gemm()
    comm.idle_barrier()  # the other ranks wait without taking a core from the GEMM
    if kernels and not gpu:
        log("the reference's step over H x B ...") if comm.rank == 0 else None
        rows += cpu_step_kernels(comm, hidden, batches)
    if comm.size > 1:
        log("MPI all-reduce ...") if comm.rank == 0 else None
        rows += mpi_allreduce(comm, sizes)
        rows += shm_allreduce(comm, sizes)
    if gpu:
        from perflab.train.comm import for_gpu
        from perflab.train.gpu import select_device
        select_device(comm)
        if comm.rank == 0:
            log("GPU GEMM, copies ...")
            rows += gpu_ceilings(sizes)
            if kernels:
                log("the step's kernels over H x B, the host's floor, the staged copies ...")
                rows += (gpu_step_kernels(hidden, batches, progress=True) + gpu_step_floors() + staged_images(batches)
                         + staged_overlap())
        if kernels:
            rows += trainer_floors(comm)
        if comm.size > 1:
            nccl = for_gpu(comm, "nccl")
            rows += nccl_allreduce(nccl, sizes) + nccl_allreduce_graph(nccl, sizes)
            if kernels:
                log("--overlap's GEMM 3 and exchange over H x B ...") if comm.rank == 0 else None
                rows += overlap_exchange(nccl, hidden, batches)
            rows += staged_allreduce(comm, sizes) + pipelined_allreduce(comm, pieces)
            try:
                import cupy as cp
                p2p = for_gpu(comm, "p2p")
                rows += p2p_exchange_update(p2p, sizes)
                if int(cp.cuda.Device().compute_capability) >= HALF_CAPABILITY["bfloat16"]:
                    rows += p2p_exchange_update(p2p, sizes, bf16=True)
            except ConfigError as exc:  # ranks on several nodes, or GPUs without peer access
                log(f"no p2p_exchange_update: {exc}") if comm.rank == 0 else None
    return rows


def size_text(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def summary(rows: list[dict]) -> str:
    """What a ceilings run found, for the terminal: each rate at the size where it peaks (G/s), the
    host's floors of a step (us), the staged copy of a batch (ms) and how many step kernels were
    timed. The CSV keeps every row; a dump of all of them (a thousand on a GPU) buries these."""
    import pandas as pd

    from perflab.analysis.predictor import DW1_GEMM
    df = pd.DataFrame(rows)
    parts = []
    rates = df[df.unit != "s"]
    if len(rates):
        best = rates.loc[rates.groupby(["ceiling", "impl", "dtype", "ranks"], sort=False)["value"].idxmax()]
        shape = best["shape"].fillna("") if "shape" in best else pd.Series("", index=best.index)
        at = shape.where(shape.astype(bool), best["size_bytes"].map(size_text))
        parts.append(best.assign(at=at, peak=best["value"] / 1e9)
                     .rename(columns={"peak": "peak (G/s)"})[["ceiling", "impl", "dtype", "ranks", "at", "peak (G/s)"]]
                     .to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    floors = df[df.ceiling == "step_floor"]
    if len(floors):
        shape = floors["shape"].fillna("").astype(str) if "shape" in floors else pd.Series("", index=floors.index)
        named = floors["impl"] + shape.map(lambda s: f" at {s}" if s else "")  # the epoch overhead's real sizes
        parts.append(floors.assign(us=floors["seconds"] * 1e6, name=named)
                     .rename(columns={"name": "the host's floor of a step"})
                     [["the host's floor of a step", "ranks", "us"]].to_string(index=False,
                                                                           float_format=lambda v: f"{v:.1f}"))
    images = df[df.ceiling == "staged_images"]
    if len(images):
        parts.append("staged copy of a batch (ms): " + ", ".join(f"B={int(b)} {1e3 * s:.3f}"
                                                               for b, s in zip(images["B"], images["seconds"])))
    kernels = df[df.ceiling == "step_kernel"]
    if len(kernels):
        parts.append(f"{len(kernels)} step-kernel timings ({kernels['impl'].nunique()} kernels) at H "
                     f"{sorted(int(h) for h in kernels['H'].unique())} x B {sorted(int(b) for b in kernels['B'].unique())}"
                     + "".join(f"\n{line}" for line in sequence_lines(kernels)))
    overlap = df[df.ceiling == "overlap_exchange"]
    alone = kernels[kernels.impl == DW1_GEMM] if len(kernels) else kernels
    both = overlap.merge(alone, on=["H", "B"], suffixes=("", "_alone")) if len(overlap) and len(alone) else overlap.iloc[:0]
    if len(both):
        ratio = both.seconds / both.seconds_alone
        parts.append(f"--overlap's GEMM 3 with its chunks' all-reduces under it: {ratio.min():.2f}-{ratio.max():.2f}x "
                     f"GEMM 3 alone (median {ratio.median():.2f}, {len(both)} shapes, p={int(both.ranks.iloc[0])})")
    return "\n\n".join(parts)


def sequence_lines(kernels) -> list[str]:
    """Per GEMM, how much longer the step's kernels took one after another than the sum of each timed
    alone (the predictor takes the sequence), over the (H, B') where both were timed."""
    from perflab.analysis.predictor import TENSOR_CORE_STEPS, UPDATE, fused_step, sequence_name
    lines = []
    for gemm in ("cublas", *TENSOR_CORE_STEPS):
        sequence = kernels[kernels.impl == sequence_name(gemm)].set_index(["H", "B"]).seconds
        parts = kernels[kernels.impl.isin(fused_step(gemm) + (UPDATE,))]
        alone = parts.groupby(["H", "B"]).seconds.agg(["sum", "size"])
        alone = alone[alone["size"] == len(fused_step(gemm)) + 1]["sum"]
        ratio = (sequence / alone).dropna()
        if len(ratio):
            lines.append(f"the step in sequence ({gemm}): {ratio.min():.2f}-{ratio.max():.2f}x its kernels alone "
                         f"(median {ratio.median():.2f}, {len(ratio)} shapes)")
        eager = (kernels[kernels.impl == sequence_name(gemm, eager=True)].set_index(["H", "B"]).seconds / sequence).dropna()
        if len(eager):
            lines.append(f"  launched one by one: {eager.min():.2f}-{eager.max():.2f}x the sequence in a graph "
                         f"(median {eager.median():.2f})")
    return lines
