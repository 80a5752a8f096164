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

import numpy as np

from perflab import kernels
from perflab.config import HALF_CAPABILITY, HALF_DTYPES, MODES, OVERLAP_CHUNKS, Config, ConfigError, SpecError
from perflab.train import model
from perflab.train.fused_step import FusedStep
from perflab.train.graphs import Graphs
from perflab.train.half_gpu import DeviceLossScale, HalfWeights, widened, widest
from perflab.train.loop import Sequential
from perflab.train.loss_readback import LossReadBack
from perflab.train.overlap import Overlap
from perflab.train.parallel import check_batch_split, local_part
from perflab.train.pinned import pinned_copy
from perflab.train.profile import phase
from perflab.train.side_stream import SideStream
from perflab.train.tf32_split import TF32Split


class GPUError(ConfigError):
    """The GPU run cannot be set up as asked; the message names the sizes or devices."""


class HalfError(GPUError, SpecError):
    """A half-precision run the GPU step cannot make (check_half): a GPUError where the trainer refuses it, a SpecError
    where RunSpec.validate does (its rules call check_half), one message either way."""


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
    """What a half-precision run on the GPU can be, or HalfError (a GPUError) naming what was asked and what to use
    (`capability`: the GPU's compute capability, "90" for a Hopper; None: whatever the GPU, RunSpec.validate's)."""
    if dtype not in HALF_DTYPES:
        return
    if dtype == "bfloat16" and capability is not None and int(capability) < HALF_CAPABILITY["bfloat16"]:
        raise HalfError(f"--dtype bfloat16 needs a GPU of compute capability 8.0 or later (Ampere, Hopper): its GEMMs "
                        f"and conversions are theirs; this one is {capability[:-1]}.{capability[-1]}: use --dtype float16 "
                        "(loss-scaled) or float32 here")
    if parallel not in ("sequential", "data") or mode != "resident" or gemm not in kernels.HALF_GEMMS:
        raise HalfError(f"--dtype {dtype} trains data parallel (or on one GPU) with the data resident and cuBLAS's or "
                        f"perflab's wgmma half-precision GEMMs; got --parallel {parallel}, --mode {mode}, --gemm {gemm}: "
                        "use --parallel data --mode resident --gemm cublas (or wgmma on a Hopper), or --dtype float32")
    if gemm == "wgmma" and capability is not None and capability != "90":
        raise HalfError(f"--gemm wgmma with --dtype {dtype} is Hopper's wgmma (compute capability 9.0); this GPU is "
                        f"{capability[:-1]}.{capability[-1]}: use --gemm cublas here")
    if dtype == "float16" and exchange == "p2p":
        raise HalfError("--comm p2p updates the parameters in its own kernel, which does not unscale float16's loss "
                        "scale: use --comm nccl, or --dtype bfloat16")


class FusedGPU(FusedStep, Graphs, Sequential):
    """Data-parallel (or single-GPU) trainer for any depth on CuPy with perflab kernels: the flat buffers, the
    exchange and update; the plan's forward and backward are FusedStep's (perflab.train.fused_step), graph capture
    and replay Graphs' (perflab.train.graphs), the loss's read-back `loss` (perflab.train.loss_readback). Its
    features are objects of their own, None where off: `half` (perflab.train.half_gpu: the images, activations
    and their gradients in half precision, every GEMM but the fused output layer's on half operands; gradients,
    exchange, update, biases, softmax and loss FP32, but for p2p's exchange in a bfloat16 run, which reads BF16 copies) with float16's `loss_scale`, `overlap`
    (perflab.train.overlap), `side` (perflab.train.side_stream) and `tf32_split` (perflab.train.tf32_split);
    model parallel overrides the exchange hooks (perflab.train.model_parallel_gpu)."""

    name = "data"

    def __init__(self, cfg: Config, X, y, comm, mode="resident", gemm="cublas", graphs=True, pinned=False,
                 fuse_output=True, fuse_backward=True, overlap=False, overlap_chunks=OVERLAP_CHUNKS):
        import cupy as cp
        if mode not in MODES[:2]:
            raise GPUError(f"FusedGPU runs modes {MODES[:2]}, got {mode!r} (pipelined: perflab.train.pipelined.Pipelined)")
        self.cp, self.cfg, self.comm, self.mode, self.variant = cp, cfg, comm, mode, gemm
        check_half(cfg.dtype, self.name, mode, gemm, comm.strategy, cp.cuda.Device().compute_capability)
        if overlap and comm.size > 1 and (not comm.capturable or comm.exchanges_and_updates):
            raise GPUError(f"--overlap all-reduces gradient chunks on a side stream: it needs --comm nccl, got --comm "
                           f"{comm.strategy}")
        host_params, bmax = self.shard()
        # fuse_backward: the output layer's backward GEMMs, sigmoid' and the bias sums in one pass over a_{L-1}.
        # fuse_output: the last hidden GEMM leaves z_{L-1}; bias + sigmoid (in place) and the output GEMM are
        # one pass over it, then the softmax (docs/DECISIONS.md, D31).
        self.fuse_backward = fuse_backward and cfg.num_classes <= kernels.MAX_FUSED_CLASSES
        self.fuse_output = fuse_output and cfg.num_classes <= kernels.MAX_FUSED_CLASSES
        # staged: the copy lands in one device buffer, so the step after it replays a graph too
        self.graphs = graphs and (mode == "staged" or not cfg.shuffle)
        dtype = np.dtype(cfg.storage_dtype)  # the parameters, gradients and update: FP32 masters in a half run
        self.P = cp.asarray(np.concatenate([p.ravel() for p in host_params]))
        # --comm p2p: the gradient lives where the peers map it, and one kernel exchanges and updates
        self.peer_exchange = comm.exchanges_and_updates
        # + 1 slot: the batch's CE sum
        self.G = (comm.register(self.P.size + 1, dtype, bf16_copy=cfg.dtype == "bfloat16") if self.peer_exchange
                  else cp.zeros(self.P.size + 1, dtype=dtype))
        shapes = [p.shape for p in host_params]
        self.params, self.grads = self.views(self.P, shapes), self.views(self.G, shapes)
        if self.peer_exchange and cfg.dtype == "bfloat16":  # the GEMMs' weight gradients go in BF16 to the peers (D81)
            self.grads = comm.in_copy(self.grads, shapes, range(0, len(shapes) - 2, 2))
        self.ends = cp.asarray(np.cumsum([int(np.prod(s)) for s in shapes]), dtype=np.int64)
        self.regs = cp.asarray([cfg.reg, 0.0] * (len(shapes) // 2), dtype=dtype)
        self.penalty_regs = self.regs  # the loss's L2 term's (model parallel: a replicated layer's over the ranks)
        half = cfg.dtype in HALF_DTYPES
        width = widest(bmax) if half else bmax  # the most columns a step's buffers take (batch_images)
        self.half = HalfWeights(cfg.dtype, self.P, shapes, self.views, cfg.num_classes, width) if half else None
        self.loss_scale = DeviceLossScale(dtype) if cfg.dtype == "float16" else None
        self.scaled, self.scale = self.loss_scale is not None, self.loss_scale.scale if self.loss_scale else None
        self.allocate(host_params, width, dtype, self.half.store if self.half else dtype)
        self.load(X, y, pinned, host_params[0].shape[1], bmax, dtype)
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.overlap = Overlap(comm.allreduce, self.G, host_params, overlap_chunks) if overlap and comm.size > 1 \
            else None
        deeper = len(host_params) > 4
        self.side_gemms = gemm == "cublas" and not self.half and not self.overlap and deeper
        self.side = SideStream() if self.side_gemms else None
        self.side_pending = False  # a step's side work not yet joined (join_side)
        # Whether the exchange and the update are in a step's graph too, a batch at a time (an epoch's
        # graph holds them whenever the exchange is capturable). On several GPUs without --overlap they
        # launch after it; with --overlap the NCCL all-reduces of the chunks must be inside (docs/DECISIONS.md,
        # D34). A host MPI exchange cannot be captured at all.
        self.whole_graph = comm.size == 1 or self.overlap is not None
        self.capturable = comm.capturable
        self.epochs_graphed = 0  # epochs run as one CUDA graph (a sweep row says whether its epochs were)
        self.cache = {}
        self.epoch_graphs = True  # one graph an epoch where graphs_an_epoch allows (off: a graph a batch)
        self.tuned = set()  # GEMM operand layouts already tuned
        self.want_loss = True
        self.settle()

    def settle(self) -> None:
        """Wait for the set-up's own kernels (the half copies of P and of the images, the wgmma constants), which
        ran on the caller's stream: self.stream does not wait for the legacy stream (non-blocking), and an eager
        first step read them half-written (docs/DECISIONS.md, D58)."""
        self.cp.cuda.get_current_stream().synchronize()

    def allocate(self, host_params, bmax: int, dtype, store) -> None:
        """The step's device buffers, each hidden layer's flat: a batch of n takes a contiguous (rows x n) view."""
        cp, C = self.cp, self.cfg.num_classes
        hidden = [p.shape[0] for p in host_params[0:-2:2]]  # this rank's widths (model parallel: its share)
        self.acts = [cp.empty(h * bmax, store) for h in hidden]  # each hidden layer's activations
        self.dz = [cp.empty(h * bmax, store) for h in hidden]  # and the gradient at its input
        self.tf32_split = TF32Split(self.dz[0], dtype) if self.variant == "x3tf32" else None
        self.z_out, self.delta = cp.empty(C * bmax, dtype), cp.empty(C * bmax, dtype)
        self.ce = cp.empty(bmax, dtype)
        self.loss = LossReadBack(self.comm.ce if self.peer_exchange else self.G[-1:], dtype)  # its CE summed over ranks
        top, D = hidden[-1], host_params[0].shape[1]
        self.part = cp.empty(kernels.output_backward_partials(top, bmax, C), dtype) if self.fuse_backward else None
        self.part_forward = cp.empty(kernels.output_layer_partials(top, bmax, C), dtype) if self.fuse_output else None
        # the tile kernels' workspace for split-K and stream-K (allocated here: never inside a graph capture)
        self.work = kernels.workspace(max(hidden), max(D, bmax, *hidden), dtype) \
            if self.variant in kernels.TILED_VARIANTS else None

    def load(self, X, y, pinned: bool, D: int, bmax: int, dtype) -> None:
        """The data: on the GPU once (resident), or on the host with the device buffer each batch lands in."""
        cp = self.cp
        if self.mode == "resident":
            self.X, self.y = cp.asarray(X), cp.asarray(y)
            if self.half:
                self.X_wide = self.half.images(self.X)
                self.X = self.X_wide[:, :self.X.shape[1]]
            if self.variant in kernels.WGMMA_VARIANTS and not self.half:  # the K-major copies and TF32 splits, once
                kernels.wgmma.constant(self.X)
                self.constant_images = self.X
        else:
            self.X = X if not pinned else pinned_copy(X)
            self.y = y
            self.Xdev = cp.empty((D, bmax), dtype, order="F")
            self.ydev = cp.empty(bmax, np.int64)

    def shard(self):
        """(this rank's initial parameters on the host, the most samples a rank's step takes):
        data parallel replicates the parameters and splits the batch."""
        check_batch_split(self.cfg, self.comm.size)
        return (model.init_params(self.cfg.layer_sizes, self.cfg.storage_dtype, self.cfg.seed),
                -(-self.cfg.batch_size // self.comm.size))

    @property
    def state(self) -> list:
        """The device buffers a step changes and a replay's warm-up or --comm auto's trial must put back."""
        return ([self.P] + ([self.half.P_half] if self.half else [])
                + ([self.scale, self.loss_scale.counts] if self.scaled else []))

    def set_weights(self, flat):
        """P <- flat (every parameter, in P's order), and the half-precision weights the GEMMs read with it."""
        self.P[...] = flat
        if self.half:
            kernels.narrow_copy(self.P, self.half.P_half)

    def local(self, index):
        """This rank's samples of a global batch."""
        return local_part(index, self.comm.rank, self.comm.size)

    def batch_images(self, part):
        """(Xb, yb, first) of this rank's part of a batch, resident: the samples are Xb's columns from `first` on;
        a half-precision step's Xb is widened to aligned columns (perflab.train.half_gpu.widened)."""
        if self.half:
            return widened(self.X_wide, self.y, part)
        return self.X[:, part], self.y[part], 0

    @staticmethod
    def views(buffer, shapes):
        out, offset = [], 0
        for s in shapes:
            n = int(np.prod(s))
            out.append(buffer[offset:offset + n].reshape(s))
            offset += n
        return out

    def gemm(self, a, b, out, bias=None, weight_gradient: bool = False):
        a_small = self.tf32_split.small_part(a) if self.tf32_split else None
        if self.variant in kernels.TUNABLE_VARIANTS:
            shape = (a.shape, a.strides, b.shape, b.strides, out.dtype)  # as tune_key: a half out and FP32 apart
            if shape not in self.tuned and not self.cp.cuda.get_current_stream().is_capturing():
                kernels.tune(a, b, out, self.variant, self.work, a_small=a_small)  # once per shape, in the first step
                self.tuned.add(shape)
        if self.half:
            return kernels.half_gemm(a, b, out, bias, variant=self.variant, weight_gradient=weight_gradient)
        return kernels.gemm(a, b, out=out, bias=bias, variant=self.variant, work=self.work, a_small=a_small)

    def step(self, Xb, yb, global_b: int, want_loss: bool, first: int = 0):
        """Enqueue one whole training step on the current stream (the samples Xb's columns from `first` on)."""
        self.gradients(Xb, yb, global_b, want_loss, first, leave_sums=self.sums_in_update)
        self.exchange_and_update()

    def exchange_and_update(self):
        if self.peer_exchange:
            self.comm.exchange_update(self.P, self.cfg.learning_rate, self.ends, self.regs,
                                      rounded=self.half.P_half if self.half else None)
            return
        if self.comm.size > 1 and not self.overlap:
            self.comm.allreduce(self.G)
        self.update()

    def update(self):
        """P's update, which in a half-precision step rounds the new P into P_half in the same pass
        (docs/DECISIONS.md, D35)."""
        rounded = self.half.P_half if self.half else None
        with phase("step"):
            if self.scaled:
                self.loss_scale.update(self.P, self.G[:-1], self.cfg.learning_rate, self.ends, self.regs, rounded,
                                       find=not self.overflow_found, partials=self.partials)
            else:
                kernels.sgd_update(self.P, self.G[:-1], self.cfg.learning_rate, self.ends, self.regs, rounded=rounded,
                                   partials=self.partials)
            self.partials = None  # made: the next update has its own step's, or none

    def loss_parts(self) -> tuple[float, float]:
        """The last step's CE sum and L2 term (LossReadBack.read), float16's skipped steps checked with them."""
        parts = self.loss.read(self.stream, self.loss_scale)
        if self.scaled:
            self.skipped = self.loss_scale.check()
        return parts

    def batch_loss(self, global_b: int) -> float:
        ce, penalty = self.loss_parts()
        return ce / global_b + penalty

    def predict(self, X):
        from perflab.train.half import half_product
        with self.stream:
            out = model.predict(self.params, self.cp.asarray(X), matmul=half_product(self.half.kind) if self.half else model.product)
        self.stream.synchronize()
        return out

    def full_params(self) -> list:
        self.stream.synchronize()
        return [p.get() for p in self.params]

    def sync(self):
        self.stream.synchronize()
