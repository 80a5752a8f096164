"""Validated hyperparameters, named as in the seeds (D, H, C, reg, learning_rate, N, epochs, B).

The defaults are the seeds' performance workload, `{784, 512, 10, 1e-4, 1e-4, 38400, 1, 3200}`
(CME 213 HW6): the point the roofline analysis is about. They train too little to classify
well; `ACCURACY` holds settings that reach test precision >= 0.97 on MNIST.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

DTYPES = ("float32", "float64")
HALF_CAPABILITY = {"bfloat16": 80, "float16": 70}  # the compute capability (x10) whose tensor cores take each
HALF_IMPLS = {"bfloat16": "cublas-bf16", "float16": "cublas-fp16"}  # their GEMMs' names in ceilings rows (and the half step's)
HALF_DTYPES = ("bfloat16", "float16")  # mixed precision: FP32 master weights, GEMM operands and products in half
MODES = ("resident", "staged", "pipelined")  # GPU data paths (perflab.train.gpu, perflab.train.pipelined)
HOST_STAGED = ("staged", "pipelined")         # the modes whose images and gradients pass through the host
OVERLAP_CHUNKS = 2  # --overlap: dW1 in 2 row chunks, faster than 4 (docs/DECISIONS.md, D11)
PIPELINED_CHUNKS = 4  # --mode pipelined: dW1 in 4 row chunks, each exchanged as backward GEMM 3 makes it
# resident GPU data parallel's gradient exchanges: what a sweep's --comm names and --comm auto times
GPU_EXCHANGES = ("nccl", "overlap", "p2p")
TWO_SHOT_FROM = 3  # --comm p2p two-shot from these ranks: one-shot pulls p - 1 gradients into each GPU, two-shot 2 (p - 1) / p
TWO_SHOT_IMPL = "p2p two-shot"  # how a ceilings row of the two-shot kernel names it (the predictor reads which was timed)


def exchange_fields(name: str) -> dict:
    """The comm and overlap an exchange name (RunSpec.exchange: one of GPU_EXCHANGES, mpi, ...) splits into for the
    trainer: `overlap` is NCCL with --overlap."""
    return {"comm": "nccl", "overlap": True} if name == "overlap" else {"comm": name, "overlap": False}


DATASET_SHAPES = {"mnist": (784, 10, 60000, 10000), "fashion-mnist": (784, 10, 60000, 10000)}


class ConfigError(ValueError):
    """A hyperparameter is out of range; the message names it, its value and what is allowed."""


class SpecError(ConfigError):
    """Settings that cannot go together (perflab.train.spec.RunSpec.validate); the message names the options and what
    to use instead. Here, below the trainers, so that perflab.train.gpu's HalfError can be one too."""


@dataclass(frozen=True)
class Config:
    input_size: int = 784            # D
    hidden_sizes: tuple = (512,)     # H (one hidden layer) or H1, H2, ... (deeper)
    num_classes: int = 10            # C
    reg: float = 1e-4                # L2 on weights: loss += reg/2 * sum ||W||^2
    learning_rate: float = 1e-4
    train_size: int = 38400          # N
    num_epochs: int = 1
    batch_size: int = 3200           # B (global, over all ranks)
    dtype: str = "float64"
    seed: int = 0
    test_size: int = 10000
    validation_size: int = 0         # held out from the training set, after the first N samples
    print_every: int = 0             # print the loss every this many batches; 0: once per epoch
    dataset: str = "mnist"
    shuffle: bool = False            # reshuffle the training set every epoch

    def __post_init__(self):
        if isinstance(self.hidden_sizes, int):
            object.__setattr__(self, "hidden_sizes", (self.hidden_sizes,))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        validate(self)

    @property
    def hidden_size(self) -> int:
        return self.hidden_sizes[0]

    @property
    def storage_dtype(self) -> str:
        """The dtype the parameters and data are held in: a half-precision run keeps FP32 masters."""
        return "float32" if self.dtype in HALF_DTYPES else self.dtype

    @property
    def layer_sizes(self) -> tuple:
        """(D, H1, ..., C): W_l is layer_sizes[l] x layer_sizes[l-1]."""
        return (self.input_size, *self.hidden_sizes, self.num_classes)

    @property
    def num_batches(self) -> int:
        """Batches per epoch; the last one holds N % B samples when B does not divide N."""
        return -(-self.train_size // self.batch_size)

    def memory_bytes(self, resident: bool = True) -> int:
        """About what one process of the run holds: the parameters three times (weights, gradients, the
        update's), the activations and their gradients at B, and the data (all of it where it is resident,
        else a batch). Checked before anything is allocated, on the GPU and on the host."""
        item = {"float32": 4, "float64": 8}[self.storage_dtype]
        sizes = self.layer_sizes
        params = sum(a * b + a for a, b in zip(sizes[1:], sizes[:-1]))
        activations = self.batch_size * sum(sizes) * 3
        data = self.input_size * (self.train_size + self.test_size) if resident else self.input_size * self.batch_size
        return (3 * params + activations + data) * item

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d

    def fingerprint(self) -> str:
        """Short hash of the hyperparameters, compared across MPI ranks."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def replace(self, **changes) -> "Config":
        return dataclasses.replace(self, **changes)


# Settings for accuracy (not speed): smaller batches and a large learning rate converge in
# a few epochs; a lighter L2 than the seeds' 1e-4, at which 784-512-10 plateaus near 0.964.
ACCURACY = dict(hidden_sizes=(512,), reg=1e-6, learning_rate=1.0, train_size=60000,
                num_epochs=15, batch_size=50, shuffle=True)


def positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def validate(cfg: Config) -> None:
    for name in ("input_size", "num_classes", "train_size", "num_epochs", "batch_size"):
        positive_int(name, getattr(cfg, name))
    if not cfg.hidden_sizes:
        raise ConfigError("hidden_sizes must name at least one hidden layer, got ()")
    for h in cfg.hidden_sizes:
        positive_int("hidden_size", h)
    if cfg.num_classes < 2:
        raise ConfigError(f"num_classes must be at least 2 (softmax over classes), got {cfg.num_classes}")
    if cfg.batch_size > cfg.train_size:
        raise ConfigError(f"batch_size B={cfg.batch_size} is larger than train_size N={cfg.train_size}; "
                          f"allowed: 1 <= B <= N")
    if cfg.dtype not in DTYPES + HALF_DTYPES:
        raise ConfigError(f"dtype must be one of {DTYPES + HALF_DTYPES}, got {cfg.dtype!r}")
    if not cfg.learning_rate > 0:
        raise ConfigError(f"learning_rate must be positive, got {cfg.learning_rate!r}")
    if not cfg.reg >= 0:
        raise ConfigError(f"reg must be zero or positive, got {cfg.reg!r}")
    if isinstance(cfg.test_size, bool) or not isinstance(cfg.test_size, int) or cfg.test_size < 0:
        raise ConfigError(f"test_size must be an integer >= 0, got {cfg.test_size!r}")
    if isinstance(cfg.validation_size, bool) or not isinstance(cfg.validation_size, int) or cfg.validation_size < 0:
        raise ConfigError(f"validation_size must be an integer >= 0, got {cfg.validation_size!r}")
    if isinstance(cfg.print_every, bool) or not isinstance(cfg.print_every, int) or cfg.print_every < 0:
        raise ConfigError(f"print_every must be an integer >= 0 (0: once per epoch), got {cfg.print_every!r}")
    if cfg.dataset not in (*DATASET_SHAPES, "synthetic"):
        raise ConfigError(f"dataset must be one of {(*DATASET_SHAPES, 'synthetic')}, got {cfg.dataset!r}")
    if cfg.dataset in DATASET_SHAPES:
        d, c, n_train, n_test = DATASET_SHAPES[cfg.dataset]
        if cfg.input_size != d or cfg.num_classes != c:
            raise ConfigError(f"{cfg.dataset} has input_size {d} and num_classes {c}, got "
                              f"{cfg.input_size} and {cfg.num_classes}; use --dataset synthetic for other shapes")
        if cfg.train_size + cfg.validation_size > n_train:
            got = f"{cfg.train_size} + {cfg.validation_size}" if cfg.validation_size else f"{cfg.train_size}"
            what = "train_size + validation_size" if cfg.validation_size else "train_size"
            raise ConfigError(f"{what} must be at most {n_train} for {cfg.dataset}, got {got}")
        if cfg.test_size > n_test:
            raise ConfigError(f"test_size must be at most {n_test} for {cfg.dataset}, got {cfg.test_size}")
