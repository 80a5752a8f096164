"""What each precision costs, measured (issue 53's accuracy questions):

  weights_against_float64   a net trained a few epochs from one initialisation in FP32, TF32 (perflab's wgmma
                            GEMMs), 3xTF32 (x3tf32), BF16 and FP16 on the GPU, each parameter against the
                            float64 NumPy reference's (relative Frobenius error)
  fp16_gradient_loss        one batch's gradient in FP16 at trained weights (where gradients are small),
                            without a loss scale and with one, against the FP32 step's: the share of the
                            first hidden layer's gradient flushed to zero and each parameter's error

    python -m perflab.workbook.precision --out DIR     (on a GPU; rows to DIR/precision.jsonl)
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from perflab.config import HALF_CAPABILITY, Config

PRECISIONS = {"FP32": ("float32", "cublas"), "TF32": ("float32", "wgmma"), "3xTF32": ("float32", "x3tf32"),
              "BF16": ("bfloat16", "cublas"), "FP16": ("float16", "cublas")}
CPU_PRECISIONS = {"FP32": ("float32", "cublas"), "BF16 (emulated)": ("bfloat16", "cublas"),
                  "FP16 (emulated)": ("float16", "cublas")}  # NumPy: half precision's rounding, not its speed


def precisions_here(backend: str, capability: str | None = None) -> dict:
    """The precisions this machine runs: on a GPU FP32 and FP16, and from compute capability 8.0 (TF32 tensor
    cores) TF32 and 3xTF32 (Hopper's wgmma kernels, else perflab's tf32 and cuBLAS's 3xTF32) and BF16; on
    NumPy FP32 and the emulated half step."""
    if backend == "numpy":
        return dict(CPU_PRECISIONS)
    if capability is None or int(capability) < HALF_CAPABILITY["bfloat16"]:  # TF32's tensor cores came with BF16's
        return {"FP32": ("float32", "cublas"), "FP16": ("float16", "cublas")}
    hopper = capability == "90"
    return {"FP32": ("float32", "cublas"), "TF32": ("float32", "wgmma" if hopper else "tf32"),
            "3xTF32": ("float32", "x3tf32" if hopper else "cublas-x3tf32"), "BF16": ("bfloat16", "cublas"),
            "FP16": ("float16", "cublas")}
LOSS_SCALES = (1.0, 2.0 ** 16)  # none, and where float16's dynamic scale starts


def reference_params(cfg: Config) -> list:
    """The float64 NumPy reference's parameters after cfg's epochs (its own data, in float64)."""
    from perflab import data
    from perflab.train import loop, model
    cfg64 = replace(cfg, dtype="float64")
    train = data.load(cfg64)[0]
    return loop.fit(cfg64, loop.Sequential(cfg64, model.init_params(cfg64.layer_sizes, "float64", cfg64.seed),
                                           train.X, train.y), progress=False).params


def run_specs(precisions: dict, backend: str) -> dict:
    """Each precision's run as a RunSpec (one rank, the data resident; NCCL's exchange on a GPU, as one rank takes
    it), validated: a precision the trainer would refuse on this backend (a GPU GEMM on NumPy, a half precision
    the GPU step cannot make) is refused here with RunSpec's message, before anything trains."""
    from perflab.train.spec import RunSpec
    return {name: RunSpec(backend=backend, parallel="sequential", gemm=gemm, dtype=dtype,
                          exchange="nccl" if backend == "cupy" else None).validate()
            for name, (dtype, gemm) in precisions.items()}


def weights_against_float64(cfg: Config, precisions: dict = PRECISIONS, backend: str = "cupy", log=print) -> list[dict]:
    """A row a precision: each parameter's relative error against the float64 reference after cfg's epochs,
    the worst of them, and the run's final loss (same data, same initial weights, same batches). Every
    precision's run is validated (run_specs) before the reference trains."""
    from perflab.train import model
    from perflab.train.comm import Serial
    from perflab.train.runner import relative_error, train_on_ranks
    specs = run_specs(precisions, backend)
    reference = reference_params(cfg)
    names = model.param_names(len(cfg.hidden_sizes) + 1)
    rows = []
    for name, (dtype, gemm) in precisions.items():
        history, trainer = train_on_ranks(replace(cfg, dtype=dtype), "sequential", Serial(), specs[name], log=None)
        trainer.close()
        errors = {n: relative_error(p, r) for n, p, r in zip(names, history.params, reference)}
        rows.append({"precision": name, "dtype": dtype, "gemm": gemm, "max_rel_error": max(errors.values()),
                     "errors": errors, "final_loss": history.final_loss, "epoch_seconds": history.epoch_seconds,
                     "backend": backend, **cfg.to_dict()})
        log(f"{name:7s} worst relative error against float64 {rows[-1]['max_rel_error']:.2e}")
    return rows


def table(rows: list[dict]):
    """weights_against_float64's rows as a table: each parameter's error, the worst, and (where timed) ms an epoch."""
    import pandas as pd
    return pd.DataFrame([{"precision": r["precision"], "GEMMs": r["gemm"], "dtype": r["dtype"],
                          **{f"{n} error": v for n, v in r["errors"].items()}, "max_rel_error": r["max_rel_error"],
                          **({"epoch_seconds": r["epoch_seconds"]} if "epoch_seconds" in r else {})} for r in rows])


def trained_params(cfg: Config, epochs: int = 15) -> list:
    """The weights of an FP32 run of `epochs` on the GPU (the accuracy runs' length): late in training, where
    the gradients are small."""
    from perflab.train.comm import Serial
    from perflab.train.runner import train_on_ranks
    from perflab.train.spec import RunSpec
    history, trainer = train_on_ranks(replace(cfg, dtype="float32", num_epochs=epochs), "sequential", Serial(),
                                      RunSpec(backend="cupy", exchange="nccl"), log=None)
    trainer.close()
    return history.params


def fp16_gradient_loss(cfg: Config, params: list, scales=LOSS_SCALES, smaller: float = 1.0) -> list[dict]:
    """At `params` (trained: small gradients), one batch's gradient by the fused FP16 step at each loss scale
    (divided by it again) against the fused FP32 step's: the share of the first hidden layer's gradient dz_1
    (held in FP16) flushed to zero where FP32's is not, and each parameter's relative error. `smaller`
    divides the loss too (gradients that much smaller, as further on in training). On the GPU."""
    import cupy as cp

    from perflab import data
    from perflab.train import model
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU
    from perflab.train.runner import relative_error
    train = data.load(replace(cfg, dtype="float32"))[0]
    flat = cp.asarray(np.concatenate([np.asarray(p, np.float32).ravel() for p in params]))
    B, H = cfg.batch_size, cfg.hidden_sizes[0]

    def gradient(dtype: str, scale: float) -> tuple[list, np.ndarray]:
        trainer = FusedGPU(replace(cfg, dtype=dtype), train.X, train.y, Serial())
        with trainer.stream:  # (the trainer's stream does not wait for the default one)
            trainer.set_weights(flat)
            if trainer.scaled:
                trainer.scale[...] = scale
            Xb, yb, first = trainer.batch_images(slice(0, B))  # as training runs a batch (widened where half: D59)
            trainer.gradients(Xb, yb, B * smaller, want_loss=False, first=first)
        trainer.sync()
        n = Xb.shape[1]
        dz = trainer.dz[0][:H * n].reshape(H, n)[:, first:first + B].ravel()
        out = [g.get() / scale for g in trainer.grads], dz.get().astype(np.float32) / scale
        trainer.close()
        return out
    fp32, dz32 = gradient("float32", 1.0)
    names = model.param_names(len(cfg.hidden_sizes) + 1)
    rows = []
    for scale in scales:
        g, dz = gradient("float16", scale)
        lost = float(((dz == 0) & (dz32 != 0)).sum() / max(1, (dz32 != 0).sum()))
        rows.append({"loss_scale": scale, "loss_divided_by": smaller, "dz1_flushed_to_zero": lost,
                     "errors": {n: relative_error(a, b) for n, a, b in zip(names, g, fp32)}, **cfg.to_dict()})
    return rows


def main(argv=None) -> None:
    from perflab.commands.options import positive
    from perflab.config import ACCURACY, ConfigError
    from perflab.results import machine_metadata
    parser = argparse.ArgumentParser(prog="python -m perflab.workbook.precision", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for precision.jsonl")
    parser.add_argument("--hidden-size", type=positive, nargs="+", default=[1024], metavar="H")
    parser.add_argument("--num-epochs", type=positive, default=2, help="epochs before the weights are compared (default 2)")
    args = parser.parse_args(argv)
    try:
        cfg = Config(**{**ACCURACY, "hidden_sizes": tuple(args.hidden_size), "num_epochs": args.num_epochs,
                        "dataset": "mnist", "test_size": 0})
    except ConfigError as exc:
        parser.error(str(exc))
    rows = [{"table": "weights against float64", **r} for r in weights_against_float64(cfg)]
    rows += [{"table": "float16 gradient", **r} for r in fp16_gradient_loss(cfg, trained_params(cfg))]
    args.out.mkdir(parents=True, exist_ok=True)
    meta = machine_metadata()
    with open(args.out / "precision.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps({**r, "machine": meta}) + "\n")
    print(f"wrote {args.out / 'precision.jsonl'}")


if __name__ == "__main__":
    main()
