"""GPU training: the seeds' step on one GPU per rank, fused and graph-captured, for any depth.

Same math as perflab.train.model (checked against it), laid out for speed. Layers l = 1..L, hidden
layers 1..L-1 (a_0 = X):
  forward   z_l = W_l a_{l-1}, a_l = sigmoid(z_l + b_l)   a GEMM a hidden layer (bias + sigmoid its
                                                          epilogue or a pass after it)
            the last hidden layer's bias + sigmoid, z_L = W_L a_{L-1} and
            delta = (softmax(z_L + b_L) - Y)/B           one pass over z_{L-1}, then one kernel (with the
                                                          per-sample CE for the loss)
  backward  dW_L, db_{L-1}, dz_{L-1} = (W_L^T delta) o a o (1 - a)   one pass over a_{L-1}
            per hidden layer l below it: dW_{l+1} = dz_{l+1} a_l^T and W_{l+1}^T dz_{l+1} (two GEMMs),
            then dz_l and db_l in one pass (sigmoid_backward_rows)
            dW_1 = dz_1 X^T, the last GEMM (no input gradient is needed)
  exchange  one all-reduce of one fused gradient buffer (NCCL on the GPU, or staged via MPI; with
            --comm p2p the peers' buffers read over NVLink, summed and applied in one kernel)
  step      p <- p - lr (g + reg p) for every parameter in one launch
GEMMs are counted as the seeds count them (perflab.train.model): forward GEMM l; backward GEMM 1 is
dW_L, then each layer's input gradient and the weight gradient below it, 2L - 1 the last.
Parameters and gradients each live in one flat device buffer. In `resident` mode the data
sit on the GPU and each batch's whole step is captured once as a CUDA graph and replayed (on
several GPUs forward and backward only; the all-reduce and update launch after it), and where
batches come in order a whole epoch is one graph (on several GPUs the NCCL all-reduces inside);
in `staged` mode (the seeds' path) each batch is copied host -> device every iteration into one
device buffer, and the step after the copy replays its graph the same way.
"""
from __future__ import annotations

import contextlib

import numpy as np

from perflab import kernels
from perflab.config import HALF_CAPABILITY, HALF_DTYPES, MODES, OVERLAP_CHUNKS, Config, ConfigError
from perflab.train import model, profile
from perflab.train.loop import Sequential
from perflab.train.parallel import check_batch_split, gather_shards, local_part, sharded_forward
from perflab.train.profile import phase
from perflab.train.step import backward_gemm, forward_gemm


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
    need = cfg.memory_bytes(resident)
    if need > free:
        raise GPUError(f"needs about {need / 2**30:.2f} GiB of GPU memory (N={cfg.train_size}, B={cfg.batch_size}, "
                       f"layers {list(cfg.layer_sizes)}, {cfg.dtype}) but {free / 2**30:.2f} of {total / 2**30:.2f} "
                       "GiB are free")


def check_half(dtype: str, parallel: str, mode: str, gemm: str, exchange: str, capability: str | None = None) -> None:
    """What a half-precision run on the GPU can be, or GPUError naming what was asked and what to use
    (`capability`: the GPU's compute capability, "90" for a Hopper)."""
    if dtype not in HALF_DTYPES:
        return
    if dtype == "bfloat16" and capability is not None and int(capability) < HALF_CAPABILITY["bfloat16"]:
        raise GPUError(f"--dtype bfloat16 needs a GPU of compute capability 8.0 or later (Ampere, Hopper): its GEMMs "
                       f"and conversions are theirs; this one is {capability[:-1]}.{capability[-1]}: use --dtype float16 "
                       "(loss-scaled) or float32 here")
    if parallel not in ("sequential", "data") or mode != "resident" or gemm not in kernels.HALF_GEMMS:
        raise GPUError(f"--dtype {dtype} trains data parallel (or on one GPU) with the data resident and cuBLAS's or "
                       f"perflab's wgmma half-precision GEMMs; got --parallel {parallel}, --mode {mode}, --gemm {gemm}: "
                       "use --parallel data --mode resident --gemm cublas (or wgmma on a Hopper), or --dtype float32")
    if gemm == "wgmma" and capability is not None and capability != "90":
        raise GPUError(f"--gemm wgmma with --dtype {dtype} is Hopper's wgmma (compute capability 9.0); this GPU is "
                       f"{capability[:-1]}.{capability[-1]}: use --gemm cublas here")
    if dtype == "float16" and exchange == "p2p":
        raise GPUError("--comm p2p updates the parameters in its own kernel, which does not unscale float16's loss "
                       "scale: use --comm nccl, or --dtype bfloat16")


class FusedGPU(Sequential):
    """Data-parallel (or single-GPU) trainer for any depth on CuPy with perflab kernels.

    Mixed precision (--dtype bfloat16 | float16): the images, activations and their gradients are held
    in half precision and every GEMM but the fused output layer's runs on half operands with FP32
    accumulation (cuBLAS); the weights are rounded from the FP32 masters once a step; gradients, the
    exchange, the update, biases, softmax and loss stay FP32. float16 scales the loss dynamically on
    the device (kernels.sgd_update_scaled), so a graph an epoch holds it. The same step as
    perflab.train.half emulates, bar where it rounds (checked against it)."""

    name = "data"

    def __init__(self, cfg: Config, X, y, comm, mode="resident", gemm="cublas", graphs=True, pinned=False,
                 fuse_output=True, fuse_backward=True, overlap=False, overlap_chunks=OVERLAP_CHUNKS):
        import cupy as cp
        if mode not in MODES[:2]:
            raise GPUError(f"FusedGPU runs modes {MODES[:2]}, got {mode!r} (pipelined: perflab.train.pipelined.Pipelined)")
        self.cp, self.cfg, self.comm, self.mode, self.variant = cp, cfg, comm, mode, gemm
        self.half = cfg.dtype if cfg.dtype in HALF_DTYPES else None
        check_half(cfg.dtype, self.name, mode, gemm, "p2p" if hasattr(comm, "exchange_update") else "nccl",
                   cp.cuda.Device().compute_capability)
        host_params, bmax = self.shard()
        # fuse_backward: the output layer's backward GEMMs, sigmoid' and the bias sums in one pass over a_{L-1}.
        # fuse_output: the last hidden GEMM leaves z_{L-1}; bias + sigmoid (in place) and the output GEMM are
        # one pass over it, then the softmax: 0.10 ms where the three kernels it replaces take 0.15 (H100, H=2048,
        # B=12000; results/nvidia-h100-80gb-hbm3/bench_step.csv). A first version made a1 on load in both
        # fused kernels and never stored it: 3x slower, latency-bound re-reading W2 through L1 for every
        # row (results/nvidia-h100-80gb-hbm3/bench_step_fused_forward.csv, ncu_output_forward.txt).
        self.fuse_backward = fuse_backward and cfg.num_classes <= kernels.MAX_FUSED_CLASSES
        self.fuse_output = fuse_output and cfg.num_classes <= kernels.MAX_FUSED_CLASSES
        # staged: the copy lands in one device buffer, so the step after it replays a graph too
        self.graphs = graphs and (mode == "staged" or not cfg.shuffle)
        D, C = host_params[0].shape[1], cfg.num_classes
        hidden = [p.shape[0] for p in host_params[0:-2:2]]  # this rank's widths (model parallel: its share)
        dtype = np.dtype(cfg.storage_dtype)  # the parameters, gradients and update: FP32 masters in a half run
        store = kernels.HALF_STORAGE[self.half] if self.half else dtype  # the images, activations, their gradients
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
        self.penalty_regs = self.regs  # the loss's L2 term's (model parallel: a replicated layer's over the ranks)
        # each hidden layer's activations and the gradient at its input, flat: a batch of n takes a
        # contiguous (rows x n) view of each
        self.acts = [cp.empty(h * bmax, store) for h in hidden]
        self.dz = [cp.empty(h * bmax, store) for h in hidden]
        # x3tf32: dz_1's TF32 small parts, beside its big ones in dz[0] (written by the pass that makes dz_1)
        self.dz1_small = cp.empty(hidden[0] * bmax, dtype) if gemm == "x3tf32" else None
        self.dz1_split = False
        self.z_out, self.delta = cp.empty(C * bmax, dtype), cp.empty(C * bmax, dtype)
        if self.half:  # the weights the GEMMs read, P rounded (by each update); delta as the unfused GEMMs read it
            self.P_half = kernels.narrow_copy(self.P, cp.empty(self.P.size, store))
            self.half_params = self.views(self.P_half, shapes)
            self.delta_half = cp.empty(C * bmax, store)
        # float16's dynamic loss scale, on the device: the scale, whether this step overflowed, and the counts
        # (good steps in a row, overflowed in a row, overflowed in all), read with the loss
        self.scaled = self.half == "float16"
        if self.scaled:
            from perflab.train import half
            self.scale = cp.asarray([half.INITIAL_SCALE["float16"]], dtype)
            self.overflow, self.scale_counts = cp.zeros(1, np.int32), cp.zeros(3, np.int64)
            self.counts_host = pinned_copy(np.zeros(3, np.int64))
        self.ce = cp.empty(bmax, dtype)
        # the loss's L2 term, made in the step (before its update, as the reference's J) with its scratch
        self.penalty, self.l2_part = cp.zeros(1, dtype), cp.empty(kernels.L2_BLOCKS, dtype)
        self.loss_host = pinned_copy(np.zeros(2, dtype))  # the CE sum and the L2 term, read by batch_loss
        top = hidden[-1]
        self.part = cp.empty(kernels.output_backward_partials(top, bmax, C), dtype) if self.fuse_backward else None
        self.part_forward = cp.empty(kernels.output_layer_partials(top, bmax, C), dtype) if self.fuse_output else None
        # the tile kernels' workspace for split-K and stream-K (allocated here: never inside a graph capture)
        self.work = kernels.workspace(max(hidden), max(D, bmax, *hidden), dtype) if gemm in kernels.TILED_VARIANTS else None
        if mode == "resident":
            self.X, self.y = cp.asarray(X), cp.asarray(y)
            if self.half:  # the images in half precision, once, C-ordered (D x N, N contiguous): cuBLAS's half
                # weight gradient dz_1 X^T then reads X^T K-major, 5-15% faster on an H100 than D-contiguous
                # (experiments/half/gemm_layouts.py; the forward GEMM the same either way)
                self.X = kernels.narrow_copy(cp.ascontiguousarray(self.X), cp.empty(self.X.shape, store))
            if gemm in kernels.WGMMA_VARIANTS and not self.half:  # the images' K-major copies and TF32 splits, once
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
            self.chunks = row_chunks(hidden[0], overlap_chunks)
            # wait-free backprop (the lecture's WFBP) past one hidden layer: each layer's slice of G goes to
            # the all-reduce as soon as backward has made it, under the GEMMs of the layers below
            sizes = [int(np.prod(p.shape)) for p in host_params]
            self.layer_starts = [int(sum(sizes[:k])) for k in range(0, len(sizes), 2)]  # W_l's place in G
        # Past one hidden layer, each upper layer's weight gradient dW_l = dz_l a_{l-1}^T runs on a side
        # stream beside its input gradient W_l^T dz_l, the sigmoid' pass after it and dW_1 (they only read
        # dz_l), joined once a step: the backward below the output layer took 0.97-0.99 of its serial time
        # on one H100 joined at each layer (FP32, cuBLAS: experiments/deep/side_stream_backward_h100.jsonl).
        # cuBLAS only (the tile kernels share one split-K workspace), FP32 and FP64; not with --overlap,
        # whose handoffs follow each dW_l on the main stream.
        self.side_gemms = gemm == "cublas" and not self.half and not self.overlap and len(hidden) > 1
        self.side_pending = False  # a step's side work not yet joined (join_side)
        if self.side_gemms:
            from perflab.kernels.cublas import own_handle
            own_handle(cp.cuda.Device().id)  # made here, never inside a graph capture
            self.side_stream = cp.cuda.Stream(non_blocking=True)
            self.fork, self.join = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)
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

    @property
    def last_gemm(self) -> str:
        """The phase name of dW_1 = dz_1 X^T, the step's last GEMM: backward GEMM 2L - 1."""
        return backward_gemm(len(self.params) - 1)

    def shard(self):
        """(this rank's initial parameters on the host, the most samples a rank's step takes):
        data parallel replicates the parameters and splits the batch."""
        check_batch_split(self.cfg, self.comm.size)
        return (model.init_params(self.cfg.layer_sizes, self.cfg.storage_dtype, self.cfg.seed),
                -(-self.cfg.batch_size // self.comm.size))

    @property
    def state(self) -> list:
        """The device buffers a step changes and a replay's warm-up or --comm auto's trial must put back."""
        return [self.P] + ([self.P_half] if self.half else []) + ([self.scale, self.scale_counts] if self.scaled else [])

    def set_weights(self, flat):
        """P <- flat (every parameter, in P's order), and the half-precision weights the GEMMs read with it."""
        self.P[...] = flat
        if self.half:
            kernels.narrow_copy(self.P, self.P_half)

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
        a_small = self.small_part(a) if self.dz1_split else None
        if self.variant in kernels.TUNABLE_VARIANTS:
            shape = (a.shape, a.strides, b.shape, b.strides)
            if shape not in self.tuned and not self.cp.cuda.get_current_stream().is_capturing():
                kernels.tune(a, b, out, self.variant, self.work, a_small=a_small)  # once per shape, in the first step
                self.tuned.add(shape)
        if self.half:
            return kernels.half_gemm(a, b, out, bias, variant=self.variant)
        return kernels.gemm(a, b, out=out, bias=bias, variant=self.variant, work=self.work, a_small=a_small)

    def small_part(self, a):
        """The view of dz1_small at a's place in dz[0], where a is a view of dz[0], else None."""
        whole = self.dz[0]
        offset = a.data.ptr - whole.data.ptr
        if not 0 <= offset < whole.nbytes:
            return None
        flat = self.dz1_small[offset // whole.itemsize:]
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
        """P's update, which in a half-precision step rounds the new P into P_half in the same pass (a copy
        of P at each step's start took 4-6 us of a 70-170 us step on one H100: experiments/half)."""
        rounded = self.P_half if self.half else None
        with phase("step"):
            if self.scaled:
                from perflab.train.half import GROWTH_INTERVAL
                kernels.sgd_update_scaled(self.P, self.G[:-1], self.cfg.learning_rate, self.ends, self.regs, self.scale,
                                          self.overflow, self.scale_counts, GROWTH_INTERVAL, rounded=rounded)
            else:
                kernels.sgd_update(self.P, self.G[:-1], self.cfg.learning_rate, self.ends, self.regs, rounded=rounded)

    def gemm_weights(self) -> list:
        """The weights as the GEMMs read them: P's, or (half precision) P_half, P rounded by the last update
        (the p2p exchange's kernel updates P alone: there it is rounded now)."""
        if not self.half:
            return self.params[0::2]
        if self.peer_exchange:
            kernels.narrow_copy(self.P, self.P_half)
        return self.half_params[0::2]

    def gemm_delta(self, delta):
        """delta as the unfused output layer's GEMMs read it: itself, or (half precision) rounded into delta_half."""
        if not self.half:
            return delta
        return kernels.narrow_copy(delta, self.delta_half[:delta.size].reshape(delta.shape))

    def gradients(self, Xb, yb, global_b: int, want_loss: bool):
        """Enqueue forward and backward into G (capturable on one GPU; with --overlap, the
        exchange of G's chunks too)."""
        W, b, dW, db = self.params[0::2], self.params[1::2], self.grads[0::2], self.grads[1::2]
        Wg = self.gemm_weights()  # W for the GEMMs (the fused output layer's kernels read W[-1] in FP32)
        scale = self.scale if self.scaled else None
        n, L, C = Xb.shape[1], len(W), W[-1].shape[0]
        acts = [Xb] + [a[:w.shape[0] * n].reshape(w.shape[0], n) for a, w in zip(self.acts, W)]
        dz = [d[:w.shape[0] * n].reshape(w.shape[0], n) for d, w in zip(self.dz, W)]
        z_out, delta = self.z_out[:C * n].reshape(C, n), self.delta[:C * n].reshape(C, n)
        fused = self.fuse_output and not profile.ACTIVE  # phases stay separate when profiling
        fused_backward = self.fuse_backward and not profile.ACTIVE
        ce = self.ce[:n] if want_loss else None
        with phase("forward"):
            for l in range(L - 1):  # the hidden layers; the last one's bias + sigmoid waits for the fused pass
                deferred, exchanged = fused and l == L - 2, self.output_exchanged(l)
                with phase(forward_gemm(l + 1)):
                    self.gemm(Wg[l], acts[l], acts[l + 1], bias=None if deferred or exchanged else b[l])
                if exchanged:  # the ranks' partial sums of the whole layer, then its bias and sigmoid
                    self.comm.allreduce(acts[l + 1])
                    if not deferred:
                        kernels.bias_sigmoid(acts[l + 1], b[l])
            if fused:  # bias + sigmoid (in place) + the output GEMM in one pass, then the softmax
                kernels.output_layer(W[-1], b[-2], b[-1], acts[-1], yb, delta, global_b, self.part_forward, ce, scale)
            else:
                with phase(forward_gemm(L)):
                    self.gemm(Wg[-1], acts[-1], z_out)
                if self.output_exchanged(L - 1):
                    self.comm.allreduce(z_out)
                kernels.softmax_xent_grad(z_out, b[-1], yb, delta, global_b, ce, scale=scale)
        with phase("backward"):
            if self.peer_exchange:  # the peers have read the last step's gradient before this one overwrites it
                self.comm.read_wait()
            kernels.row_sum(delta, db[-1])
            # x3tf32: the pass that makes dz_1 writes its TF32 big and small parts, which dW_1's GEMM reads as they are
            self.dz1_split = False
            small = self.dz1_small[:dz[0].size].reshape(dz[0].shape) if self.dz1_small is not None else None
            if fused_backward:  # backward GEMMs 1 and 2 + sigmoid' + db_{L-1} in one pass over a_{L-1}
                kernels.output_backward(W[-1], delta, acts[-1], dz[-1], dW[-1], db[-2], self.part,
                                        small if L == 2 else None)
            else:
                delta_op = self.gemm_delta(delta)
                with phase(backward_gemm(1)):
                    self.gemm(delta_op, acts[-1].T, dW[-1])
                with phase(backward_gemm(2)):
                    self.gemm(Wg[-1].T, delta_op, dz[-1])
                kernels.sigmoid_backward_rows(dz[-1], acts[-1], db[-2], small if L == 2 else None)
            unsent = self.G.size  # with --overlap, G[unsent:] is already on its way
            if want_loss:  # the CE slot is all-reduced with the gradients (the output layer's slice); stale when unused
                kernels.total(self.ce[:n], self.G[-1:])
            side = self.side_gemms and not profile.ACTIVE  # phases are timed one after another
            for l in range(L - 2, 0, -1):  # hidden layer l + 1 over hidden layer l (1-based): W[l] is W_{l+1}
                k = 2 * (L - l) - 1
                with phase(backward_gemm(k)), self.beside(side):
                    self.gemm(dz[l], acts[l].T, dW[l])
                if self.overlap:  # layer l + 1 (and those above it, the first time) is final: send it (WFBP)
                    unsent = self.send_layer(self.layer_starts[l], unsent)
                with phase(backward_gemm(k + 1)):
                    self.gemm(Wg[l].T, dz[l], dz[l - 1])
                if self.gradient_exchanged(l):  # the ranks' partial sums of the whole input gradient
                    self.comm.allreduce(dz[l - 1])
                kernels.sigmoid_backward_rows(dz[l - 1], acts[l], db[l - 1], small if l == 1 else None)
            self.side_pending = side  # the side's dW_l run on under dW_1 too, joined after it (join_side)
            self.dz1_split = small is not None
            if want_loss:
                kernels.l2_penalty(self.P, self.ends, self.penalty_regs, self.l2_part, self.penalty.reshape(()))
            self.first_weight_gradient(dz[0], Xb, dW[0], unsent)
            self.join_side()

    def join_side(self):
        """The current stream waits for the side stream's weight gradients, once a step (a captured graph's
        side stream must rejoin it; the exchange and the update read them)."""
        if self.side_pending:
            self.cp.cuda.get_current_stream().wait_event(self.join)
            self.side_pending = False

    @contextlib.contextmanager
    def beside(self, side: bool):
        """Work enqueued in here runs on the side stream (with cuBLAS's second handle) after what the current
        stream has enqueued so far; self.join marks its end. Without `side`, on the current stream."""
        if not side:
            yield
            return
        from perflab.kernels.cublas import side_handle
        self.fork.record(self.cp.cuda.get_current_stream())
        self.side_stream.wait_event(self.fork)
        with self.side_stream, side_handle():
            yield
        self.join.record(self.side_stream)

    def output_exchanged(self, l: int) -> bool:
        """Whether layer l's GEMM (0-based; L - 1 the output layer) leaves each rank a partial sum of the
        layer's whole output, all-reduced before its bias (model parallel's column-split layers)."""
        return False

    def gradient_exchanged(self, l: int) -> bool:
        """Whether layer l's input gradient W_l^T dz_l is each rank's partial sum, all-reduced (model
        parallel's row-split layers)."""
        return False

    def send_layer(self, lo: int, hi: int) -> int:
        """All-reduce G[lo:hi] on the side stream once the current stream has made it; returns lo."""
        main = self.cp.cuda.get_current_stream()
        self.handoff.record(main)
        self.comm_stream.wait_event(self.handoff)
        with self.comm_stream:
            self.comm.allreduce(self.G[lo:hi])
        return lo

    def first_weight_gradient(self, dz1, Xb, dW1, unsent: int):
        """dW_1 = dz_1 X^T, the step's last GEMM (in chunks, each exchanged as it is done, with --overlap;
        the last chunk carries what of G[:unsent] is not dW_1: b_1, and with one hidden layer the rest)."""
        if self.overlap:
            overlapped_gemm3(self.gemm, self.comm.allreduce, dz1, Xb, dW1, self.G[:unsent], self.chunks,
                             self.comm_stream, self.handoff, self.last_gemm)
        else:
            with phase(self.last_gemm):
                self.gemm(dz1, Xb.T, dW1)

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
            saved = [x.copy() for x in self.state]  # a warm-up pass loads every kernel before capture...
            run(*args)
            for x, was in zip(self.state, saved):  # ...and is undone, so the replay below is the only step
                x[...] = was
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
        if self.scaled:
            copy(self.counts_host.ctypes.data, self.scale_counts.data.ptr, self.counts_host.nbytes,
                 self.cp.cuda.runtime.memcpyDeviceToHost, self.stream.ptr)
        self.stream.synchronize()
        if self.scaled:
            self.check_scale()
        return float(self.loss_host[0]), float(self.loss_host[1])

    def check_scale(self):
        """A float16 run whose loss scale overflowed step after step ends with LossScaleError (read with
        the loss, so at the latest where the epoch ends)."""
        from perflab.train.half import MOST_SKIPS, overflow_error
        good, in_a_row, self.skipped = (int(v) for v in self.counts_host)
        if in_a_row >= MOST_SKIPS:
            raise overflow_error("float16", in_a_row, "on the GPU", float(self.scale.get()[0]))

    def batch_loss(self, global_b: int) -> float:
        ce, penalty = self.loss_parts()
        return ce / global_b + penalty

    def predict(self, X):
        from perflab.train.half import half_product
        with self.stream:
            out = model.predict(self.params, self.cp.asarray(X), matmul=half_product(self.half) if self.half else model.product)
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
    return comm.size == 1 or getattr(comm, "strategy", "") in ("nccl", "nccl-half", "p2p")


def row_chunks(H: int, k: int) -> list[tuple[int, int]]:
    """[r0, r1) of dW1's H rows in k chunks (the last one shorter where k does not divide H)."""
    rows = -(-H // k)
    return [(r, min(r + rows, H)) for r in range(0, H, rows)]


def overlapped_gemm3(gemm, allreduce, da1, Xb, dW1, G, chunks, side, handoff, name=backward_gemm(3)):
    """--overlap's backward GEMM 3: dW1 = dz1 X^T in row chunks on the current stream, the all-reduce
    of each finished chunk (contiguous rows of G) on `side` while the next chunks compute; the last
    chunk's carries the rest of G (b1, W2, b2, the CE slot), all final by then. Sent on its own
    first, that 0.1 MB took one NCCL call more a step, and overlap with one chunk (so two calls) ran
    4% slower than no overlap (one call after the graph; two H200, H = 2048:
    results/nvidia-h200/nccl_graph_capture.log). The current stream waits for the last exchange.
    The trainer runs it (FusedGPU.first_weight_gradient; `name`: its phase), and perflab ceilings times it (overlap_exchange)."""
    import cupy as cp
    main, D = cp.cuda.get_current_stream(), dW1.shape[1]
    for (r0, r1), (lo, hi) in zip(chunks, overlap_pieces(chunks, D, G.size)):
        with phase(name):
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
    """Model parallel on GPUs with the fused trainer's kernels, any depth (seeds' 001, section 4.3, and the
    HKUST lecture's partition by layers in turn): each layer split as parallel.layer_splits says, the
    hidden layers by rows and by columns in turn, the output layer by columns after a row-split layer
    (else replicated), the data replicated. A column-split layer's GEMM leaves every rank a partial sum
    of its whole output, all-reduced before its bias and sigmoid (the C x B logits at one hidden layer);
    backward, a row-split layer's input gradient is all-reduced the same way; nothing else is
    exchanged (each rank's gradients are its shard's; a replicated layer's are the same everywhere).
    One rank: the data-parallel trainer's step exactly; the whole step one CUDA graph with NCCL
    (launched one by one with a CUDA-aware MPI, which a graph cannot hold)."""

    name = "model"

    def __init__(self, cfg, X, y, comm, gemm="cublas", graphs=True):
        from perflab.train.parallel import ParallelError, layer_splits
        self.splits = layer_splits(len(cfg.hidden_sizes) + 1)
        narrow = [h for h, kind in zip(cfg.hidden_sizes, self.splits) if kind == "rows" and h < comm.size]
        if narrow:
            raise ParallelError(f"model parallel over {comm.size} ranks needs at least {comm.size} units in each layer "
                                f"it splits by rows (hidden layers 1, 3, ...), got hidden sizes {list(cfg.hidden_sizes)}")
        # the output layer fused (bias + sigmoid + its GEMM in one pass) where its logits need no all-reduce
        super().__init__(cfg, X, y, comm, "resident", gemm, graphs and capturable_exchange(comm),
                         fuse_output=comm.size == 1 or self.splits[-1] == "whole")
        self.whole_graph = True  # the all-reduces are inside the step; the update exchanges nothing
        if comm.size > 1:  # the loss's L2 term is summed over the ranks: a replicated layer's counted once
            scale = [1 / comm.size if kind == "whole" else 1.0 for kind in self.splits for _ in (0, 1)]
            self.penalty_regs = self.regs * self.cp.asarray(scale, self.regs.dtype)

    def shard(self):
        from perflab.train.comm import share
        full = model.init_params(self.cfg.layer_sizes, self.cfg.storage_dtype, self.cfg.seed)
        out = []
        for W, b, kind in zip(full[0::2], full[1::2], self.splits):
            if kind == "rows":
                rows = slice(*share(W.shape[0], self.comm.size, self.comm.rank))
                out += [W[rows].copy(), b[rows].copy()]
            elif kind == "columns":
                out += [np.ascontiguousarray(W[:, slice(*share(W.shape[1], self.comm.size, self.comm.rank))]), b.copy()]
            else:
                out += [W.copy(), b.copy()]
        return out, self.cfg.batch_size

    def local(self, index):
        return index  # every rank takes the whole batch

    def output_exchanged(self, l: int) -> bool:
        return self.comm.size > 1 and self.splits[l] == "columns"

    def gradient_exchanged(self, l: int) -> bool:
        return self.comm.size > 1 and self.splits[l] == "rows"

    def exchange_and_update(self):
        self.update()  # the gradients are this rank's own shard's

    def batch_loss(self, global_b: int) -> float:
        ce, penalty = self.loss_parts()
        return ce / global_b + self.comm.allreduce_scalar(penalty)  # each rank's L2 term is its shard's

    def predict(self, X, chunk: int = 8192):
        with self.stream:
            out = self.cp.concatenate([sharded_forward(self.params, self.splits, self.comm,
                                                       self.cp.asarray(X[:, i:i + chunk]))[-1].argmax(axis=0)
                                       for i in range(0, X.shape[1], chunk)])
        self.stream.synchronize()
        return out

    def full_params(self) -> list:
        self.stream.synchronize()
        return gather_shards(self.params, self.comm, self.splits)
