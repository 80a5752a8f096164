"""Every module the package compiles, and compiling them all at once in parallel processes
(`perflab compile`; CI compiles the same list with nvcc)."""
from __future__ import annotations

from perflab.kernels.build import module
from perflab.kernels.dispatch import CUBLAS_VARIANTS, GEMM_VARIANTS, gemm_names, source_file
from perflab.kernels.elementwise import elementwise_names
from perflab.kernels.p2p import P2P_KERNELS
from perflab.kernels.tiles import TILE_CONFIGS, TILED_VARIANTS, tile_configs
from perflab.kernels.wgmma import HELPERS, WGMMA_VARIANTS, hopper, wgmma_names


def modules() -> list[tuple[str, tuple]]:
    """(source, kernel names) of every module gemm_function(), elementwise() and p2p compile."""
    out = []
    for T in ("float", "double"):
        for variant in (v for v in GEMM_VARIANTS if v not in CUBLAS_VARIANTS + WGMMA_VARIANTS):  # cuBLAS: nothing to compile
            if variant not in TILED_VARIANTS:
                out.append((source_file(variant), gemm_names(variant, T)))
            elif (variant, T) in TILE_CONFIGS:
                out += [(source_file(variant), gemm_names(variant, T, config)) for config in tile_configs(variant, T)]
        out.append(("elementwise.cu", elementwise_names(T)))
    # the wgmma GEMMs a module an instantiation, as wgmma.kernel() compiles them, and their helpers in one
    return out + [("gemm_wgmma.cu", (name,)) for name in wgmma_names()] + [("gemm_wgmma.cu", HELPERS),
                                                                          ("p2p.cu", P2P_KERNELS)]


def instantiations() -> dict[str, tuple]:
    """Every kernel name each .cu file is compiled for, by file (CI compiles them with nvcc)."""
    out = {}
    for source, names in modules():
        out[source] = out.get(source, ()) + names
    return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}


def compile_one(job: tuple[str, tuple]) -> str:
    source, names = job
    module(source, names).get_function(names[0])  # compiles (NVRTC) into CuPy's disk cache
    return source


def compile_all(processes: int | None = None, progress: bool = True) -> int:
    """Compile every module into CuPy's kernel cache in parallel processes: NVRTC compiles one
    module at a time, and a first run would otherwise wait minutes for them one by one.
    Returns how many modules there are (the wgmma module on Hopper GPUs only: it is sm_90a code)."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from tqdm.auto import tqdm
    jobs = [job for job in modules() if job[0] != "gemm_wgmma.cu" or hopper()]
    workers = processes or max(1, min(len(jobs), os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for _ in tqdm(pool.map(compile_one, jobs), total=len(jobs), disable=not progress, desc="compiling kernels"):
            pass
    return len(jobs)
