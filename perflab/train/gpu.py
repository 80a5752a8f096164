"""GPU training: the seeds' step on one GPU per rank, fused and graph-captured.

Same math as perflab.train.model (checked against it), laid out for speed:
  forward   z1 = W1 X                          one GEMM
            a1 = sigmoid(z1 + b1), z2 = W2 a1  one pass over z1 (a1 written in place, z2 in row-block sums)
            delta = (softmax(z2 + b2) - Y)/B   one kernel, with the per-sample CE for the loss
  backward  dW2 = delta a1^T, db2 = rowsum(delta), da1 = W2^T delta, dz1 = da1 o a1 o (1 - a1),
            dW1 = dz1 X^T, db1 = rowsum(dz1)  (no input gradient is needed)
  exchange  one all-reduce of one fused gradient buffer (NCCL on the GPU, or staged via MPI; with
            --comm p2p the peers' buffers read over NVLink, summed and applied in one kernel)
  step      p <- p - lr (g + reg p) for every parameter in one launch
Parameters and gradients each live in one flat device buffer. In `resident` mode the data
sit on the GPU and each batch's whole step is captured once as a CUDA graph and replayed (on
several GPUs forward and backward only; the all-reduce and update launch after it), and where
batches come in order a whole epoch is one graph (on several GPUs the NCCL all-reduces inside);
in `staged` mode (the seeds' path) each batch is copied host -> device every iteration into one
device buffer, and the step after the copy replays its graph the same way.
"""
from __future__ import annotations

import numpy as np

from perflab import kernels
from perflab.config import MODES, OVERLAP_CHUNKS, Config, ConfigError
from perflab.train import model, profile
from perflab.train.loop import Sequential
from perflab.train.parallel import check_batch_split, gather_shards, local_part, sharded_logits
from perflab.train.profile import phase


class GPUError(ConfigError):
    """The GPU run cannot be set up as asked; the message names the sizes or devices."""


def select_device(comm) -> int:
    """One GPU per rank, by node-local rank (never global rank modulo the GPU count)."""
    import cupy as cp
    count = cp.cuda.runtime.getDeviceCount()
    local_rank, local_size = 0, 1
    if comm.size > 1:
        node = comm.comm.Split_type(comm.MPI.COMM_TYPE_SHARED)
        local_rank, local_size = node.Get_rank(), node.Get_size()
        node.Free()
    if local_size > count:
        raise GPUError(f"{local_size} ranks on this node but {count} GPU(s) visible "
                       f"(CUDA_VISIBLE_DEVICES={__import__('os').environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                       "start at most one rank per GPU")
    cp.cuda.Device(local_rank).use()
    return local_rank


def check_memory(cfg: Config, resident: bool) -> None:
    """Fail early, naming the sizes, when the run cannot fit in GPU memory."""
    import cupy as cp
    free, total = cp.cuda.runtime.memGetInfo()
    item = np.dtype(cfg.dtype).itemsize
    sizes = cfg.layer_sizes
    params = sum(a * b + a for a, b in zip(sizes[1:], sizes[:-1]))
    activations = cfg.batch_size * sum(sizes) * 3
    data = cfg.input_size * (cfg.train_size + cfg.test_size) if resident else cfg.input_size * cfg.batch_size
    need = (3 * params + activations + data) * item
    if need > free:
        raise GPUError(f"needs about {need / 2**30:.2f} GiB of GPU memory (N={cfg.train_size}, B={cfg.batch_size}, "
                       f"layers {list(sizes)}, {cfg.dtype}) but {free / 2**30:.2f} of {total / 2**30:.2f} GiB are free")


class FusedGPU(Sequential):
    """Data-parallel (or single-GPU) trainer for one hidden layer on CuPy with perflab kernels."""

    name = "data"

    def __init__(self, cfg: Config, X, y, comm, mode="resident", gemm="cublas", graphs=True, pinned=False,
                 fuse_output=True, fuse_backward=True, overlap=False, overlap_chunks=OVERLAP_CHUNKS):
        import cupy as cp
        if len(cfg.hidden_sizes) != 1:
            raise GPUError("the fused GPU trainer takes one hidden layer; use --gemm cublas-generic for deeper nets")
        if mode not in MODES[:2]:
            raise GPUError(f"FusedGPU runs modes {MODES[:2]}, got {mode!r} (pipelined: perflab.train.pipelined.Pipelined)")
        self.cp, self.cfg, self.comm, self.mode, self.variant = cp, cfg, comm, mode, gemm
        host_params, bmax = self.shard()
        # fuse_backward: backward GEMMs 1 and 2, sigmoid' and the bias sums in one pass over a1.
        # fuse_output: GEMM 1 leaves z1 = W1 X; bias + sigmoid (in place) and forward GEMM 2 are one pass
        # over it, then the softmax: 0.10 ms where the three kernels it replaces take 0.15 (H100, H=2048,
        # B=12000; results/nvidia-h100-80gb-hbm3/bench_step.csv). A first version made a1 on load in both
        # fused kernels and never stored it: 3x slower, latency-bound re-reading W2 through L1 for every
        # row (results/nvidia-h100-80gb-hbm3/bench_step_fused_forward.csv, ncu_output_forward.txt).
        self.fuse_backward = fuse_backward and cfg.num_classes <= kernels.MAX_FUSED_CLASSES
        self.fuse_output = fuse_output and cfg.num_classes <= kernels.MAX_FUSED_CLASSES
        # staged: the copy lands in one device buffer, so the step after it replays a graph too
        self.graphs = graphs and (mode == "staged" or not cfg.shuffle)
        (H, D), C = host_params[0].shape, cfg.num_classes
        dtype = np.dtype(cfg.dtype)
        self.P = cp.asarray(np.concatenate([p.ravel() for p in host_params]))
        # --comm p2p: the gradient lives where the peers map it, and one kernel exchanges and updates
        self.peer_exchange = hasattr(comm, "exchange_update")
        # + 1 slot: the batch's CE sum
        self.G = comm.register(self.P.size + 1, dtype) if self.peer_exchange else cp.zeros(self.P.size + 1, dtype=dtype)
        self.ce_sum = comm.ce if self.peer_exchange else self.G[-1:]  # the CE summed over ranks, once exchanged
        shapes = [p.shape for p in host_params]
        self.params = self.views(self.P, shapes)
        self.grads = self.views(self.G, shapes)
        sizes = np.cumsum([int(np.prod(s)) for s in shapes])
        self.ends = cp.asarray(sizes, dtype=np.int64)
        self.regs = cp.asarray([cfg.reg, 0.0] * (len(shapes) // 2), dtype=dtype)
        # activations as flat buffers: a batch of n takes a contiguous (rows x n) view of each
        self.a1, self.da1 = cp.empty(H * bmax, dtype), cp.empty(H * bmax, dtype)
        # x3tf32: dz1's TF32 small parts, beside its big ones in da1 (written by the fused backward pass)
        self.da1_small = cp.empty(H * bmax, dtype) if gemm == "x3tf32" else None
        self.da1_split = False
        self.z2, self.delta = cp.empty(C * bmax, dtype), cp.empty(C * bmax, dtype)
        self.ce = cp.empty(bmax, dtype)
        # the loss's L2 term, made in the step (before its update, as the reference's J) with its scratch
        self.penalty, self.l2_part = cp.zeros(1, dtype), cp.empty(kernels.L2_BLOCKS, dtype)
        self.loss_host = pinned_copy(np.zeros(2, dtype))  # the CE sum and the L2 term, read by batch_loss
        self.part = cp.empty(kernels.output_backward_partials(H, bmax, C), dtype) if self.fuse_backward else None
        self.part_forward = cp.empty(kernels.output_layer_partials(H, bmax, C), dtype) if self.fuse_output else None
        # the tile kernels' workspace for split-K and stream-K (allocated here: never inside a graph capture)
        self.work = kernels.workspace(H, max(D, bmax), dtype) if gemm in kernels.TILED_VARIANTS else None
        if mode == "resident":
            self.X, self.y = cp.asarray(X), cp.asarray(y)
            if gemm in kernels.WGMMA_VARIANTS:  # the images' K-major copies and TF32 splits, made once
                kernels.wgmma.constant(self.X)
                self.constant_images = self.X
        else:
            self.X = X if not pinned else pinned_copy(X)
            self.y = y
            self.Xdev = cp.empty((D, bmax), dtype, order="F")
            self.ydev = cp.empty(bmax, np.int64)
        self.stream = cp.cuda.Stream(non_blocking=True)
        # the lecture's overlap (NCCL only: a host MPI exchange blocks the host anyway)
        self.overlap = overlap and comm.size > 1 and getattr(comm, "strategy", "") == "nccl"
        if self.overlap:
            self.comm_stream = cp.cuda.Stream(non_blocking=True)
            self.handoff = cp.cuda.Event(disable_timing=True)
            self.chunks = row_chunks(H, overlap_chunks)
        # Whether the exchange and the update are in a step's graph too, a batch at a time (an epoch's
        # graph holds them whenever the exchange is capturable). On several GPUs without --overlap they
        # launch after it: as fast as capturing them at H = 2048 and faster at H = 512 (two H200); one
        # graph an epoch with NCCL inside was faster still at H = 512 on two H100 (3.67 ms an epoch
        # against 3.91: results/nvidia-h100-80gb-hbm3/scaling_ffa61be/). With --overlap the NCCL
        # all-reduces of the chunks must be inside: launched one by one between the GEMM 3 chunks they
        # were 1.2x (H = 2048) to 6x (H = 512) slower (results/nvidia-h200/nccl_graph_capture.log).
        # A host MPI exchange cannot be captured at all.
        self.whole_graph = comm.size == 1 or self.overlap
        self.capturable = capturable_exchange(comm)
        self.epochs_graphed = 0  # epochs run as one CUDA graph (a sweep row says whether its epochs were)
        self.cache = {}
        self.epoch_graphs = True  # one graph an epoch where graphs_an_epoch allows (off: a graph a batch)
        self.tuned = set()  # GEMM operand layouts already tuned
        self.want_loss = True

    def shard(self):
        """(this rank's initial parameters on the host, the most samples a rank's step takes):
        data parallel replicates the parameters and splits the batch."""
        check_batch_split(self.cfg, self.comm.size)
        return model.init_params(self.cfg.layer_sizes, self.cfg.dtype, self.cfg.seed), -(-self.cfg.batch_size // self.comm.size)

    def local(self, index):
        """This rank's samples of a global batch."""
        return local_part(index, self.comm.rank, self.comm.size)

    @staticmethod
    def views(buffer, shapes):
        out, offset = [], 0
        for s in shapes:
            n = int(np.prod(s))
            out.append(buffer[offset:offset + n].reshape(s))
            offset += n
        return out

    def gemm(self, a, b, out, bias=None):
        a_small = self.small_part(a) if self.da1_split else None
        if self.variant in kernels.TUNABLE_VARIANTS:
            shape = (a.shape, a.strides, b.shape, b.strides)
            if shape not in self.tuned and not self.cp.cuda.get_current_stream().is_capturing():
                kernels.tune(a, b, out, self.variant, self.work, a_small=a_small)  # once per shape, in the first step
                self.tuned.add(shape)
        return kernels.gemm(a, b, out=out, bias=bias, variant=self.variant, work=self.work, a_small=a_small)

    def small_part(self, a):
        """The view of da1_small at a's place in da1, where a is a view of da1, else None."""
        offset = a.data.ptr - self.da1.data.ptr
        if not 0 <= offset < self.da1.nbytes:
            return None
        flat = self.da1_small[offset // self.da1.itemsize:]
        return self.cp.lib.stride_tricks.as_strided(flat, a.shape, a.strides)

    def step(self, Xb, yb, global_b: int, want_loss: bool):
        """Enqueue one whole training step on the current stream."""
        self.gradients(Xb, yb, global_b, want_loss)
        self.exchange_and_update()

    def exchange_and_update(self):
        if self.peer_exchange:
            self.comm.exchange_update(self.P, self.cfg.learning_rate, self.ends, self.regs)
            return
        if self.comm.size > 1 and not self.overlap:
            self.comm.allreduce(self.G)
        self.update()

    def update(self):
        with phase("step"):
            kernels.sgd_update(self.P, self.G[:-1], self.cfg.learning_rate, self.ends, self.regs)

    def gradients(self, Xb, yb, global_b: int, want_loss: bool):
        """Enqueue forward and backward into G (capturable on one GPU; with --overlap, the
        exchange of G's chunks too)."""
        cp = self.cp
        W1, b1, W2, b2 = self.params
        dW1, db1, dW2, db2 = self.grads
        n = Xb.shape[1]
        H, C = W1.shape[0], W2.shape[0]
        a1, da1 = self.a1[:H * n].reshape(H, n), self.da1[:H * n].reshape(H, n)
        z2, delta = self.z2[:C * n].reshape(C, n), self.delta[:C * n].reshape(C, n)
        fused = self.fuse_output and not profile.ACTIVE  # phases stay separate when profiling
        fused_backward = self.fuse_backward and not profile.ACTIVE
        ce = self.ce[:n] if want_loss else None
        with phase("forward"):
            if fused:  # z1 into a1's buffer; bias + sigmoid (in place) + forward GEMM 2 in one pass, softmax
                self.gemm(W1, Xb, a1)
                kernels.output_layer(W2, b1, b2, a1, yb, delta, global_b, self.part_forward, ce)
            else:
                with phase("forward GEMM 1"):
                    self.gemm(W1, Xb, a1, bias=b1)          # + bias + sigmoid (in the epilogue)
                with phase("forward GEMM 2"):
                    self.gemm(W2, a1, z2)
                self.combine_logits(z2)
                kernels.softmax_xent_grad(z2, b2, yb, delta, global_b, ce)
        with phase("backward"):
            if self.peer_exchange:  # the peers have read the last step's gradient before this one overwrites it
                self.comm.read_wait()
            kernels.row_sum(delta, db2)
            # x3tf32: the fused pass writes dz1's TF32 big and small parts, which backward GEMM 3 reads as they are
            self.da1_split = fused_backward and self.da1_small is not None
            if fused_backward:  # backward GEMMs 1 and 2 + sigmoid' + db1 in one pass over a1
                kernels.output_backward(W2, delta, a1, da1, dW2, db1, self.part,
                                        self.da1_small[:H * n].reshape(H, n) if self.da1_split else None)
            else:
                with phase("backward GEMM 1"):
                    self.gemm(delta, a1.T, dW2)
                with phase("backward GEMM 2"):
                    self.gemm(W2.T, delta, da1)
                kernels.sigmoid_backward(da1, a1)
                kernels.row_sum(da1, db1)
            if want_loss:  # the CE slot is all-reduced with the gradients; stale when unused
                cp.sum(self.ce[:n], out=self.G[-1:].reshape(()))
                kernels.l2_penalty(self.P, self.ends, self.regs, self.l2_part, self.penalty.reshape(()))
            self.backward_gemm3(da1, Xb, dW1)

    def combine_logits(self, z2):
        """z2 = W2 a1 holds the whole batch's logits here (model parallel sums its ranks' parts)."""

    def backward_gemm3(self, da1, Xb, dW1):
        """dW1 = dz1 X^T, the step's last GEMM (in chunks, each exchanged as it is done, with --overlap)."""
        if self.overlap:
            overlapped_gemm3(self.gemm, self.comm.allreduce, da1, Xb, dW1, self.G, self.chunks, self.comm_stream,
                             self.handoff)
        else:
            with phase("backward GEMM 3"):
                self.gemm(da1, Xb.T, dW1)

    def batch(self, index):
        part = self.local(index)
        global_b = (index.stop - index.start) if isinstance(index, slice) else len(index)
        want = self.want_loss
        with self.stream:
            if self.mode == "staged":
                n = (part.stop - part.start) if isinstance(part, slice) else len(part)
                Xb, yb, key = self.Xdev[:, :n], self.ydev[:n], ("staged", n, want)
                with phase("copying images host -> device"):
                    Xb.set(np.asfortranarray(self.X[:, part]), stream=self.stream)
                    yb.set(np.ascontiguousarray(self.y[part]), stream=self.stream)
            else:
                Xb, yb = self.X[:, part], self.y[part]
                key = (part.start, part.stop, want) if isinstance(part, slice) else None
            if not self.graphs or profile.recording():  # a graph cannot be timed phase by phase
                self.step(Xb, yb, global_b, want)
            else:
                whole = self.whole_graph
                self.replay(key, self.step if whole else self.gradients, Xb, yb, global_b, want)
                if not whole:
                    self.exchange_and_update()
        return self.batch_loss(global_b) if want else None

    def graphs_an_epoch(self, batches) -> bool:
        """Whether `epoch` may run these batches as one graph: data resident, batches in order
        (slices), steps graphed, the exchange capturable (one GPU, or NCCL: the all-reduces inside
        the graph, no host launch between steps) and nothing recording phases."""
        return (self.epoch_graphs and self.graphs and self.capturable and self.mode == "resident"
                and all(isinstance(i, slice) for i in batches) and not profile.recording())

    def epoch(self, batches, want_loss: bool):
        """Every batch's step as one CUDA graph, captured on first use; the loss (when wanted) at the
        last batch, returned. One launch an epoch where a graph a batch paid the host 25-70 us each,
        which a fast step waits on: the whole-epoch scan of JAX, the fastest peer, does the same."""
        with self.stream:
            self.replay(self.epoch_key(batches, want_loss), self.steps, batches, want_loss)
        self.epochs_graphed += 1
        return self.batch_loss(batches[-1].stop - batches[-1].start) if want_loss else None

    @staticmethod
    def epoch_key(batches, want_loss: bool) -> tuple:
        """The cache key of the epoch graph of these batches (slices)."""
        return ("epoch", tuple((i.start, i.stop) for i in batches), want_loss)

    def steps(self, batches, want_loss: bool):
        for k, index in enumerate(batches):
            part = self.local(index)
            self.step(self.X[:, part], self.y[part], index.stop - index.start, want_loss and k + 1 == len(batches))

    def replay(self, key, run, *args):
        """Launch the CUDA graph of run(*args) on self.stream, captured on first use."""
        graph = self.cache.get(key)
        if graph is None:
            saved = self.P.copy()  # a warm-up pass loads every kernel before capture...
            run(*args)
            self.P[...] = saved    # ...and is undone, so the replay below is the only step
            self.stream.begin_capture()
            run(*args)
            graph = self.cache[key] = self.stream.end_capture()
        graph.launch(self.stream)

    def close(self):
        """Free the CUDA graphs. They must go before the NCCL communicator whose all-reduces they
        hold: destroying that communicator first hangs in ncclCommDestroy (NCCL 2.28, two H200:
        results/nvidia-h200/nccl_graph_capture.log), and a trainer's attributes are freed in the order they
        were set, the comm before the graphs."""
        getattr(self, "cache", {}).clear()  # (none yet when __init__ failed)
        images = self.__dict__.pop("constant_images", None)  # once, though close() runs again as __del__
        if images is not None:
            kernels.wgmma.forget(images)

    __del__ = close

    def loss_parts(self) -> tuple[float, float]:
        """The last step's CE sum and L2 term, copied on the stream into pinned memory and read once
        it is done: 17-26 us where two CuPy scalar reads after a synchronize took 45-72 (one H100,
        experiments/predictor/logs/loss_read_h100.jsonl), at every loss fit asks for."""
        copy, size = self.cp.cuda.runtime.memcpyAsync, self.loss_host.itemsize
        for k, src in enumerate((self.ce_sum, self.penalty)):
            copy(self.loss_host.ctypes.data + k * size, src.data.ptr, size,
                 self.cp.cuda.runtime.memcpyDeviceToHost, self.stream.ptr)
        self.stream.synchronize()
        return float(self.loss_host[0]), float(self.loss_host[1])

    def batch_loss(self, global_b: int) -> float:
        ce, penalty = self.loss_parts()
        return ce / global_b + penalty

    def predict(self, X):
        with self.stream:
            out = model.predict(self.params, self.cp.asarray(X))
        self.stream.synchronize()
        return out

    def full_params(self) -> list:
        self.stream.synchronize()
        return [p.get() for p in self.params]

    def sync(self):
        self.stream.synchronize()


def capturable_exchange(comm) -> bool:
    """Whether comm's all-reduce can sit in a CUDA graph: none on one rank, NCCL's and p2p's can; a
    host MPI one (or a CUDA-aware MPI's, which does not follow streams) cannot."""
    return comm.size == 1 or getattr(comm, "strategy", "") in ("nccl", "p2p")


def row_chunks(H: int, k: int) -> list[tuple[int, int]]:
    """[r0, r1) of dW1's H rows in k chunks (the last one shorter where k does not divide H)."""
    rows = -(-H // k)
    return [(r, min(r + rows, H)) for r in range(0, H, rows)]


def overlapped_gemm3(gemm, allreduce, da1, Xb, dW1, G, chunks, side, handoff):
    """--overlap's backward GEMM 3: dW1 = dz1 X^T in row chunks on the current stream, the all-reduce
    of each finished chunk (contiguous rows of G) on `side` while the next chunks compute; the last
    chunk's carries the rest of G (b1, W2, b2, the CE slot), all final by then. Sent on its own
    first, that 0.1 MB took one NCCL call more a step, and overlap with one chunk (so two calls) ran
    4% slower than no overlap (one call after the graph; two H200, H = 2048:
    results/nvidia-h200/nccl_graph_capture.log). The current stream waits for the last exchange.
    The trainer runs it (FusedGPU.backward_gemm3), and perflab ceilings times it (overlap_exchange)."""
    import cupy as cp
    main, D = cp.cuda.get_current_stream(), dW1.shape[1]
    for (r0, r1), (lo, hi) in zip(chunks, overlap_pieces(chunks, D, G.size)):
        with phase("backward GEMM 3"):
            gemm(da1[r0:r1], Xb.T, dW1[r0:r1])
        handoff.record(main)
        side.wait_event(handoff)
        with side:
            allreduce(G[lo:hi])
    handoff.record(side)
    main.wait_event(handoff)


def overlap_pieces(chunks, D: int, total: int) -> list[tuple[int, int]]:
    """[lo, hi) of the flat gradient buffer G exchanged after each dW1 row chunk (rows r0..r1 of a
    D-column dW1 at G's start): the chunk's rows, the last chunk's also the rest of G."""
    return [(r0 * D, r1 * D if i < len(chunks) - 1 else total) for i, (r0, r1) in enumerate(chunks)]


def pinned_copy(X: np.ndarray) -> np.ndarray:
    """X in page-locked host memory (the fast host -> device path), same layout."""
    import cupy as cp
    mem = cp.cuda.alloc_pinned_memory(X.nbytes)
    out = np.ndarray(X.shape, X.dtype, buffer=mem, order="F" if X.flags.f_contiguous else "C")
    out[...] = X
    return out


class FusedModelParallel(FusedGPU):
    """Model parallel on GPUs with the fused trainer's kernels (seeds' 001, section 4.3): W1's rows,
    b1 and W2's columns split over the ranks, b2 and the data replicated. A step's one exchange is
    the all-reduce of the C x B partial logits between forward GEMM 2 and the softmax; backward
    needs none (each rank's dW1, db1, dW2 are its own shard's, db2 the same everywhere). One rank:
    the data-parallel trainer's step exactly, a CUDA graph with the fused output layer; several:
    the output layer unfused around the all-reduce, the whole step one CUDA graph with NCCL (launched
    one by one with a CUDA-aware MPI, which a graph cannot hold)."""

    name = "model"

    def __init__(self, cfg, X, y, comm, gemm="cublas", graphs=True):
        from perflab.train.parallel import ParallelError
        if cfg.hidden_size < comm.size:
            raise ParallelError(f"model parallel over {comm.size} ranks needs at least {comm.size} hidden units, "
                                f"got H={cfg.hidden_size}")
        super().__init__(cfg, X, y, comm, "resident", gemm, graphs and capturable_exchange(comm),
                         fuse_output=comm.size == 1)  # the logits' all-reduce sits inside the step's graph
        self.whole_graph = True  # the logits' all-reduce is inside the step; the update exchanges nothing

    def shard(self):
        from perflab.train.comm import share
        W1, b1, W2, b2 = model.init_params(self.cfg.layer_sizes, self.cfg.dtype, self.cfg.seed)
        rows = slice(*share(self.cfg.hidden_size, self.comm.size, self.comm.rank))
        return [W1[rows].copy(), b1[rows].copy(), np.ascontiguousarray(W2[:, rows]), b2.copy()], self.cfg.batch_size

    def local(self, index):
        return index  # every rank takes the whole batch

    def combine_logits(self, z2):
        if self.comm.size > 1:
            self.comm.allreduce(z2)

    def exchange_and_update(self):
        self.update()  # the gradients are this rank's own shard's

    def batch_loss(self, global_b: int) -> float:
        ce, penalty = self.loss_parts()
        return ce / global_b + self.comm.allreduce_scalar(penalty)  # each rank's L2 term is its shard's

    def predict(self, X, chunk: int = 8192):
        with self.stream:
            out = self.cp.concatenate([sharded_logits(self.params, self.cp.asarray(X[:, i:i + chunk]), self.comm)[1]
                                       .argmax(axis=0) for i in range(0, X.shape[1], chunk)])
        self.stream.synchronize()
        return out

    def full_params(self) -> list:
        self.stream.synchronize()
        return gather_shards(self.params, self.comm)
