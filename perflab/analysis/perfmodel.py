"""Performance model: FLOPs, bytes, arithmetic intensity, rooflines, predicted times.

All counts are per batch per rank. B' = B/p is a rank's share of the mini-batch (data
parallel); b is the bytes of one element. Conventions: an add, multiply, divide, compare or
exp is one FLOP; a GEMM (m x k)(k x n) is 2mnk. Phase names are the seeds' NVTX ranges.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from perflab.train.step import backward_gemm, forward_gemm

DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}  # images and activations as stored
D_MNIST, C_MNIST = 784, 10


class NetError(ValueError):
    """A net's hidden widths that cannot make a net; the message names the value and what is allowed."""


def widths(H) -> tuple:
    """The hidden widths of a net, deepest last, from any way perflab writes them: one width
    (512 or '512'), several joined by '-' ('1024-1024', a sweep row's H for 784-1024-1024-10), or a
    sequence of widths ((1024, 1024))."""
    allowed = "one width like 512, or a deeper net's widths like 1024-1024 (each a whole number >= 1)"
    if isinstance(H, str):
        parts = H.strip().split("-")
        if not H.strip() or not all(p.strip().isdigit() for p in parts):
            raise NetError(f"hidden widths {H!r}: expected {allowed}")
        out = tuple(int(p) for p in parts)
    elif whole(H):
        out = (int(H),)
    elif isinstance(H, (tuple, list)) and all(whole(h) for h in H):
        out = tuple(int(h) for h in H)
    else:
        raise NetError(f"hidden widths {H!r}: expected {allowed}")
    if not out or min(out) < 1:
        raise NetError(f"hidden widths {H!r}: expected {allowed}")
    return out


def whole(x) -> bool:
    """A whole number (NumPy's too, and 512.0 as a CSV column with gaps reads it), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and float(x).is_integer()


def net_name(H) -> str:
    """'512' for one hidden layer, '1024-1024' for two: a net as text, whichever way it was written."""
    return "-".join(map(str, widths(H)))


def is_net(column, H):
    """Which entries of a table's H column (ints, '512', '1024-1024', as CSVs read them back) name the net H
    (an entry that names no net, a gap, is not it)."""
    target = net_name(H)

    def same(h) -> bool:
        try:
            return net_name(h) == target
        except NetError:
            return False
    return column.map(same)


def net_label(H):
    """How a sweep row names a net: its width (an int) for one hidden layer, '1024-1024' for deeper."""
    w = widths(H)
    return w[0] if len(w) == 1 else "-".join(map(str, w))


def layer_sizes(H, D: int = D_MNIST, C: int = C_MNIST) -> tuple:
    """(D, H1, ..., C) of the net H names."""
    return (D, *widths(H), C)


@dataclass(frozen=True)
class Workload:
    """What runs: layer sizes (D, H..., C), global batch B, ranks p, parallel mode, data path."""
    layers: tuple = (784, 512, 10)
    B: int = 3200
    p: int = 1
    parallel: str = "data"          # data | model
    dtype: str = "float32"
    staged: bool = True             # images copied host -> device every batch (the seeds' path)
    host_allreduce: bool = True     # gradients device -> host -> MPI -> host -> device
    N: int = 38400                  # samples an epoch

    @property
    def b(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def gradient_b(self) -> int:
        """Bytes of a parameter or gradient element: FP32 in mixed precision (its masters and exchange)."""
        return max(self.b, 4)

    @property
    def local_batch(self) -> float:
        """B' = B/p in data parallelism (the whole batch in model parallelism)."""
        return self.B / self.p if self.parallel == "data" else self.B

    @property
    def num_params(self) -> int:
        """HD + H + CH + C for one hidden layer; each layer's weights and biases for any depth."""
        L = self.layers
        return sum(L[i + 1] * L[i] + L[i + 1] for i in range(len(L) - 1))

    @property
    def batches_per_epoch(self) -> int:
        return math.ceil(self.N / self.B)


def gradient_buffer_bytes(H, D: int = D_MNIST, C: int = C_MNIST) -> int:
    """Bytes of the float32 buffer data-parallel training all-reduces every step: each parameter
    of the net (H: its hidden widths, `widths`), and the loss slot."""
    return 4 * (Workload(layers=layer_sizes(H, D, C)).num_params + 1)


def gradient_pieces(H, chunks: int, D: int = D_MNIST, C: int = C_MNIST) -> list[int]:
    """Bytes of each piece the pipelined trainer all-reduces on the host, in its order: G's tail (all
    but W1: b1, the layers above, the loss slot), then dW1's row chunks of ceil(H1 / chunks) rows."""
    H1 = widths(H)[0]
    rows = -(-H1 // chunks)
    return [gradient_buffer_bytes(H, D, C) - 4 * D * H1] + [4 * D * (min(r + rows, H1) - r) for r in range(0, H1, rows)]


def phase_flops(w: Workload) -> dict[str, float]:
    """Exact FLOPs of each phase for one batch on one rank (data parallel, any depth; model
    parallel splits every hidden-layer count by p)."""
    L, Bp = w.layers, w.local_batch
    split = w.p if w.parallel == "model" else 1
    out = {}
    nl = len(L) - 1
    for l in range(1, nl + 1):
        rows = L[l] / split if l < nl else L[l]       # hidden units are split in model parallelism
        cols_in = L[l - 1] / split if l > 1 else L[l - 1]
        out[forward_gemm(l)] = 2 * rows * cols_in * Bp
        out[f"forward elementwise {l}"] = (4 if l < nl else 5) * rows * Bp  # bias + sigmoid | softmax
    # backward, in execution order: for each layer from the top, dW_l then (below the top) da_{l-1}
    g = 1
    for l in range(nl, 0, -1):
        rows = L[l] / split if l < nl else L[l]
        cols_in = L[l - 1] / split if l > 1 else L[l - 1]
        out[backward_gemm(g)] = 2 * rows * cols_in * Bp       # dW_l = dz_l a_{l-1}^T
        g += 1
        if l > 1:
            out[backward_gemm(g)] = 2 * rows * cols_in * Bp   # da_{l-1} = W_l^T dz_l
            g += 1
    out["backward elementwise"] = (2 * L[-1] + sum(4 * h / split for h in L[1:-1])) * Bp  # delta, sigmoid', bias sums
    params = w.num_params / (split if w.parallel == "model" else 1)
    weights = sum(L[i + 1] * L[i] for i in range(nl)) / (split if w.parallel == "model" else 1)
    out["step"] = 2 * params + 2 * weights                       # p -= lr g; g += reg W
    return out


def seeds_flops(w: Workload) -> dict[str, float]:
    """The seeds' approximation: forward ~ 2B'H(D+C), backward ~ 2B'H(D+C) (the dominant GEMMs:
    forward and weight gradient of each layer). Deeper, the same count over every layer, and the
    backward pass adds each hidden-to-hidden layer's input gradient (as large as its forward GEMM),
    so 784-H-H-10 is forward 2B'H(D+H+C), backward 2B'H(D+2H+C)."""
    L, Bp = w.layers, w.local_batch
    forward = sum(2 * Bp * a * b for a, b in zip(L[:-1], L[1:]))
    inner = sum(2 * Bp * a * b for a, b in zip(L[1:-2], L[2:-1]))  # hidden -> hidden layers' input gradients
    return {"forward": forward, "backward": forward + inner, "batch": 2 * forward + inner}


def seeds_gemms(w: Workload) -> tuple:
    """The GEMM phases the seeds' P_flops counts (seeds_flops): every forward GEMM and every backward
    GEMM but GEMM 2, the output layer's small input gradient (C rows)."""
    nl = len(w.layers) - 1
    return tuple(forward_gemm(l) for l in range(1, nl + 1)) + tuple(
        backward_gemm(g) for g in range(1, 2 * nl) if g != 2)


def ring_bytes(payload: float, p: int) -> float:
    """Bytes each rank sends in a ring all-reduce of `payload` bytes: 2(p-1)/p * S."""
    return 2 * (p - 1) / p * payload if p > 1 else 0.0


def phase_bytes(w: Workload) -> dict[str, float]:
    """Bytes over PCIe and over the network for one batch on one rank.

    pcie_images: D x B' images (+ B' labels) host -> device when the data are staged.
    pcie_gradients: 2(HD + H + CH + C)b, gradients device -> host and back around a
        host-staged all-reduce (the seeds' count; zero when gradients stay on the GPU).
    mpi_seeds: 2(HD + H + CH + C)b, the seeds' two-process model (reduce, then send back).
    mpi_ring: the ring all-reduce, 2(p-1)/p * S with S = (HD + H + CH + C)b.
    Model parallel exchanges the C x B partial logits instead of gradients."""
    b = w.b
    out = {"pcie_images": (w.layers[0] * w.local_batch * b + w.local_batch * 8) if w.staged else 0.0}
    if w.parallel == "model":
        payload = w.layers[-1] * w.B * b
    else:
        payload = w.num_params * w.gradient_b
    exchange = w.p > 1
    out["pcie_gradients"] = 2 * payload if (w.host_allreduce and exchange) else 0.0
    out["mpi_seeds"] = 2 * payload if exchange else 0.0
    out["mpi_ring"] = ring_bytes(payload, w.p)
    out["payload"] = payload
    return out


def arithmetic_intensity(w: Workload, include_images: bool = False) -> float:
    """FLOPs / bytes moved over PCIe + MPI per batch (the seeds' AI for the modified roofline;
    images excluded by default as in Question 2.3 of the final assignment)."""
    by = phase_bytes(w)
    moved = by["pcie_gradients"] + by["mpi_seeds"] + (by["pcie_images"] if include_images else 0)
    flops = sum(seeds_flops(w)[k] for k in ("forward", "backward"))
    return flops / moved if moved else math.inf


# ------------------------------------------------------------------ rooflines
def roofline_standard(ai, peak_flops, bandwidth):
    """min(P, AI * BW): compute and data movement overlap."""
    return min(peak_flops, ai * bandwidth)


def roofline_serial(ai, peak_flops, bandwidth):
    """AI / (AI/P + 1/BW): copies that do not overlap compute (the seeds' modified roofline)."""
    return ai / (ai / peak_flops + 1 / bandwidth)


def roofline_combined(ai, peak_flops, p_pci, p_mpi):
    """The seeds' PCIe + MPI form: 1/BW = (1/P_pci + 1/P_mpi)/2 in the serial roofline."""
    return roofline_serial(ai, peak_flops, 2 / (1 / p_pci + 1 / p_mpi))


# ------------------------------------------------------------------ effective rates (Q2.4)
def effective_rates(w: Workload, medians: dict[str, float]) -> dict[str, float]:
    """P_flops, P_pci, P_mpi from median phase times in seconds (the seeds' formulas):
    P_flops = (2B'H(D+C) + 2B'H(D+C)) / (t_fwd GEMM 1 + t_fwd GEMM 2 + t_bwd GEMM 1 + t_bwd GEMM 3)
        (deeper: seeds_flops over the time of seeds_gemms)
    P_pci = 2(HD + H + CH + C)b / (t_cudaMemcpyDeviceToHost + t_cudaMemcpyHostToDevice)
    P_mpi = 2(HD + H + CH + C)b / t_MPI_Allreduce."""
    out = {}
    gemms = seeds_gemms(w)
    if all(k in medians for k in gemms):
        out["P_flops"] = seeds_flops(w)["batch"] / sum(medians[k] for k in gemms)
    two_s = 2 * w.num_params * w.gradient_b
    if "cudaMemcpyDeviceToHost" in medians and "cudaMemcpyHostToDevice" in medians:
        out["P_pci"] = two_s / (medians["cudaMemcpyDeviceToHost"] + medians["cudaMemcpyHostToDevice"])
    if "MPI_Allreduce" in medians:
        out["P_mpi"] = two_s / medians["MPI_Allreduce"]
    return out


@dataclass
class Ceilings:
    """Rates the prediction uses (FLOP/s, bytes/s, s); measured by `perflab ceilings`."""
    P_flops: float
    P_pci: float = math.inf
    P_mpi: float = math.inf
    P_mem: float = math.inf          # device memory, for the elementwise phases
    latency: float = 0.0             # per collective call
    launch: float = 0.0              # per kernel launch (eager) or graph node
    source: dict = field(default_factory=dict)


def predict(w: Workload, c: Ceilings) -> dict[str, float]:
    """Predicted seconds per batch by phase, assuming phases run one after another (no
    overlap, as in the seeds' serial model), and per epoch."""
    f, by = phase_flops(w), phase_bytes(w)
    t = {"gemm": sum(v for k, v in f.items() if "GEMM" in k) / c.P_flops}
    elementwise_bytes = sum(v for k, v in f.items() if "elementwise" in k or k == "step") * w.b * 2
    t["elementwise"] = elementwise_bytes / c.P_mem if math.isfinite(c.P_mem) else 0.0
    t["pcie"] = (by["pcie_images"] + by["pcie_gradients"]) / c.P_pci
    t["mpi"] = (by["mpi_seeds"] / c.P_mpi + c.latency) if w.p > 1 else 0.0
    t["launch"] = c.launch * (len(f) + 2)
    t["batch"] = sum(t.values())
    t["epoch"] = t["batch"] * w.batches_per_epoch
    t["flops_per_batch"] = sum(f.values())
    t["achieved_flops"] = seeds_flops(w)["batch"] / t["batch"]
    return t
