"""Gradient exchange: one interface, interchangeable strategies.

A trainer calls `comm.allreduce(buffer)` (sum over ranks, in place) and never knows how it
is done: `serial` (one rank, nothing to do), `mpi` (host buffers through mpi4py, the seeds'
path; a GPU buffer is staged through the host), `nccl`, `cuda-mpi`, `hierarchical`, `shm`, and
`p2p` (GPUs of one node read each other's gradient: the fused data-parallel trainer's exchange
and update in one kernel, `exchange_update`). Every collective appends a record
{op, strategy, bytes, seconds} so the performance model can turn it into P_mpi.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from perflab.config import ConfigError
from perflab.train.profile import phase
from perflab.train.watchdog import TIMEOUT_S

MPI_LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_ID")
STRATEGIES = ("mpi", "nccl", "nccl-half", "hierarchical", "cuda-mpi", "shm", "p2p")


def launched_by_mpi() -> bool:
    """True under mpiexec/srun: only then is MPI initialized (a plain run stays MPI-free)."""
    return any(v in os.environ for v in MPI_LAUNCH_VARS)


class Serial:
    """One rank: every collective is the identity. The base of every exchange (perflab.train.protocols.Exchange):
    it all-reduces and leaves the update to the trainer; p2p alone exchanges and updates in one launch."""

    strategy = "serial"
    rank, size = 0, 1
    exchanges_and_updates = False

    def __init__(self):
        self.records = []

    @property
    def capturable(self) -> bool:
        """Whether the device all-reduce can sit in a CUDA graph: on one rank there is none; NCCL's and p2p's
        can; a host MPI one (or a CUDA-aware MPI's, which does not follow streams) cannot."""
        return self.size == 1

    def exchange_update(self, params, learning_rate: float, ends, regs, rounded=None) -> None:
        raise ValueError(f"--comm {self.strategy} all-reduces the gradient and the trainer updates after it; "
                         "only --comm p2p exchanges and updates in one kernel")

    def allreduce(self, buf):
        return buf

    def allreduce_scalar(self, value: float) -> float:
        return value

    def allgather(self, obj) -> list:
        return [obj]

    def bcast(self, obj):
        return obj

    def barrier(self):
        pass

    def idle_barrier(self):
        pass

    def abort(self, code: int = 1):
        sys.exit(code)


class MPIComm(Serial):
    """mpi4py over host memory. Device arrays go device -> host -> MPI_Allreduce -> device,
    the seeds' host-staged all-reduce (timed as a whole here; the profiler splits it)."""

    strategy = "mpi"

    def __init__(self, comm=None):
        from mpi4py import MPI
        super().__init__()
        self.MPI = MPI
        self.comm = comm or MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.host = None  # reusable host staging buffer

    def reduce_host(self, host: np.ndarray) -> None:
        """Sum a host buffer over the ranks in place (the strategies differ only here)."""
        self.comm.Allreduce(self.MPI.IN_PLACE, host, op=self.MPI.SUM)

    def allreduce(self, buf):
        start = time.perf_counter()
        if isinstance(buf, np.ndarray):
            with phase("MPI_Allreduce"):
                self.reduce_host(buf)
        else:
            if self.host is None or self.host.shape != buf.shape or self.host.dtype != buf.dtype:
                self.host = np.empty(buf.shape, buf.dtype)
            with phase("cudaMemcpyDeviceToHost"):
                buf.get(out=self.host)
            with phase("MPI_Allreduce"):
                self.reduce_host(self.host)
            with phase("cudaMemcpyHostToDevice"):
                buf.set(self.host)
        self.records.append({"op": "allreduce", "strategy": self.strategy, "rank": self.rank,
                             "ranks": self.size, "bytes": buf.nbytes, "seconds": time.perf_counter() - start})
        return buf

    def allreduce_scalar(self, value: float) -> float:
        return self.comm.allreduce(value, op=self.MPI.SUM)

    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def bcast(self, obj):
        return self.comm.bcast(obj, root=0)

    def barrier(self):
        self.comm.Barrier()

    def idle_barrier(self, poll: float = 0.002):
        """A barrier that sleeps while it waits. MPI's own busy-polls a core, and ranks idle during
        a point on fewer ranks must not take cores from the ones measuring it: a spinning rank
        slows the NumPy points of fewer ranks several times over (docs/DECISIONS.md, D3)."""
        import time
        request = self.comm.Ibarrier()
        while not request.Test():
            time.sleep(poll)

    def abort(self, code: int = 1):
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.5)  # let the process manager forward this rank's last words: Abort kills at once
        self.comm.Abort(code)


class NCCLComm(MPIComm):
    """All-reduce of device buffers with NCCL on the current CUDA stream (capturable in a CUDA
    graph); the NCCL unique id travels over MPI, so it works across nodes too. Host arrays
    and objects still go through MPI."""

    strategy = "nccl"
    capturable = True

    def __init__(self, mpi: MPIComm, half: str | None = None):
        import cupy
        from cupy.cuda import nccl
        super().__init__(mpi.comm)
        self.cupy, self.nccl = cupy, nccl
        uid = self.comm.bcast(nccl.get_unique_id() if self.rank == 0 else None, root=0)
        self.communicator = nccl.NcclCommunicator(self.size, uid, self.rank)
        # bfloat16 travels as its bits in uint16 (perflab's storage of it, kernels.HALF_STORAGE)
        self.types = {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64, "float16": nccl.NCCL_FLOAT16,
                      "uint16": nccl.NCCL_BFLOAT16}
        # --comm nccl-half: an FP32 gradient is rounded to the run's half precision, summed by NCCL in it (half the
        # bytes) and widened back in place; its buffers, one a size, made on first use (before any graph capture)
        self.half, self.half_buffers = half, {}
        if half is not None:
            self.strategy = "nccl-half"

    def allreduce(self, buf):
        if isinstance(buf, np.ndarray):
            return super().allreduce(buf)
        if self.half is not None and buf.dtype == np.float32:
            from perflab import kernels
            held = self.half_buffers.get(buf.size)
            if held is None:
                held = self.half_buffers[buf.size] = self.cupy.empty(buf.size, kernels.HALF_STORAGE[self.half])
            kernels.narrow_copy(buf.reshape(-1), held)
            self.reduce_device(held)
            kernels.widen_copy(held, buf.reshape(-1))
        else:
            self.reduce_device(buf)
        return buf

    def reduce_device(self, buf):
        stream = self.cupy.cuda.get_current_stream()
        with phase("MPI_Allreduce"):  # the seeds' name for the gradient all-reduce, here through NCCL
            self.communicator.allReduce(buf.data.ptr, buf.data.ptr, buf.size, self.types[buf.dtype.name],
                                        self.nccl.NCCL_SUM, stream.ptr)
        self.records.append({"op": "allreduce", "strategy": self.strategy, "rank": self.rank,
                             "ranks": self.size, "bytes": buf.nbytes, "seconds": float("nan")})  # async
        return buf


LAZY_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess
P2P_TRAP_AFTER_S = 10  # the p2p kernel's own wait: this long past the watchdog's timeout, it traps
P2P_KEPT = []  # the memory peers map, for the process's life: a peer may still read or signal into it


class P2PComm(MPIComm):
    """--comm p2p, GPUs of one node: each rank maps every peer's gradient buffer and flags (CUDA
    IPC) and one kernel reads the peers' gradients over NVLink (a bfloat16 run: their BF16 copies), sums them in rank order and
    applies the SGD update (perflab/kernels/p2p.cu; from three ranks two-shot, each summing and
    updating its slice, then copying the peers'); it is faster than NCCL's all-reduce and the update kernel after
    it (docs/DECISIONS.md, D15). It
    serves the fused data-parallel trainer, which calls `register` once, `exchange_update` where
    others all-reduce and update, and `read_wait` before its backward writes the gradient again.
    Host arrays and scalars still go through MPI."""

    strategy = "p2p"
    capturable = exchanges_and_updates = True

    def __init__(self, mpi: MPIComm, timeout_s: float):
        import cupy as cp
        super().__init__(mpi.comm)
        self.cp = cp
        # a peer silent this long is taken for dead: the waiting kernel says so once and traps, so the next CUDA
        # call raises; the host's watchdog (perflab.train.watchdog) speaks first, naming the epoch and batch
        self.timeout_ns = int((timeout_s + P2P_TRAP_AFTER_S) * 1e9)
        node = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED)
        on_one_node = self.comm.allreduce(node.Get_size()) == self.size * self.size
        node.Free()
        if not on_one_node:
            raise ConfigError("--comm p2p reads the gradients of the GPUs of one node; these ranks span several: "
                              "use --comm nccl")
        me = cp.cuda.Device().id
        blind = [d for d in self.comm.allgather(me) if d != me and not cp.cuda.runtime.deviceCanAccessPeer(me, d)]
        if self.comm.allreduce(len(blind)):
            raise ConfigError(f"--comm p2p needs peer access between every pair of GPUs; GPU {me} has none to GPU(s) "
                              f"{blind} (on some rank): use --comm nccl")
        from perflab.kernels import p2p
        self.kernels, self.blocks = p2p, p2p.blocks()  # looked up once: an eager step launches them every batch
        sms = self.comm.allgather(self.blocks)  # a block of the exchange speaks with its twin on every peer
        if len(set(sms)) > 1:
            raise ConfigError(f"--comm p2p pairs the exchange's blocks across GPUs, which needs GPUs of one kind; these "
                              f"have {sorted(set(sms))} multiprocessors: use --comm nccl")
        self.G = self.halves = self.own_half = self.made = None

    def own_array(self, size: int, dtype):
        """A zeroed device array that starts its own allocation (an IPC handle maps a whole
        allocation, not a pool's slice), kept for the process's life (P2P_KEPT)."""
        cp = self.cp
        mem = cp.cuda.memory.Memory(max(1, size * np.dtype(dtype).itemsize))
        P2P_KEPT.append(mem)
        out = cp.ndarray(size, dtype, memptr=cp.cuda.MemoryPointer(mem, 0))
        out.fill(0)
        return out

    def register(self, size: int, dtype, bf16_copy: bool = False):
        """The gradient buffer (size values, the last the batch's CE sum) in memory every peer maps;
        returned for the trainer to write its gradient into (collective). bf16_copy (a bfloat16 run): the peers read a BF16
        copy of it instead, which the exchange makes (half the bytes over NVLink; docs/DECISIONS.md, D64)."""
        cp, runtime = self.cp, self.cp.cuda.runtime
        self.G = self.own_array(size, dtype)
        self.flags_own = self.own_array(self.kernels.FLAG_SLOTS * self.blocks * self.size, np.uint32)
        self.rounds = cp.zeros(self.blocks, np.uint32)
        self.ce = cp.zeros(1, dtype)  # the ranks' CE sums added (G's own slot is the peers' to read)
        own = [self.G, self.flags_own]
        if bf16_copy:  # the CE sum stays FP32, in two slots past the values' last whole vector
            own.append(self.own_array(self.kernels.ce_slot(size - 1) + self.kernels.BF16_VALUES, np.uint16))
        handles = self.comm.allgather([runtime.ipcGetMemHandle(a.data.ptr) for a in own])
        mapped = [[a.data.ptr for a in own] if r == self.rank else
                  [runtime.ipcOpenMemHandle(h, LAZY_PEER_ACCESS) for h in handles[r]] for r in range(self.size)]
        self.grads, self.flags = (cp.asarray([m[i] for m in mapped], np.uint64) for i in (0, 1))
        self.halves = cp.asarray([m[2] for m in mapped], np.uint64) if bf16_copy else None
        self.own_half = own[2] if bf16_copy else None
        self.made = cp.zeros((0, 2), np.int64)  # none of the copy is written by the GEMMs until in_copy says so
        self.comm.Barrier()
        return self.G

    def in_copy(self, grads: list, shapes, index) -> list:
        """grads (views of G laid out as `shapes`) with those at `index` that start and end on a whole 8-value vector
        moved into this rank's BF16 copy: their GEMMs write them in BF16 there, and the exchange narrows only the
        rest, so that the FP32 values of most of a gradient are neither stored nor read again (docs/DECISIONS.md, D81)."""
        made = self.kernels.made_in_bf16(shapes, index, self.G.size - 1)
        self.made = self.cp.asarray(list(made.values()), np.int64).reshape(-1, 2)
        width = self.kernels.BF16_VALUES
        return [self.own_half[made[i][0] * width:made[i][1] * width].reshape(s) if i in made else g
                for i, (g, s) in enumerate(zip(grads, shapes))]

    def exchange_update(self, params, learning_rate: float, ends, regs, rounded=None) -> None:
        """On the current stream: params -= lr (every rank's gradient summed + regs params), the CE sums into self.ce;
        rounded (a BF16 copy registered): the new params rounded into it too."""
        n = self.G.size - 1
        with phase("MPI_Allreduce"):  # the seeds' name for the gradient exchange; here it holds the update too
            if self.halves is None:
                self.kernels.exchange_update(params, self.grads, self.rank, n, learning_rate, ends, regs, self.ce,
                                             self.flags, self.rounds, self.timeout_ns, self.blocks)
            else:
                self.kernels.exchange_update_bf16(params, rounded, self.halves, self.grads, self.rank, n, learning_rate,
                                                  ends, regs, self.ce, self.flags, self.rounds, self.timeout_ns,
                                                  self.blocks, self.made)
        self.records.append({"op": "allreduce", "strategy": self.strategy, "rank": self.rank, "ranks": self.size,
                             "bytes": self.G.nbytes if self.halves is None else 2 * n, "seconds": float("nan")})  # async

    def read_wait(self) -> None:
        """On the current stream: hold until every peer has read this rank's last gradient."""
        self.kernels.read_wait(self.rank, self.flags, self.rounds, self.timeout_ns, self.blocks)

    def allreduce(self, buf):
        if isinstance(buf, np.ndarray):
            return super().allreduce(buf)
        raise ValueError("--comm p2p exchanges the fused data-parallel trainer's gradient (exchange_update), "
                         "not other device arrays: use --comm nccl")


def cuda_aware_mpi() -> tuple[bool, str]:
    """(whether this process's MPI can all-reduce GPU buffers itself, the library's name), from
    the library's own runtime query MPIX_Query_cuda_support (Open MPI, MPICH); False where the
    library has no such query."""
    import ctypes

    from mpi4py import MPI
    name = MPI.Get_library_version().splitlines()[0].strip()
    for soname in ("libmpi.so.40", "libmpi.so.12", "libmpi.so"):  # Open MPI, MPICH: the one mpi4py loaded
        try:
            query = getattr(ctypes.CDLL(soname), "MPIX_Query_cuda_support", None)
        except OSError:
            continue
        if query is not None:
            query.restype = ctypes.c_int
            return bool(query()), name
    return False, name


class CUDAAwareMPIComm(MPIComm):
    """All-reduce of device buffers by a CUDA-aware MPI library (no host staging). MPI does not
    follow CUDA streams, so the current stream is synchronized first."""

    strategy = "cuda-mpi"

    def allreduce(self, buf):
        if isinstance(buf, np.ndarray):
            return super().allreduce(buf)
        import cupy
        start = time.perf_counter()
        cupy.cuda.get_current_stream().synchronize()
        with phase("MPI_Allreduce"):
            self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        self.records.append({"op": "allreduce", "strategy": self.strategy, "rank": self.rank,
                             "ranks": self.size, "bytes": buf.nbytes, "seconds": time.perf_counter() - start})
        return buf


def require_cuda_aware_mpi():
    """Raise, naming the library, unless its MPI says it is CUDA-aware."""
    ok, name = cuda_aware_mpi()
    if not ok:
        raise ValueError(f"--comm cuda-mpi needs a CUDA-aware MPI, and this one ({name}) says it is not "
                         "(MPIX_Query_cuda_support); use --comm nccl, or an MPI built with CUDA")


def node_of(comm) -> tuple[int, int]:
    """(node index, ranks on that node): the MPI shared-memory split, or pretend nodes of
    PERFLAB_RANKS_PER_NODE consecutive ranks (to test multi-node logic on one machine)."""
    per_node = int(os.environ.get("PERFLAB_RANKS_PER_NODE", "0") or 0)
    if per_node > 0:
        return comm.rank // per_node, per_node
    node = comm.comm.Split_type(comm.MPI.COMM_TYPE_SHARED)
    leader = comm.comm.allgather(comm.rank if node.Get_rank() == 0 else -1)
    index = sorted(r for r in leader if r >= 0).index(node.bcast(comm.rank if node.Get_rank() == 0 else None, root=0))
    size = node.Get_size()
    node.Free()
    return index, size


class HierarchicalComm(MPIComm):
    """The lecture's hybrid all-reduce: reduce inside each node to its leader, all-reduce
    across the node leaders, broadcast inside the node. Inter-node traffic is one buffer per
    node instead of one per rank: 2(n-1)/n * S per leader for n nodes. Host buffers; a device
    buffer is staged through the host as in MPIComm."""

    strategy = "hierarchical"

    def __init__(self, mpi: MPIComm):
        super().__init__(mpi.comm)
        node, _ = node_of(self)
        self.node = self.comm.Split(node, self.rank)
        is_leader = self.node.Get_rank() == 0
        self.leaders = self.comm.Split(0 if is_leader else self.MPI.UNDEFINED, self.rank)

    def reduce_host(self, host):
        MPI = self.MPI
        if self.node.Get_rank() == 0:
            self.node.Reduce(MPI.IN_PLACE, host, op=MPI.SUM, root=0)
            self.leaders.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
        else:
            self.node.Reduce(host, None, op=MPI.SUM, root=0)
        self.node.Bcast(host, root=0)


class SharedMemoryComm(MPIComm):
    """A host all-reduce through memory every rank of the node maps (MPI_Win_allocate_shared),
    for ranks on one node: each rank copies its buffer into its own slot, sums its share of every
    slot with NumPy into its slot, and reads everyone's summed share back; three barriers, no
    message. MPI_Allreduce moves the data through its own buffers, far below memory speed (docs/DECISIONS.md,
    D16); this touches each byte a few times at memory speed. Each
    share is summed by one rank in rank order, so every rank gets the same bits."""

    strategy = "shm"

    def __init__(self, mpi: MPIComm):
        super().__init__(mpi.comm)
        _, on_node = node_of(self)  # PERFLAB_RANKS_PER_NODE pretends nodes, as for hierarchical
        if on_node != self.size:
            raise ConfigError(f"--comm shm sums through memory the ranks share: it needs every rank on one node, but "
                              f"this node holds {on_node} of {self.size} ranks; use --comm mpi or hierarchical")
        self.node = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED)
        self.window, self.slots = None, []

    def reserve(self, nbytes: int) -> None:
        """A slot of nbytes (or more) for every rank, mapped by all (collective)."""
        if self.window is not None and self.slots[0].nbytes >= nbytes:
            return
        if self.window is not None:
            self.window.Free()
        self.window = self.MPI.Win.Allocate_shared(nbytes, 1, comm=self.node)
        self.slots = []
        for r in range(self.size):
            buf, _ = self.window.Shared_query(r)
            self.slots.append(np.frombuffer(buf, np.uint8, nbytes))

    def reduce_host(self, host: np.ndarray) -> None:
        flat = host.reshape(-1)
        self.reserve(flat.nbytes)
        slots = [s[:flat.nbytes].view(flat.dtype) for s in self.slots]
        mine = slots[self.rank]
        mine[...] = flat
        self.node.Barrier()  # every slot holds its rank's buffer
        lo, hi = share(flat.size, self.size, self.rank)
        for r in range(self.size):
            if r != self.rank:
                np.add(mine[lo:hi], slots[r][lo:hi], out=mine[lo:hi])
        self.node.Barrier()  # every share is summed, in its owner's slot
        for r in range(self.size):
            a, b = share(flat.size, self.size, r)
            flat[a:b] = slots[r][a:b]
        self.node.Barrier()  # nobody reads a slot its owner will overwrite next time


def with_strategy(comm, strategy: str):
    """The exchange strategy for the host path (mpi, hierarchical, shm) on top of the MPI world."""
    if strategy not in STRATEGIES:
        raise ValueError(f"--comm must be one of {STRATEGIES}, got {strategy!r}")
    if strategy in ("cuda-mpi", "p2p"):
        raise ValueError(f"--comm {strategy} exchanges GPU buffers: it needs --backend cupy")
    if comm.size == 1 or strategy in ("mpi", "nccl"):
        return comm
    return SharedMemoryComm(comm) if strategy == "shm" else HierarchicalComm(comm)


def world():
    """The communicator for this process: MPI when launched by mpiexec, else Serial."""
    return MPIComm() if launched_by_mpi() else Serial()


def sub_world(world, p: int):
    """The first p ranks of the MPI world as a communicator (None on the others)."""
    if world.size == 1:
        return world if p == 1 else None
    if p > world.size:
        raise ValueError(f"point needs p={p} ranks but only {world.size} are running; start more "
                         f"(mpiexec -n {p} or ipcluster start -n {p} --engines=mpi)")
    color = 0 if world.rank < p else world.MPI.UNDEFINED
    sub = world.comm.Split(color, world.rank)
    if sub == world.MPI.COMM_NULL:
        return None
    return MPIComm(sub)


def on_first_ranks(p: int, work):
    """work(comm) on the first p ranks of the MPI world while the others wait without spinning; rank 0's
    result, None elsewhere. Every rank reaches the closing barrier even where the work raised (through
    ipyparallel engines, one engine's exception left the others waiting at it forever); the error is
    raised again after it, on the ranks that had it."""
    w = world()
    comm = sub_world(w, p)
    result = error = None
    if comm is not None:
        try:
            result = work(comm)
        except Exception as exc:
            error = exc
        if error is None and comm is not w:  # a sub-communicator of its own (sub_world)
            comm.comm.Free()
    w.idle_barrier()
    if error is not None:
        raise error
    return result if comm is not None and comm.rank == 0 else None


def for_gpu(comm, strategy: str, timeout_s: float = TIMEOUT_S, half: str | None = None):
    """The device-side strategy on top of the MPI world (after each rank picked its GPU); timeout_s: the
    watchdog's, which the p2p kernel's own wait outlasts; half: the run's half precision, which nccl-half
    exchanges its gradients in."""
    if strategy not in STRATEGIES:
        raise ValueError(f"--comm must be one of {STRATEGIES}, got {strategy!r}")
    if comm.size == 1 or strategy == "mpi":
        return comm
    if strategy == "hierarchical":
        return HierarchicalComm(comm)
    if strategy == "shm":
        return SharedMemoryComm(comm)
    if strategy == "cuda-mpi":
        require_cuda_aware_mpi()
        return CUDAAwareMPIComm(comm.comm)
    if strategy == "p2p":
        return P2PComm(comm, timeout_s)
    if strategy == "nccl-half" and half is None:
        raise ValueError("--comm nccl-half exchanges the gradients in the run's half precision: it needs --dtype "
                         "bfloat16 or float16 (or use --comm nccl)")
    return NCCLComm(comm, half if strategy == "nccl-half" else None)


def share(n: int, parts: int, part: int) -> tuple[int, int]:
    """[start, stop) of part `part` when n items are split into `parts` contiguous pieces whose
    sizes differ by at most one (the first n % parts pieces get the extra item)."""
    base, extra = divmod(n, parts)
    start = part * base + min(part, extra)
    return start, start + base + (1 if part < extra else 0)
