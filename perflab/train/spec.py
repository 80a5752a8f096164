"""One run spec: where and how a run executes, parsed from any of perflab's ways to say it (the CLI's commands,
a sweep's rows, the notebooks' parameters), with every rule on which settings go together in one place
(`RunSpec.validate`), so each command refuses the same combination with the same message, naming the option.

`exchange` is one value: the gradient exchange, `overlap` (NCCL in dW1 chunks under the backward pass, once
`--overlap`) and `nccl-half` included; `auto` times the fastest where a run has a choice.

The trainer's factory (perflab.train.runner.setup) takes a RunSpec. A spec is checked once: `validate` runs the
rules for each distinct set of the settings they read and remembers the ones that passed, so a spec the parse
validated (the CLI, a sweep's grid, a notebook's plan) is not checked again where the trainer is built."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from perflab.config import HALF_DTYPES, HOST_STAGED, MODES, SpecError, exchange_fields
from perflab.train import watchdog

BACKENDS = ("numpy", "cupy")
PARALLELS = ("sequential", "data", "model")
LAUNCHES = ("graph", "eager")
HOST_EXCHANGES = ("mpi", "hierarchical", "shm")  # the exchanges a CPU rank (and the staged modes) can take
GPU_ONLY_EXCHANGES = ("nccl", "overlap", "p2p", "nccl-half", "cuda-mpi")
EXCHANGES = HOST_EXCHANGES + GPU_ONLY_EXCHANGES + ("auto",)


def default_comm(backend: str, mode: str) -> str:
    """The exchange a point runs unless the sweep names one: host MPI on the CPU and in the staged modes, else NCCL."""
    return "mpi" if backend == "numpy" or mode in HOST_STAGED else "nccl"


@dataclass(frozen=True)
class RunSpec:
    backend: str = "numpy"          # numpy (the CPU reference) or cupy (one GPU a rank)
    parallel: str = "sequential"    # sequential | data | model
    mode: str = "resident"          # GPU data path: resident | staged | pipelined
    gemm: str = "cublas"            # GPU GEMM: cuBLAS or one of perflab's kernels
    exchange: str | None = None     # EXCHANGES; None: auto on GPUs resident, mpi on the CPU and in the staged modes
    dtype: str = "float32"
    launch: str | None = None       # graph | eager (GPU); None: graph on GPUs, eager (what NumPy does) on the CPU
    chunks: int | None = None       # dW1 row chunks (--comm overlap, --mode pipelined); None: their default
    nets: tuple = (512,)            # hidden widths of each net, as perfmodel.net_label writes them
    batches: tuple = (3200,)        # global mini-batches
    pinned: bool = False            # staged mode: page-locked host copy of the data
    threads: int | None = None      # NumPy: BLAS threads a rank
    timeout: float | None = None    # seconds a step may wait on the other ranks (None: the watchdog's default)

    def __post_init__(self):
        if self.exchange is None:
            host = self.backend == "numpy" or self.mode != "resident"
            object.__setattr__(self, "exchange", "mpi" if host else "auto")
        if self.exchange == "auto" and (self.backend == "numpy" or self.mode != "resident"):
            object.__setattr__(self, "exchange", "mpi")  # the one exchange those runs take
        if self.launch is None:
            object.__setattr__(self, "launch", "eager" if self.backend == "numpy" else "graph")

    @property
    def gpu(self) -> bool:
        return self.backend == "cupy"

    def replace(self, **changes) -> "RunSpec":
        return dataclasses.replace(self, **changes)

    def validate(self) -> "RunSpec":
        """Every rule on which settings go together, in the order a user meets them; returns self. The rules run once
        for each distinct set of the settings they read (rule_key): a spec that passed is not checked again."""
        key = self.rule_key()
        try:
            if key in VALIDATED:
                return self
        except TypeError:  # a value no rule accepts (a list where a name goes): the rules say which
            key = None
        check(self)
        if key is not None:
            VALIDATED.add(key)
        return self

    def rule_key(self) -> tuple:
        """The settings the rules read (not nets, batches or timeout): two specs alike in these pass or fail alike."""
        return (self.backend, self.parallel, self.mode, self.gemm, self.exchange, self.dtype, self.launch, self.chunks,
                self.pinned, self.threads)

    @property
    def comm(self) -> str:
        """The exchange as the trainer's comm builds it (perflab.train.comm.for_gpu, with_strategy): NCCL for overlap."""
        return exchange_fields(self.exchange)["comm"]

    @property
    def overlap(self) -> bool:
        """NCCL's all-reduce in dW1 chunks under the backward pass (--overlap)."""
        return self.exchange == "overlap"

    @property
    def graphs(self) -> bool:
        """Each step (or epoch) captured as a CUDA graph and replayed."""
        return self.launch == "graph"

    @property
    def wait_s(self) -> float:
        """Seconds a step may wait on the other ranks (the watchdog's default where the spec names none)."""
        return self.timeout or watchdog.TIMEOUT_S

    @classmethod
    def from_point(cls, point: dict) -> "RunSpec":
        """A sweep row's point (perflab.workbook.sweep.grid) as a spec; its `comm` names the exchange."""
        return cls(backend=point["backend"], parallel=point["parallel"], mode=point["mode"], gemm=point["gemm"],
                   exchange=point.get("comm") or default_comm(point["backend"], point["mode"]), dtype=point["dtype"],
                   launch=point.get("launch") or None, nets=(point["H"],), batches=(point["B"],))

    def summary(self) -> str:
        """The run's settings in one line, as its first line shows them (emulation said where there is one)."""
        where = "NumPy" + (" (the CPU reference)" if self.dtype not in HALF_DTYPES else "") if not self.gpu else \
            f"CuPy, --mode {self.mode}, --gemm {self.gemm}, --launch {self.launch}"
        half = (f"{self.dtype} emulated in FP32 on NumPy (perflab.train.half)" if self.dtype in HALF_DTYPES
                and not self.gpu else self.dtype)
        return f"{where}, {self.parallel}, --comm {self.exchange}, {half}"


VALIDATED: set = set()  # the rule_key of every spec that passed (RunSpec.validate)


def check(spec: RunSpec) -> None:
    """The rules themselves (RunSpec.validate runs them once a spec)."""
    for name, value, allowed in (("--backend", spec.backend, BACKENDS), ("--parallel", spec.parallel, PARALLELS),
                                 ("--mode", spec.mode, MODES), ("--comm", spec.exchange, EXCHANGES),
                                 ("--launch", spec.launch, LAUNCHES)):
        if value not in allowed:
            raise SpecError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    if not spec.gpu:
        cpu_rules(spec)
    gpu_rules(spec)


def cpu_rules(spec: RunSpec) -> None:
    """NumPy: every GPU-only setting is refused, naming it and that it needs --backend cupy."""
    if spec.exchange in GPU_ONLY_EXCHANGES:
        if spec.exchange == "overlap":
            raise SpecError("--overlap overlaps an NCCL all-reduce with the backward pass: it needs --comm nccl "
                            "(--backend cupy --mode resident)")
        raise SpecError(f"--comm {spec.exchange} needs --backend cupy; on the CPU use mpi or hierarchical")
    if spec.gemm != "cublas":
        raise SpecError(f"--gemm {spec.gemm} runs perflab's CUDA kernels: it needs --backend cupy (the NumPy "
                        "backend multiplies with its BLAS)")
    if spec.mode == "pipelined":
        raise SpecError("--mode pipelined overlaps host <-> GPU copies with GPU compute: it needs --backend cupy")
    if spec.mode == "staged":
        raise SpecError("--mode staged copies each batch host -> GPU and the gradients through the host: it needs "
                        "--backend cupy (NumPy's data is in host memory: --mode resident)")
    gpu_only = {"--pinned": spec.pinned, "--launch graph": spec.launch == "graph", f"--chunks {spec.chunks}": spec.chunks}
    for option, given in gpu_only.items():
        if given:
            raise SpecError(f"{option} is a GPU setting: it needs --backend cupy (NumPy launches no kernels, copies "
                            "nothing to a GPU and exchanges whole gradients)")
    if spec.dtype in HALF_DTYPES and spec.parallel not in ("sequential", "data"):
        raise SpecError(f"--dtype {spec.dtype} trains data parallel (or on one rank); got --parallel {spec.parallel}: "
                        "use --parallel data, or --dtype float32 for model parallel")


def gpu_rules(spec: RunSpec) -> None:
    """The GPU's data paths, exchanges, GEMMs and precisions that go together (and --threads, NumPy's alone)."""
    from perflab.kernels import TF32_VARIANTS
    ex, mode = spec.exchange, spec.mode
    if spec.gpu and spec.threads:
        raise SpecError(f"--threads {spec.threads} sets NumPy's BLAS threads a rank: it needs --backend numpy (a GPU "
                        "rank's math runs on its GPU)")
    if ex == "p2p" and spec.parallel == "model":
        raise SpecError("--comm p2p exchanges the data-parallel gradient buffer; model parallel all-reduces its logits: "
                        "use --comm nccl")
    if mode != "resident" and ex in GPU_ONLY_EXCHANGES and ex != "overlap":
        raise SpecError(f"--mode {mode} exchanges gradients through the host: use --comm mpi or hierarchical")
    if ex == "overlap" and (mode != "resident" or spec.parallel == "model"):
        raise SpecError(f"--overlap overlaps an NCCL all-reduce with the backward pass: it needs --comm nccl "
                        f"(--backend cupy --mode resident, data parallel), got --mode {mode} --parallel {spec.parallel}")
    if mode == "pipelined" and spec.parallel == "model":
        raise SpecError("--mode pipelined exchanges gradients: it runs --parallel data (model parallel keeps the data "
                        "on the GPU: --mode resident)")
    if ex == "nccl-half" and spec.dtype not in HALF_DTYPES:
        raise SpecError(f"--comm nccl-half exchanges the gradients in the run's half precision: it needs --dtype "
                        f"bfloat16 or float16, got --dtype {spec.dtype} (use --comm nccl)")
    half_wgmma = spec.gemm == "wgmma" and spec.dtype in HALF_DTYPES  # perflab's own BF16/FP16 GEMM
    if spec.gemm in TF32_VARIANTS and spec.dtype != "float32" and not half_wgmma:
        raise SpecError(f"--gemm {spec.gemm} runs on TF32 tensor cores from float32 operands: it needs --dtype float32"
                        + (" (or, wgmma only, bfloat16 or float16)" if spec.gemm == "wgmma" else "")
                        + f", got --dtype {spec.dtype}")
    if spec.gpu:  # its HalfError is a SpecError (and the GPUError FusedGPU raises for it)
        from perflab.train.gpu import check_half
        check_half(spec.dtype, spec.parallel, mode, spec.gemm, ex)
