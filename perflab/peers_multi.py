"""Multi-GPU peers for `perflab bench scaling`: PyTorch DDP and JAX with the batch sharded
over the GPUs inside one jitted lax.scan. Same MLP, FP32, TF32 off, N samples an epoch split
over p GPUs (each does N/p), b = B/p samples per GPU per step.

    mpirun -n P python -m perflab.peers_multi ddp H b N      (one process a GPU)
    python -m perflab.peers_multi jax H b N P                  (one process, P GPUs)
Each prints one JSON line {"peer", "p", "epoch_ms"} (rank 0 only for DDP).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from .peers import initial, timed_epochs


def ddp(H: int, b: int, N: int, lr=0.1, reg=1e-4, warmup=2, repeats=5):
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
            W1, b1, W2, b2 = (torch.nn.Parameter(torch.tensor(p)) for p in initial(784, H, 10))
            self.W1, self.b1, self.W2, self.b2 = W1, b1, W2, b2

        def forward(self, x):
            return torch.sigmoid(x @ self.W1.T + self.b1) @ self.W2.T + self.b2

    net = torch.nn.parallel.DistributedDataParallel(MLP().cuda(), device_ids=[torch.cuda.current_device()])
    opt = torch.optim.SGD([{"params": [net.module.W1, net.module.W2], "weight_decay": reg},
                           {"params": [net.module.b1, net.module.b2], "weight_decay": 0.0}], lr=lr, foreach=True)
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


def jax_sharded(H: int, b: int, N: int, p: int, lr=0.1, reg=1e-4, warmup=2, repeats=5):
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
    X = jax.device_put(rng.random((steps, B, 784), dtype=np.float32), NamedSharding(mesh, P(None, "x")))
    Y = jax.device_put(rng.integers(0, 10, (steps, B)).astype(np.int32), NamedSharding(mesh, P(None, "x")))
    params = jax.device_put([jnp.asarray(q) for q in initial(784, H, 10)], NamedSharding(mesh, P()))

    def loss(params, xb, yb):
        W1, b1, W2, b2 = params
        logp = jax.nn.log_softmax(jax.nn.sigmoid(xb @ W1.T + b1) @ W2.T + b2)
        return -jnp.take_along_axis(logp, yb[:, None], axis=1).mean() + 0.5 * reg * (jnp.sum(W1 * W1) + jnp.sum(W2 * W2))

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
    kind, *numbers = sys.argv[1:]
    if kind == "ddp":
        ms = ddp(*map(int, numbers))
        p = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", 1)))
    else:
        ms = jax_sharded(*map(int, numbers))
        p = int(numbers[3])
    if ms is not None:
        print(json.dumps({"peer": "pytorch ddp" if kind == "ddp" else "jax sharded scan", "p": p, "epoch_ms": ms}))
