"""The same MLP epoch in the frameworks a practitioner would pick, for `perflab bench train`.

Every peer: 784-H-10 or deeper (H a tuple of widths: 784-H1-H2-...-10), sigmoid, softmax + cross-entropy, L2 (reg/2 ||W||^2 on weights), plain
SGD, data resident on the GPU, float32 with TF32 off (a peer named "(TF32)" or "(3xTF32)": its
matmuls on the tensor cores so, the peers of perflab's wgmma and x3tf32 GEMMs), N samples an epoch in batches of B (the
last batch keeps N % B). Each returns the median milliseconds of an epoch over `repeats`
timed epochs after `warmup` epochs, synchronized with the device. A peer whose library is
missing raises PeerMissing and is skipped with a message.
"""
from __future__ import annotations

import functools

import numpy as np

from perflab.analysis.perfmodel import net_name, widths


class PeerMissing(RuntimeError):
    pass


def batches(n: int, b: int):
    return [(s, min(s + b, n)) for s in range(0, n, b)]


def timed_epochs(run_epoch, sync, warmup: int, repeats: int) -> float:
    """Median milliseconds of an epoch, the device synchronized around each."""
    from perflab.timing import median_seconds
    return 1e3 * median_seconds(run_epoch, repeats, warmup, sync)


def initial(D, H, C, seed=0):
    from perflab.train import model
    return [p.astype(np.float32) for p in model.init_params((D, *widths(H), C), "float64", seed)]


def gemm_flops(N: int, D: int, H, C: int = 10) -> int:
    """FLOPs of an epoch's GEMMs: each layer's forward GEMM and weight gradient, and past the first
    layer its input gradient (2 M N K each)."""
    sizes = (D, *widths(H), C)
    return sum((4 if l == 0 else 6) * N * fan_in * fan_out for l, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])))


# ----------------------------------------------------------------------------- perflab
def perflab_epoch(X, y, H, B, lr, reg, warmup=2, repeats=5, gemm="cublas", graphs=True, fuse_output=True,
                  fuse_backward=True, comm=None, mode="resident", overlap=False, parallel="data", epoch_graphs=True,
                  launched=None, dtype="float32"):
    """perflab's fused trainer, as loop.fit runs it (one graph an epoch where it can; `epoch_graphs`
    False: a graph a batch); with an MPI comm (one rank a GPU), data (or model) parallel over its
    ranks, each epoch ended by a barrier so it times the slowest rank. A `launched` dict is filled
    with how the trainer ran (graphs: its steps graphed; epoch_graph: its epochs one graph each). `dtype`
    "bfloat16" or "float16": its mixed-precision step."""
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU
    from perflab.train.model_parallel_gpu import FusedModelParallel
    comm = comm or Serial()
    N, D = X.shape
    cfg = Config(dataset="synthetic", input_size=D, hidden_sizes=widths(H), num_classes=10, train_size=N,
                 batch_size=B, learning_rate=lr, reg=reg, dtype=dtype, test_size=0)
    if parallel == "model":
        trainer = FusedModelParallel(cfg, np.asfortranarray(X.T), y, comm, gemm, graphs)
    elif mode == "pipelined":
        from perflab.train.pipelined import Pipelined
        trainer = Pipelined(cfg, np.asfortranarray(X.T), y, comm, gemm, graphs)
    else:
        trainer = FusedGPU(cfg, np.asfortranarray(X.T), y, comm, mode, gemm, graphs,
                           fuse_output=fuse_output, fuse_backward=fuse_backward, overlap=overlap)
    trainer.want_loss = False
    trainer.epoch_graphs = epoch_graphs
    slices = [slice(s, e) for s, e in batches(N, B)]

    def epoch():
        if trainer.graphs_an_epoch(slices):
            return trainer.epoch(slices, want_loss=False)
        for i, s in enumerate(slices):
            trainer.upcoming = slices[(i + 1) % len(slices)]  # the pipelined trainer copies it in meanwhile
            trainer.batch(s)

    def sync():
        trainer.sync()
        comm.barrier()
    ms = timed_epochs(epoch, sync, warmup, repeats)
    if launched is not None:
        launched.update(graphs=bool(trainer.graphs), epoch_graph=bool(trainer.epochs_graphed))
    return ms


# ----------------------------------------------------------------------------- PyTorch
def fp32_torch(tf32: bool = False):
    """torch, on a GPU, with TF32 off (every FP32 peer computes in FP32; tf32: matmuls in TF32 on
    the tensor cores), or PeerMissing saying why not."""
    try:
        import torch
    except ImportError as exc:
        raise PeerMissing(f"PyTorch not installed ({exc})") from None
    if not torch.cuda.is_available():
        raise PeerMissing("PyTorch sees no GPU")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return torch


def torch_setup(X, y, H, lr, reg, tf32=False, autocast: str | None = None):
    """(torch, X, y, optimizer, loss) on the GPU; `autocast` ("bfloat16"): the forward under torch.autocast, the
    GEMMs in that precision with FP32 masters (PyTorch's mixed precision; issue 53's peer)."""
    torch = fp32_torch(tf32)
    dev = torch.device("cuda")
    params = [torch.tensor(p, device=dev, requires_grad=True) for p in initial(X.shape[1], H, 10)]
    Xd, yd = torch.tensor(X, device=dev), torch.tensor(y, device=dev)
    opt = torch.optim.SGD([{"params": params[0::2], "weight_decay": reg}, {"params": params[1::2], "weight_decay": 0.0}],
                          lr=lr, foreach=True)

    def loss_fn(xb, yb):
        with torch.autocast("cuda", dtype=getattr(torch, autocast or "bfloat16"), enabled=autocast is not None):
            a = xb
            for W, b in zip(params[0:-2:2], params[1:-2:2]):
                a = torch.sigmoid(a @ W.T + b)
            return torch.nn.functional.cross_entropy(a @ params[-2].T + params[-1], yb)
    return torch, Xd, yd, opt, loss_fn


def torch_eager(X, y, H, B, lr, reg, warmup=2, repeats=5):
    torch, Xd, yd, opt, loss_fn = torch_setup(X, y, H, lr, reg)

    def epoch():
        for s, e in batches(len(X), B):
            opt.zero_grad(set_to_none=True)
            loss_fn(Xd[s:e], yd[s:e]).backward()
            opt.step()
    return timed_epochs(epoch, torch.cuda.synchronize, warmup, repeats)


def torch_compiled(X, y, H, B, lr, reg, warmup=2, repeats=5, mode="default"):
    torch, Xd, yd, opt, loss_fn = torch_setup(X, y, H, lr, reg)
    compiled = torch.compile(loss_fn, mode=mode)
    step_opt = torch.compile(opt.step, mode=mode) if mode != "reduce-overhead" else opt.step

    def epoch():
        for s, e in batches(len(X), B):
            opt.zero_grad(set_to_none=True)
            compiled(Xd[s:e], yd[s:e]).backward()
            step_opt()
    return timed_epochs(epoch, torch.cuda.synchronize, warmup, repeats)


def torch_graph(X, y, H, B, lr, reg, warmup=2, repeats=5, tf32=False, autocast=None):
    """The whole step (forward, backward, SGD) captured with torch.cuda.graph, one graph per
    batch size; each batch is copied into the static input, then the graph is replayed."""
    torch, Xd, yd, opt, loss_fn = torch_setup(X, y, H, lr, reg, tf32, autocast)
    graphs = {}
    for n in sorted({e - s for s, e in batches(len(X), B)}):
        sx, sy = Xd[:n].clone(), yd[:n].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                loss_fn(sx, sy).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            loss_fn(sx, sy).backward()
            opt.step()
        graphs[n] = (g, sx, sy)

    def epoch():
        for s, e in batches(len(X), B):
            g, sx, sy = graphs[e - s]
            sx.copy_(Xd[s:e])
            sy.copy_(yd[s:e])
            g.replay()
    return timed_epochs(epoch, torch.cuda.synchronize, warmup, repeats)


# ----------------------------------------------------------------------------- JAX
def fp32_jax():
    """(jax, jax.numpy), on a GPU, matmuls at full FP32 precision, or PeerMissing saying why not."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        raise PeerMissing(f"JAX not installed ({exc})") from None
    jax.config.update("jax_default_matmul_precision", "highest")
    if not any(d.platform == "gpu" for d in jax.devices()):
        raise PeerMissing("JAX sees no GPU")
    return jax, jnp


def jax_loss(jax, jnp, reg, compute, precision=None):
    """The seeds' loss as a JAX user writes it, its layers in `compute` (bfloat16: the FP32 weights cast each step,
    the logits and the loss FP32), every matmul by `precision` (a dot algorithm, or None: the default)."""
    def loss(params, xb, yb):
        low = [p.astype(compute) for p in params]
        a = xb
        for W, b in zip(low[0:-2:2], low[1:-2:2]):
            a = jax.nn.sigmoid(jnp.matmul(a, W.T, precision=precision) + b)
        logits = jnp.matmul(a, low[-2].T, precision=precision).astype(jnp.float32) + params[-1]
        logp = jax.nn.log_softmax(logits)
        ce = -jnp.take_along_axis(logp, yb[:, None], axis=1).mean()
        return ce + 0.5 * reg * sum(jnp.sum(W * W) for W in params[0::2])
    return loss


def jax_setup(X, y, H, lr, reg, algorithm=None):
    """(jax, jnp, params, step, X, y) on the GPU; `algorithm` "x3" or "tf32": every matmul by XLA's
    3xTF32 or TF32 dot algorithm; "bf16": mixed precision as a JAX user writes it (jmp's policy: FP32
    masters cast to bfloat16 each step, the images held in bfloat16, every layer computed and its
    activations kept in bfloat16, the logits and loss in FP32); None: full FP32."""
    jax, jnp = fp32_jax()
    params = [jnp.asarray(p) for p in initial(X.shape[1], H, 10)]
    presets = {"x3": jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3, "tf32": jax.lax.DotAlgorithmPreset.TF32_TF32_F32}
    precision = presets.get(algorithm)
    compute = jnp.bfloat16 if algorithm == "bf16" else jnp.float32
    loss = jax_loss(jax, jnp, reg, compute, precision)

    def step(params, xb, yb):
        grads = jax.grad(loss)(params, xb, yb)
        return [p - lr * g for p, g in zip(params, grads)]
    return jax, jnp, params, step, jnp.asarray(X, dtype=compute), jnp.asarray(y.astype(np.int32))


def jax_jit(X, y, H, B, lr, reg, warmup=2, repeats=5):
    jax, jnp, params, step, Xd, yd = jax_setup(X, y, H, lr, reg)
    jstep = jax.jit(step)
    state = {"p": params}

    def epoch():
        for s, e in batches(len(X), B):
            state["p"] = jstep(state["p"], Xd[s:e], yd[s:e])
    return timed_epochs(epoch, lambda: jax.block_until_ready(state["p"]), warmup, repeats)


def jax_scan(X, y, H, B, lr, reg, warmup=2, repeats=5, algorithm=None):
    """The whole epoch as one jitted lax.scan over the full batches, then the last partial one."""
    jax, jnp, params, step, Xd, yd = jax_setup(X, y, H, lr, reg, algorithm)
    N = len(X)
    full = N // B

    @jax.jit
    def epoch_fn(params, Xd, yd):
        xs = Xd[:full * B].reshape(full, B, -1)
        ys = yd[:full * B].reshape(full, B)
        params, _ = jax.lax.scan(lambda p, b: (step(p, b[0], b[1]), None), params, (xs, ys))
        if N % B:
            params = step(params, Xd[full * B:], yd[full * B:])
        return params
    state = {"p": params}

    def epoch():
        state["p"] = epoch_fn(state["p"], Xd, yd)
    return timed_epochs(epoch, lambda: jax.block_until_ready(state["p"]), warmup, repeats)


# ----------------------------------------------------------------------------- floor
def cublas_floor(X, y, H, B, lr, reg, warmup=2, repeats=5, half=None):
    """Only the GEMMs of a step through cuBLAS (each layer's forward GEMM and weight gradient, and past
    the first layer its input gradient: five for one hidden layer), each batch's set captured once in
    a CUDA graph and replayed: no elementwise work, no update. A training step built on cuBLAS's GEMMs
    cannot be faster. (CuPy graphs and cuBLAS through ctypes: the same calls perflab's cublas path makes;
    `half` "bfloat16" or "float16": its half-precision step's, weight gradients in FP32.)"""
    try:
        import cupy as cp
    except ImportError as exc:
        raise PeerMissing(f"CuPy not installed ({exc})") from None
    from perflab import kernels
    from perflab.train.half import to_storage
    held = (lambda x: x) if half is None else (lambda x: to_storage(x, half))  # noqa: E731
    Xd = cp.asarray(held(np.asfortranarray(X.T)))  # D x N, as perflab keeps it
    W = [cp.asarray(held(p)) for p in initial(X.shape[1], H, 10)[0::2]]
    dW = [cp.empty(w.shape, cp.float32) for w in W]
    acts = [cp.empty(w.shape[0] * B, Xd.dtype) for w in W]  # each layer's output, then its input gradient
    grads = [cp.empty(w.shape[0] * B, Xd.dtype) for w in W]
    gemm = functools.partial(kernels.gemm, variant="cublas") if half is None else kernels.half_gemm
    stream = cp.cuda.Stream(non_blocking=True)
    graphs = []
    with stream:
        for s, e in batches(len(X), B):
            n = e - s
            a = [Xd[:, s:e]] + [buf[:w.shape[0] * n].reshape(w.shape[0], n) for buf, w in zip(acts, W)]
            d = [buf[:w.shape[0] * n].reshape(w.shape[0], n) for buf, w in zip(grads, W)]
            calls = [(w, a[l], a[l + 1]) for l, w in enumerate(W)]  # forward
            for l in range(len(W) - 1, -1, -1):  # backward: the weight gradient, then the input gradient
                calls.append((d[l], a[l].T, dW[l]))
                if l > 0:
                    calls.append((W[l].T, d[l], d[l - 1]))

            def gemms(calls=calls):
                for a_, b_, out in calls:
                    gemm(a_, b_, out=out)
            gemms()
            stream.begin_capture()
            gemms()
            graphs.append(stream.end_capture())

    def epoch():
        for g in graphs:
            g.launch(stream)
    return timed_epochs(epoch, stream.synchronize, warmup, repeats)


def peer(run, precision: str = "FP32", **fixed):
    """A peer of `perflab bench train`: run(X, y, H, B, lr, reg, warmup=, repeats=) with `fixed` keywords, and the
    precision its products run in (epoch_ratios sets a perflab peer against the floor and peers of its own)."""
    out = functools.partial(run, **fixed)
    out.precision = precision
    return out


PEERS = {
    "perflab": peer(perflab_epoch),
    "perflab (a graph a batch)": peer(perflab_epoch, epoch_graphs=False),
    "perflab (wgmma gemm, a graph a batch)": peer(perflab_epoch, "TF32", gemm="wgmma", epoch_graphs=False),
    "perflab (best gemm)": peer(perflab_epoch, gemm="best"),
    "perflab (output layer unfused)": peer(perflab_epoch, fuse_output=False),
    "perflab (unfused)": peer(perflab_epoch, fuse_output=False, fuse_backward=False),
    "perflab (tf32 gemm)": peer(perflab_epoch, "TF32", gemm="tf32"),
    "perflab (wgmma gemm)": peer(perflab_epoch, "TF32", gemm="wgmma"),
    "perflab (x3tf32 gemm)": peer(perflab_epoch, "3xTF32", gemm="x3tf32"),
    "pytorch eager": peer(torch_eager),
    "pytorch cuda graph": peer(torch_graph),
    "pytorch cuda graph (TF32)": peer(torch_graph, "TF32", tf32=True),
    "torch.compile default": peer(torch_compiled, mode="default"),
    "torch.compile reduce-overhead": peer(torch_compiled, mode="reduce-overhead"),
    "jax jit/batch": peer(jax_jit),
    "jax scan epoch": peer(jax_scan),
    "jax scan epoch (3xTF32)": peer(jax_scan, "3xTF32", algorithm="x3"),
    "jax scan epoch (TF32)": peer(jax_scan, "TF32", algorithm="tf32"),
    "jax scan epoch (bf16)": peer(jax_scan, "bf16", algorithm="bf16"),
    "pytorch cuda graph (bf16 autocast)": peer(torch_graph, "bf16", autocast="bfloat16"),
    "cublas 5-gemm floor": peer(cublas_floor),  # (the name of one hidden layer's five; deeper nets have more)
    "perflab (bf16)": peer(perflab_epoch, "bf16", dtype="bfloat16"),
    "perflab (fp16)": peer(perflab_epoch, "fp16", dtype="float16"),
    "perflab (bf16, backward unfused)": peer(perflab_epoch, "bf16", dtype="bfloat16", fuse_backward=False),
    "perflab (bf16, wgmma gemm)": peer(perflab_epoch, "bf16", dtype="bfloat16", gemm="wgmma"),
    "perflab (fp16, wgmma gemm)": peer(perflab_epoch, "fp16", dtype="float16", gemm="wgmma"),
    "cublas floor (bf16)": peer(cublas_floor, "bf16", half="bfloat16"),
    "cublas floor (fp16)": peer(cublas_floor, "fp16", half="float16"),
}


def run_peer(name: str, H: int, B: int, N: int, lr: float, reg: float, warmup: int, repeats: int) -> float:
    rng = np.random.default_rng(0)
    X = rng.random((N, 784), dtype=np.float32)
    y = rng.integers(0, 10, N)
    return PEERS[name](X, y, H, B, lr, reg, warmup=warmup, repeats=repeats)


def run_peer_process(module: str, args: list, timeout: int):
    """(the JSON answer of `python -m module '<args as JSON>'`, None), or (None, why there is
    none: a timeout, the crash's last line of stderr, or the peer's own "missing" message). Each
    peer runs in a process of its own: one framework's memory pool, allocator or crash cannot
    touch the next one's numbers."""
    import json
    import os
    import subprocess
    import sys
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    try:
        proc = subprocess.run([sys.executable, "-m", module, json.dumps(args)], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"no result within {timeout} s"
    answer = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not answer.startswith("{"):
        return None, (proc.stderr.strip().splitlines() or ["failed"])[-1][:300]
    result = json.loads(answer)
    return (None, result["missing"]) if "missing" in result else (result, None)


def bench_train(configs=((512, 3200), (1024, 3200), (2048, 12000)), N=60000, lr=0.1, reg=1e-4, peers=None,
                warmup=2, repeats=5, log=print, timeout=300, on_config=None):
    """Rows: one per (config, peer) with the median epoch in ms and its ratio to perflab; a config is
    (H, B) with H one width or a tuple of them (a deeper net), named in rows as net_name gives it.
    Each peer runs in a process of its own: one framework's memory pool, allocator or crash
    cannot touch the next one's numbers. on_config(rows so far) runs after each config, so a
    run cut short keeps what it finished."""
    rows = []
    for H, B in configs:
        flops = gemm_flops(N, 784, H)
        got = {}
        for name in peers or PEERS:
            result, why = run_peer_process("perflab.measure.peers", [name, widths(H), B, N, lr, reg, warmup, repeats],
                                           timeout)
            if result is None:
                log(f"peer skipped: {name} ({why})")
                continue
            got[name] = result["epoch_ms"]
            log(f"H={net_name(H)} B={B} {name}: {got[name]:.3f} ms/epoch")
        for name, ms in got.items():
            rows.append({"H": net_name(H), "B": B, "N": N, "peer": name, "epoch_ms": ms,
                         "ratio_to_perflab": ms / got["perflab"] if "perflab" in got else float("nan"),
                         "tflops": flops / ms / 1e9})
        if on_config is not None and rows:
            on_config(rows)
    return rows


FLOORS = {"FP32": "cublas 5-gemm floor", "bf16": "cublas floor (bf16)", "fp16": "cublas floor (fp16)"}


def precision(name: str) -> str:
    """The precision a peer's products run in ("FP32" for a name that is no peer here: a sheet from another version)."""
    return PEERS[name].precision if name in PEERS else "FP32"


def epoch_ratios(rows: list[dict]):
    """Each perflab peer's epoch over the cuBLAS floor of its precision and over the fastest other peer of that
    precision (a framework's, not perflab's or a floor's), a column a config: what a report quotes. None where no
    perflab peer has either beside it."""
    import pandas as pd
    epochs = pd.DataFrame(rows).pivot_table(index="peer", columns=["H", "B"], values="epoch_ms")
    out = {}
    for name in (p for p in epochs.index if p.startswith("perflab")):
        kind = precision(name)
        if FLOORS.get(kind) in epochs.index:
            out[f"{name} / {FLOORS[kind]}"] = epochs.loc[name] / epochs.loc[FLOORS[kind]]
        rivals = [p for p in epochs.index if precision(p) == kind and not p.startswith(("perflab", "cublas"))]
        if rivals:
            out[f"{name} / fastest {kind} peer"] = epochs.loc[name] / epochs.loc[rivals].min()
    return pd.DataFrame(out).T.round(3) if out else None


if __name__ == "__main__":  # one peer, one config: python -m perflab.measure.peers '[name, H, B, N, lr, reg, warmup, repeats]'
    import json
    import sys
    args = json.loads(sys.argv[1])
    try:
        print(json.dumps({"epoch_ms": run_peer(*args)}))
    except PeerMissing as exc:
        print(json.dumps({"missing": str(exc)}))
