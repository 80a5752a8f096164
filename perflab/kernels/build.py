"""Compiling perflab's .cu files (NVRTC, through CuPy) and launching what they hold: the one place
that talks to CUDA below the GEMMs (programmatic dependent launch through the driver API)."""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

i32, u64 = np.int32, np.uint64  # kernel arguments must carry their C types (int, size_t)


def pointer(x):
    """A kernel's optional array argument: the array, or a null pointer for None."""
    return u64(0) if x is None else x


KERNEL_DIR = Path(__file__).resolve().parent


class KernelError(RuntimeError):
    """A kernel was called with operands it cannot take; the message says which and why."""


def cupy():
    import cupy as cp
    return cp


def ctype(dtype) -> str:
    return ctype_of(np.dtype(dtype))


@functools.lru_cache(maxsize=None)
def ctype_of(dtype: np.dtype) -> str:
    """(Cached: a kernel's launch asks for it each time.)"""
    name = dtype.name
    if name not in ("float32", "float64"):
        raise KernelError(f"perflab kernels take float32 or float64 arrays, got {name}")
    return {"float32": "float", "float64": "double"}[name]


ARCH_OPTIONS = {"gemm_wgmma.cu": ("-arch=sm_90a",)}  # wgmma and setmaxnreg exist for sm_90a only


@functools.lru_cache(maxsize=None)
def module(source: str, names: tuple):
    """Compile one .cu file for the given template instantiations (cached per process)."""
    cp = cupy()
    code = (KERNEL_DIR / source).read_text()
    options = ("-std=c++17", f"-I{KERNEL_DIR}") + ARCH_OPTIONS.get(source, ())
    return cp.RawModule(code=code, options=options, name_expressions=names)


def multiprocessors() -> int:
    cp = cupy()
    return sm_count(cp.cuda.Device().id)


@functools.lru_cache(maxsize=None)
def sm_count(device: int) -> int:
    """Cached: cudaGetDeviceProperties costs about a millisecond, far more than a launch."""
    return cupy().cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]


class LaunchAttribute(ctypes.Structure):  # cuda.h's CUlaunchAttribute: an id, padding to 8, a 64-byte union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):  # cuda.h's CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=None)
def driver_launch():
    """(cuLaunchKernelEx, cuGetErrorName) through ctypes, or None where programmatic dependent
    launch is not to be had: a GPU before sm_90, or a driver without it."""
    if int(cupy().cuda.Device().compute_capability) < 90:
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        launch, name = cuda.cuLaunchKernelEx, cuda.cuGetErrorName
    except (OSError, AttributeError):
        return None
    launch.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return launch, name


PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION


SCALAR_CTYPES = {np.int32: ctypes.c_int32, np.float32: ctypes.c_float, np.float64: ctypes.c_double,
                 np.uint64: ctypes.c_uint64}  # (a uint64 stands for a pointer: a null one)


def function_pointer(kernel) -> ctypes.c_void_p:
    """The CUfunction of a CuPy RawKernel (or of a Function)."""
    return ctypes.c_void_p(getattr(kernel, "kernel", kernel).ptr)


def launch_config(grid: tuple, block: tuple, shared_mem: int, attrs: dict):
    """A CUlaunchConfig on the current stream with the given {attribute id: values}; the attribute
    array is kept on the config so that it lives as long as the config."""
    cp = cupy()
    array = (LaunchAttribute * max(1, len(attrs)))()
    for i, (key, values) in enumerate(attrs.items()):
        array[i].id = key
        for j, v in enumerate(values):
            array[i].value[j] = v
    config = LaunchConfig((ctypes.c_uint * 3)(*grid, *(1,) * (3 - len(grid))),
                          (ctypes.c_uint * 3)(*block, *(1,) * (3 - len(block))), shared_mem,
                          cp.cuda.get_current_stream().ptr, array, len(attrs))
    config.keep = array
    return config


def driver_error(status: int, call: str, detail: str) -> KernelError:
    text = ctypes.c_char_p()
    driver_launch()[1](status, ctypes.byref(text))
    return KernelError(f"{call} failed: {(text.value or b'?').decode()} (CUresult {status}; {detail})")


def launch_ex(kernel, grid: tuple, block: tuple, args: tuple, shared_mem: int, attrs: dict):
    """Launch through cuLaunchKernelEx with launch attributes (a Hopper's: programmatic dependent
    launch, thread block clusters), which CuPy's launch does not take."""
    prepared_launch_ex(kernel, grid, block, args, shared_mem, attrs)()


def prepared_launch_ex(kernel, grid: tuple, block: tuple, args: tuple, shared_mem: int, attrs: dict):
    """launch_ex with its ctypes structures built once, on the current stream: a callable that
    launches. Building them costs a good part of the launch itself (docs/DECISIONS.md, D4), so a step
    launched kernel by kernel reuses them (wgmma.PLANS). Arrays are passed by address: the caller keeps them alive."""
    cp = cupy()
    config = launch_config(grid, block, shared_mem, attrs)
    values = [ctypes.c_void_p(x.data.ptr) if isinstance(x, cp.ndarray) else SCALAR_CTYPES[type(x)](x) for x in args]
    params = (ctypes.c_void_p * len(values))(*(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values))
    launch, function = driver_launch()[0], function_pointer(kernel)

    def run():
        status = launch(ctypes.byref(config), function, params, None)
        if status != 0:
            raise driver_error(status, "cuLaunchKernelEx", f"grid {grid}, block {block}, {shared_mem} bytes of "
                                                           f"shared memory, attributes {attrs}")
    run.keep = values  # the parameters point into these
    return run


@functools.lru_cache(maxsize=None)
def max_active_clusters(kernel, block: int, shared_mem: int, cluster: int) -> int:
    """How many clusters of `cluster` CTAs of this kernel the GPU holds at once: a persistent grid
    of more would run its last clusters after the others, not beside them."""
    count = ctypes.c_int()
    config = launch_config((cluster,), (block,), shared_mem, {CLUSTER_DIMENSION: (cluster, 1, 1)})
    status = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters(ctypes.byref(count), function_pointer(kernel),
                                                                      ctypes.byref(config))
    if status != 0 or count.value < 1:
        raise driver_error(status, "cuOccupancyMaxActiveClusters", f"clusters of {cluster}, {shared_mem} bytes of "
                                                                   "shared memory")
    return count.value


def launch_tile(kernel, grid: tuple, block: tuple, args: tuple, shared_mem: int):
    """Launch a tile kernel so that the next one in the stream may start its blocks while this
    one finishes (each waits for the grid before it in gemm_best.cu): back-to-back GEMMs then
    lose no launch gap between them (docs/DECISIONS.md, D5). A plain launch where the GPU or
    driver lacks it."""
    if driver_launch() is None:
        return kernel(grid, block, args, shared_mem=shared_mem)
    launch_ex(kernel, grid, block, args, shared_mem, {PROGRAMMATIC_STREAM_SERIALIZATION: (1,)})
