"""Multi-GPU scaling in one harness: perflab's data-parallel trainer, PyTorch DDP, and JAX with
the batch sharded over the GPUs inside one jitted lax.scan. Same MLP, FP32, TF32 off, N samples
an epoch split over p GPUs (each does N/p), b = B/p samples per GPU per step; each timed as the
median of REPEATS epochs after WARMUP (the first epochs on several GPUs pay NCCL's set-up:
docs/DECISIONS.md, D10).

    mpirun -n P python -m perflab.measure.peers_multi perflab H b N [staged|pipelined] [overlap|p2p|nccl-half] [no-graphs] [step-graphs] [model] [bf16]
    mpirun -n P python -m perflab.measure.peers_multi ddp H b N        (one process a GPU)
    python -m perflab.measure.peers_multi jax H b N P [fp32|bf16]        (one process, P GPUs)
H is one width (512) or a deeper net's widths joined by '-' (1024-1024: 784-1024-1024-10).
Each prints one JSON line {"peer", "H", "b", "p", "N", "epoch_ms", and machine_stamp's} (from rank 0; perflab's also how its
step launched: graphs, epoch_graph, which perflab validate needs to predict the point). perflab's `model` flag
runs model parallel (H split over the GPUs, every GPU the whole batch of p x b): the same samples
per step and per epoch as data parallel, split the other way. `step-graphs`: a CUDA graph a step
(the all-reduce and update launched after it) instead of one graph an epoch with NCCL inside.
`overlap` exchanges dW1 in 2 row chunks since git ccc2ce6 (4 before; 2 are faster: docs/DECISIONS.md, D11). `p2p`: --comm p2p, the peers' gradients read over NVLink and applied in
one kernel, instead of NCCL's all-reduce and the update. perflab's flags parse into the RunSpec of the run
(perflab_spec): a combination RunSpec refuses is refused with its message before MPI starts or a GPU is touched.
"""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import numpy as np

from perflab.measure.peers import initial, jax_loss, net_name, timed_epochs

if TYPE_CHECKING:
    from perflab.train.spec import RunSpec

WARMUP, REPEATS = 3, 7
PERFLAB_FLAGS = ("staged", "pipelined", "overlap", "p2p", "nccl-half", "no-graphs", "step-graphs", "model", "bf16")
EXCHANGE_FLAGS = ("overlap", "p2p", "nccl-half")  # a run takes at most one; none: NCCL (host MPI when staged)


def machine_stamp() -> dict:
    """What a harness line carries of where and when it ran (the GPU, their count, the commit, the date
    and the boot, by which validation finds the ceilings measured beside it)."""
    from perflab.results import machine_metadata
    meta = machine_metadata()
    return {"gpu": meta.get("gpu"), "gpus": meta.get("gpu_count"), "git_commit": meta["git_commit"],
            "date": meta["date"][:10], "boot": meta["boot"]}


def net_width(text: str):
    """'512' -> 512; '1024-1024' -> (1024, 1024): the harness's H argument."""
    from perflab.analysis.perfmodel import widths
    hidden = widths(text)
    return hidden[0] if len(hidden) == 1 else hidden


def perflab_mode(flags) -> str:
    return "staged" if "staged" in flags else "pipelined" if "pipelined" in flags else "resident"


def perflab_name(flags) -> str:
    """'perflab resident', 'perflab resident, overlap', 'perflab staged', 'perflab pipelined',
    'perflab resident, model parallel': the labels the report reads."""
    named = {"no-graphs": "no graphs", "step-graphs": "a graph a step", "model": "model parallel"}
    return ", ".join([f"perflab {perflab_mode(flags)}",
                      *(named.get(f, f) for f in flags if f not in ("staged", "pipelined"))])


def perflab_spec(flags) -> RunSpec:
    """The RunSpec of perflab's flags, validated, or SystemExit naming the flags and, for a combination RunSpec
    refuses, its message. The harness's own limits stay here: one mode and one exchange a run, model parallel on
    the fused resident trainer (perflab_epoch builds no other) and step-graphs (a graph a step, not an epoch) resident."""
    from perflab.train.spec import RunSpec, SpecError
    flags = list(flags)
    odd = [f for f in flags if f not in PERFLAB_FLAGS]
    if odd:
        raise SystemExit(f"unknown perflab flag(s) {odd}; allowed: {PERFLAB_FLAGS}")
    staged = {"staged", "pipelined"} & set(flags)
    twice = [what for what, given in (("staged and pipelined are two modes", len(staged) > 1),
                                      (f"{' and '.join(sorted(set(EXCHANGE_FLAGS) & set(flags)))} are "
                                       "several exchanges", len(set(EXCHANGE_FLAGS) & set(flags)) > 1)) if given]
    if twice:
        raise SystemExit(f"perflab flags {flags} do not go together: {', '.join(twice)}; a run takes one")
    mode = perflab_mode(flags)
    exchange = next((f for f in EXCHANGE_FLAGS if f in flags), "nccl" if mode == "resident" else "mpi")
    try:
        spec = RunSpec(backend="cupy", parallel="model" if "model" in flags else "data", mode=mode, exchange=exchange,
                       launch="eager" if "no-graphs" in flags else "graph",
                       dtype="bfloat16" if "bf16" in flags else "float32").validate()
    except SpecError as exc:
        raise SystemExit(f"perflab flags {flags} do not go together: {exc}") from None
    resident_only = {"model": "model parallel (its fused trainer)", "step-graphs": "step-graphs (a graph a step "
                     "instead of one an epoch)"}
    given = [resident_only[f] for f in resident_only if f in flags]
    if staged and given:
        raise SystemExit(f"perflab flags {flags} do not go together: the harness runs {' and '.join(given)} with the "
                         f"data resident, not {min(staged)}")
    return spec


def perflab_on_gpus(H: int, b: int, N: int, *flags: str, lr=0.1, reg=1e-4, warmup=WARMUP, repeats=REPEATS):
    """perflab's fused trainer, data parallel (model parallel with the `model` flag), NCCL (host MPI
    when staged or pipelined), one process a GPU: the run perflab_spec parses the flags into."""
    spec = perflab_spec(flags)  # before MPI starts
    from mpi4py import MPI

    from perflab.config import HALF_DTYPES
    from perflab.measure.peers import perflab_epoch
    from perflab.train.comm import MPIComm, for_gpu
    from perflab.train.gpu import select_device
    world = MPIComm(MPI.COMM_WORLD)
    select_device(world)
    half = spec.dtype if spec.dtype in HALF_DTYPES else None  # nccl-half exchanges in it
    comm = for_gpu(world, spec.comm, half=half)  # the host-staged modes exchange through MPI
    rng = np.random.default_rng(0)
    X, y = rng.random((N, 784), dtype=np.float32), rng.integers(0, 10, N)
    launched = {}
    ms = perflab_epoch(X, y, H, b * world.size, lr, reg, warmup, repeats, graphs=spec.graphs, comm=comm,
                       mode=spec.mode, overlap=spec.overlap, epoch_graphs="step-graphs" not in flags,
                       parallel=spec.parallel, launched=launched, dtype=spec.dtype)
    return (ms, launched) if world.rank == 0 else (None, launched)


def ddp(H: int, b: int, N: int, lr=0.1, reg=1e-4, warmup=WARMUP, repeats=REPEATS):
    import torch
    import torch.distributed as dist
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", 0)))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", 1)))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=size)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ParameterList(torch.nn.Parameter(torch.tensor(p)) for p in initial(784, H, 10))

        def forward(self, x):
            p = self.layers
            for W, b_ in zip(p[0:-2:2], p[1:-2:2]):
                x = torch.sigmoid(x @ W.T + b_)
            return x @ p[-2].T + p[-1]

    net = torch.nn.parallel.DistributedDataParallel(MLP().cuda(), device_ids=[torch.cuda.current_device()])
    layers = list(net.module.layers)
    opt = torch.optim.SGD([{"params": layers[0::2], "weight_decay": reg},
                           {"params": layers[1::2], "weight_decay": 0.0}], lr=lr, foreach=True)
    rng = np.random.default_rng(rank)
    n = N // size
    X = torch.tensor(rng.random((n, 784), dtype=np.float32), device="cuda")
    y = torch.tensor(rng.integers(0, 10, n), device="cuda")

    def epoch():
        for s in range(0, n, b):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(net(X[s:s + b]), y[s:s + b]).backward()
            opt.step()

    def sync():
        torch.cuda.synchronize()
        dist.barrier()
    ms = timed_epochs(epoch, sync, warmup, repeats)
    dist.destroy_process_group()
    return ms if rank == 0 else None


def jax_sharded(H: int, b: int, N: int, p: int, precision: str = "fp32", lr=0.1, reg=1e-4, warmup=WARMUP,
                repeats=REPEATS):
    """`precision` "bf16": mixed precision as perflab.measure.peers.jax_setup writes it (the weights cast to bfloat16
    each step, the images held in bfloat16, the logits and loss in FP32); "fp32": full FP32."""
    if precision not in ("fp32", "bf16"):
        raise SystemExit(f"jax sharded scan runs fp32 or bf16, got {precision!r}")
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    jax.config.update("jax_default_matmul_precision", "highest")
    devices = jax.devices()[:p]
    mesh = Mesh(np.array(devices), ("x",))
    B = b * p
    steps = N // B
    rng = np.random.default_rng(0)
    compute = jnp.bfloat16 if precision == "bf16" else jnp.float32
    X = jax.device_put(rng.random((steps, B, 784), dtype=np.float32).astype(compute), NamedSharding(mesh, P(None, "x")))
    Y = jax.device_put(rng.integers(0, 10, (steps, B)).astype(np.int32), NamedSharding(mesh, P(None, "x")))
    params = jax.device_put([jnp.asarray(q) for q in initial(784, H, 10)], NamedSharding(mesh, P()))

    loss = jax_loss(jax, jnp, reg, compute)

    @jax.jit
    def epoch_fn(params, X, Y):
        def step(params, batch):
            grads = jax.grad(loss)(params, *batch)
            return [q - lr * g for q, g in zip(params, grads)], None
        return jax.lax.scan(step, params, (X, Y))[0]
    state = {"p": params}

    def epoch():
        state["p"] = epoch_fn(state["p"], X, Y)
    return timed_epochs(epoch, lambda: jax.block_until_ready(state["p"]), warmup, repeats)


if __name__ == "__main__":
    kind, net, *args = sys.argv[1:]
    H = net_width(net)
    p = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", 1)))  # the MPI launchers' world size
    launched = {}
    if kind == "perflab":
        b, N, *flags = args
        (ms, launched), kind = perflab_on_gpus(H, int(b), int(N), *flags), perflab_name(flags)
    elif kind == "ddp":
        ms, kind = ddp(H, *map(int, args)), "pytorch ddp"
    elif kind == "jax":
        precision = args[3] if len(args) > 3 else "fp32"
        ms, p, kind = jax_sharded(H, *map(int, args[:3]), precision), int(args[2]), \
            "jax sharded scan" + (" (bf16)" if precision == "bf16" else "")
    else:
        raise SystemExit(f"unknown peer {kind!r}: perflab, ddp or jax (see the module's docstring)")
    if ms is not None:
        print(json.dumps({"peer": kind, "H": H if isinstance(H, int) else net_name(H), "b": int(args[0]), "p": p,
                          "N": int(args[1]), "precision": "bf16" if "bf16" in args else "fp32", "epoch_ms": ms,
                          **launched, **machine_stamp()}))
