"""perflab's own CUDA kernels, compiled at first use with CuPy's RawModule (NVRTC).

One .cu file per GEMM variant (naive -> tiled -> regblock -> best, as SGEMM_CUDA shows the
progression; `tf32`, the tensor-core option, shares best's file) plus the fused elementwise
steps; `cublas` is cuBLAS itself, the yardstick. best and tf32 pick a tile config and a number
of blocks per shape (one a tile, split-K or stream-K; see gemm_best.cu): measured by tune()
where it has run, from the grid size otherwise.

    gemm(a, b, out=None, alpha=1, beta=0, c=None, bias=None, variant="best")
computes out = alpha * a @ b + beta * c, then sigmoid(out + bias[:, None]) when bias is given
(the forward layer's epilogue). a and b may be C- or F-ordered 2D views (a transposed view
is read in place, never copied); out is C-contiguous.

The rooms: build (compile, launch), tiles (configs, schedules), dispatch (gemm, tune), cublas,
wgmma (Hopper's tensor-core GEMMs: wgmma and x3tf32), elementwise, catalog (compile everything);
this package exposes their names."""
from perflab.kernels.build import (
    KERNEL_DIR,
    PROGRAMMATIC_STREAM_SERIALIZATION,
    SCALAR_CTYPES,
    KernelError,
    LaunchAttribute,
    LaunchConfig,
    ctype,
    cupy,
    driver_launch,
    i32,
    launch_tile,
    module,
    multiprocessors,
    sm_count,
    u64,
)
from perflab.kernels.catalog import compile_all, compile_one, instantiations, modules
from perflab.kernels.cublas import cublas_gemm, cublas_library
from perflab.kernels.dispatch import (
    GEMM_VARIANTS,
    HALF_GEMMS,
    TF32_VARIANTS,
    TUNABLE_VARIANTS,
    TUNED,
    gemm,
    gemm_function,
    gemm_names,
    half_gemm,
    kernel_name,
    source_file,
    storage,
    template_args,
    tune,
)
from perflab.kernels.elementwise import (
    CLASS_BOUNDS,
    ELEMENTWISE,
    FW_ROWS,
    HALF_STORAGE,
    L2_BLOCKS,
    MAX_FUSED_CLASSES,
    OutputPartials,
    add_bias,
    bias_sigmoid,
    class_bound,
    elementwise,
    elementwise_names,
    grid_1d,
    l2_penalty,
    narrow_copy,
    output_backward,
    output_backward_partials,
    output_layer,
    output_layer_partials,
    output_partials,
    row_sum,
    sgd_update,
    sgd_update_scaled,
    sigmoid_backward,
    sigmoid_backward_rows,
    softmax_xent_grad,
    total,
    widen_copy,
)
from perflab.kernels.tiles import (
    FLAG_SLOTS,
    MAX_ITERS,
    SPLITS,
    STREAM_K_BLOCKS_PER_SM,
    TILE_CONFIGS,
    TILED_VARIANTS,
    check_blocks,
    config_name,
    heuristic_tiles,
    schedule_name,
    tile_choices,
    tile_configs,
    tile_grid,
    tile_launch,
    workspace,
    workspace_elements,
)
from perflab.kernels.wgmma import WGMMA_VARIANTS

__all__ = ['CLASS_BOUNDS', 'ELEMENTWISE', 'FLAG_SLOTS', 'FW_ROWS', 'GEMM_VARIANTS', 'HALF_GEMMS', 'TF32_VARIANTS', 'TUNABLE_VARIANTS', 'WGMMA_VARIANTS', 'KERNEL_DIR', 'KernelError', 'L2_BLOCKS', 'LaunchAttribute', 'LaunchConfig', 'MAX_FUSED_CLASSES', 'MAX_ITERS', 'OutputPartials', 'PROGRAMMATIC_STREAM_SERIALIZATION', 'SCALAR_CTYPES', 'SPLITS', 'STREAM_K_BLOCKS_PER_SM', 'TILED_VARIANTS', 'TILE_CONFIGS', 'TUNED', 'add_bias', 'bias_sigmoid', 'check_blocks', 'class_bound', 'compile_all', 'compile_one', 'config_name', 'ctype', 'cublas_gemm', 'cublas_library', 'cupy', 'driver_launch', 'elementwise', 'elementwise_names', 'gemm', 'gemm_function', 'gemm_names', 'half_gemm', 'HALF_STORAGE', 'narrow_copy', 'widen_copy', 'sgd_update_scaled', 'grid_1d', 'heuristic_tiles', 'i32', 'instantiations', 'kernel_name', 'l2_penalty', 'launch_tile', 'module', 'modules', 'multiprocessors', 'output_backward', 'output_backward_partials', 'output_partials', 'output_layer', 'output_layer_partials', 'row_sum', 'schedule_name', 'sgd_update', 'sigmoid_backward', 'sigmoid_backward_rows', 'sm_count', 'total', 'softmax_xent_grad', 'source_file', 'storage', 'template_args', 'tile_choices', 'tile_configs', 'tile_grid', 'tile_launch', 'tune', 'u64', 'workspace', 'workspace_elements']
