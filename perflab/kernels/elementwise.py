"""The step's fused elementwise kernels (elementwise.cu): bias + sigmoid, softmax + cross-entropy
gradient, sigmoid', row sums, the fused output layer forward and backward, the SGD + L2 update and
the loss's L2 term."""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from perflab.kernels.build import KernelError, ctype, i32, module, pointer, u64

ELEMENTWISE = ("bias_sigmoid", "add_bias", "softmax_xent_grad", "sigmoid_backward", "sigmoid_backward_rows", "row_sum",
               "sgd_update", "l2_partials", "output_backward_reduce", "sgd_update_reduced")
LOSS_SCALING = ("find_overflow", "sgd_update_scaled", "loss_scale_update")  # float16's, on the device (float only)

# Half-precision storage: the dtype of the CuPy arrays that hold it, and the kernels' type for it. CuPy
# has no bfloat16, so perflab holds bfloat16 values as their bits in uint16 arrays.
HALF_STORAGE = {"bfloat16": np.dtype(np.uint16), "float16": np.dtype(np.float16)}
HALF_CTYPES = {"uint16": "bf16", "float16": "fp16"}
# (and the fused output layer's two, and narrow_copy; the updates' S is the type of the weights they round for the GEMMs)
HALF_KERNELS = ("bias_sigmoid", "sigmoid_backward_rows", "sgd_update", "sgd_update_scaled", "sgd_update_reduced")


MAX_FUSED_CLASSES = 16  # output_layer and output_backward keep C values per thread in registers
SOFTMAX_CLASSES = 16  # softmax_xent_grad: up to this many classes, a thread a class of a column (elementwise.cu)


CLASS_BOUNDS = (4, 10, 16)  # both are compiled for these C bounds (the smallest that fits is used)


BW_ROWS, BW_COLS = 2, 512  # output_backward: rows per warp (8 warps a block), columns a block, as in elementwise.cu
HB_ROWS, HB_COLS, HB_WARPS = 16, 128, 4  # output_backward_half (16-bit a1, on the tensor cores): the same, and its warps


ROW_SUM_THREADS = 1024  # row_sum: threads a row (a block), as in elementwise.cu
FW_ROWS, FW_BYTES = 128, 8  # output_forward: rows a block sums over, bytes a lane's columns, as in elementwise.cu
HF_COLS = 64  # output_forward_half: columns a block (8 warps, one 16-row tile of the FW_ROWS each)


def elementwise_names(T: str) -> tuple:
    """Every instantiation of elementwise.cu for compute type T; for float also those that store half
    precision and the loss-scaling kernels."""
    names = tuple(f"{k}<{T}>" for k in ELEMENTWISE) + tuple(f"{kernel}<{T},{c}>" for kernel in ("output_forward", "output_backward")
                                                            for c in CLASS_BOUNDS)
    if T != "float":
        return names
    halves = HALF_CTYPES.values()
    return (names + tuple(f"{k}<float>" for k in LOSS_SCALING) + tuple(f"{k}<{S}>" for k in ("narrow_copy", "widen_copy")
                                                                      for S in halves)
            + tuple(f"{k}<float,{S}>" for k in HALF_KERNELS for S in halves)
            + tuple(f"{k}<{S}>" for k in ("output_forward_half", "output_backward_half") for S in halves))


def storage_types(dtype) -> tuple[str, str]:
    """(compute type, storage type) of the kernels for arrays of `dtype`: float over half storage."""
    half = HALF_CTYPES.get(np.dtype(dtype).name)
    return ("float", half) if half else (ctype(dtype), ctype(dtype))


def elementwise(kernel: str, dtype, *bounds) -> object:
    """The instantiation of `kernel` for arrays of `dtype` (half storage computes in float), with its
    compile-time bounds (a class bound) after the compute type."""
    T, S = storage_types(dtype)
    return elementwise_function(f"{kernel}<{','.join([T, *map(str, bounds)] + ([S] if S != T else []))}>", T)


@functools.lru_cache(maxsize=None)
def elementwise_function(name: str, T: str):
    """The kernel, cached as the GEMMs' are: looked up anew, a launch paid host time for the names,
    the module's cache and get_function (docs/DECISIONS.md, D7)."""
    mod = module("elementwise.cu", elementwise_names(T))
    return mod.get_function(name if "<" in name else f"{name}<{T}>")


def grid_1d(n: int, per: int = 256) -> tuple:
    return (max(1, math.ceil(n / per)),)


def threads_16_bytes(x, size: int | None = None) -> int:
    """The threads of a pass that takes 16 bytes of x a thread (elementwise.cu's ELEMENTS_16B), over its first `size`
    values (all of them by default)."""
    return math.ceil((x.size if size is None else size) / (16 // x.itemsize))


def bias_sigmoid(z, b):
    """z <- sigmoid(z + b[:, None]) in place."""
    rows, cols = z.shape
    elementwise("bias_sigmoid", z.dtype)(grid_1d(threads_16_bytes(z)), (256,), (z, b, i32(rows), i32(cols)))
    return z


def narrow_copy(x, out):
    """out <- x (float32) rounded to nearest even in out's half precision (uint16: bfloat16's bits)."""
    return precision_copy("narrow_copy", x, out, full=x, half=out)


def widen_copy(x, out):
    """out (float32) <- the values of x, a half-precision array (uint16: bfloat16's bits)."""
    return precision_copy("widen_copy", x, out, full=out, half=x)


def precision_copy(kernel: str, x, out, full, half):
    """out <- x between float32 (`full`) and a half precision (`half`), one of them each, of one shape and layout."""
    if (full.dtype != np.float32 or out.shape != x.shape or half.dtype.name not in HALF_CTYPES
            or tuple(2 * s for s in half.strides) != full.strides):
        raise KernelError(f"{kernel} copies between float32 and a half-precision array of its shape and layout, got "
                          f"{x.dtype} {x.shape} (strides {x.strides}) into {out.dtype} {out.shape} (strides {out.strides})")
    elementwise_function(f"{kernel}<{HALF_CTYPES[half.dtype.name]}>", "float")(grid_1d(x.size), (256,),
                                                                              (x, out, u64(x.size)))
    return out


def add_bias(z, b):
    rows, cols = z.shape
    elementwise("add_bias", z.dtype)(grid_1d(z.size), (256,), (z, b, i32(rows), i32(cols)))
    return z


def softmax_xent_grad(z, b2, y, delta, norm, ce=None, groups=1, scale=None, first=0):
    """delta <- (softmax(z + b2) - onehot(y)) / norm (times scale[0], a loss scale on the device, if given);
    ce[j] <- -log yhat[y_j, j] if ce is given. With groups > 1, z stacks that many partial sums of the
    logits, added (into the first) first. The samples are z's columns first .. first + len(y) - 1; any other
    column (a half step's widening, docs/DECISIONS.md, D59) gets a zero delta and ce."""
    C, B = z.shape[0] // groups, z.shape[1]
    if first < 0 or first + y.size > B:
        raise KernelError(f"softmax_xent_grad: {y.size} labels from column {first} do not fit {B} columns")
    classes = C if C <= SOFTMAX_CLASSES else 1  # a block's threads per column: its classes, or one for them all
    elementwise("softmax_xent_grad", z.dtype)(
        grid_1d(B, 32), (32, classes), (z, b2, y, delta, delta if ce is None else ce, i32(ce is not None),
                                 i32(C), i32(B), z.dtype.type(1 / norm), i32(groups), pointer(scale),
                                 i32(first), i32(y.size)))
    return delta


def sigmoid_backward(da, a):
    """da <- da * a * (1 - a) in place."""
    elementwise("sigmoid_backward", da.dtype)(grid_1d(da.size), (256,), (da, a, u64(da.size)))
    return da


def sigmoid_backward_rows(da, a, db, dz_small=None, overflow=None):
    """da <- dz = da o a o (1 - a) in place and db <- dz's row sums, in one pass (a hidden layer under
    another). With dz_small (float32, da's shape), da gets dz's TF32 big parts and dz_small the small
    ones, as x3tf32 reads them (gemm(..., a_small=dz_small)). With overflow (float16's flag, int32),
    overflow[0] <- 1 where a dz stored is not finite (sgd_update_scaled(find=False))."""
    rows, cols = da.shape
    if a.shape != da.shape or db.shape != (rows,) or not (da.flags.c_contiguous and a.flags.c_contiguous):
        raise KernelError(f"sigmoid_backward_rows takes C-contiguous da and a of one shape and db of their rows: got "
                          f"da {da.shape}, a {a.shape}, db {db.shape}")
    check_small_part(dz_small, da, "dz_small")
    check_overflow_flag(overflow, da, "sigmoid_backward_rows")
    elementwise("sigmoid_backward_rows", da.dtype)((rows,), (256,), (da, a, db, i32(cols), pointer(dz_small),
                                                   pointer(overflow)))
    return da


def check_overflow_flag(overflow, dz, kernel: str) -> None:
    """A pass sets float16's overflow flag (one int32) only where it stores float16 gradients."""
    if overflow is not None and (dz.dtype != np.float16 or overflow.dtype != np.int32 or overflow.size != 1):
        raise KernelError(f"{kernel} sets an overflow flag (one int32) where it stores float16 gradients: got "
                          f"{dz.dtype} gradients, a flag of {overflow.size} {overflow.dtype}")


def check_small_part(small, whole, name: str) -> None:
    """A TF32 small-part buffer must be a C-contiguous float32 array shaped as the array it splits."""
    if small is not None and (small.shape != whole.shape or small.dtype != whole.dtype or whole.itemsize != 4
                              or not small.flags.c_contiguous):
        raise KernelError(f"{name} must be a C-contiguous float32 array shaped as {whole.shape}, got "
                          f"{small.dtype} {small.shape}")


def row_sum(x, out):
    rows, cols = x.shape
    elementwise("row_sum", x.dtype)((rows,), (ROW_SUM_THREADS,), (x, out, i32(rows), i32(cols)))
    return out


def class_bound(C: int, kernel: str) -> int:
    if C > MAX_FUSED_CLASSES:
        raise KernelError(f"{kernel} takes at most {MAX_FUSED_CLASSES} classes, got C={C}")
    return next(c for c in CLASS_BOUNDS if c >= C)


def output_layer_partials(H: int, n: int, C: int) -> int:
    """Elements of the workspace output_layer needs: one C x n partial sum per block of FW_ROWS rows."""
    return math.ceil(H / FW_ROWS) * C * n


def output_layer(W2, b1, b2, z1, y, delta, norm, part, ce=None, scale=None, first=0):
    """z1 <- a1 = sigmoid(z1 + b1) in place, and delta <- (softmax(W2 a1 + b2) - onehot(y)) / norm, with
    the C x H by H x n GEMM done in the same pass over z1 (C <= 16; part: output_layer_partials
    elements); ce[j] <- -log yhat[y_j, j] if ce is given; the samples from column `first` (softmax_xent_grad)."""
    C, H = W2.shape
    n = z1.shape[1]
    bound = class_bound(C, "output_layer")
    groups = math.ceil(H / FW_ROWS)
    if part.size < groups * C * n:
        raise KernelError(f"output_layer needs a workspace of {groups * C * n} elements, got {part.size}")
    if z1.dtype.name in HALF_CTYPES:  # 16-bit z1: the tensor-core kernel (W2 as BF16 or FP16 pairs, about FP32's accuracy: D79)
        elementwise_function(f"output_forward_half<{HALF_CTYPES[z1.dtype.name]}>", "float")(
            (max(1, math.ceil(n / HF_COLS)), groups), (2 * FW_ROWS,), (W2, b1, z1, part, i32(C), i32(H), i32(n)))
    else:
        columns = 32 * max(1, FW_BYTES // z1.itemsize)  # a block's: 32 lanes of FW_BYTES
        elementwise("output_forward", z1.dtype, bound)(
            (max(1, math.ceil(n / columns)), groups), (256,), (W2, b1, z1, part, i32(C), i32(H), i32(n)))
    return softmax_xent_grad(part[:groups * C * n].reshape(groups * C, n), b2, y, delta, norm, ce, groups=groups,
                             scale=scale, first=first)


def output_backward_partials(H: int, n: int, C: int) -> int:
    """Elements of the workspace output_backward needs for an H x n hidden layer and C classes (either
    kernel: the 16-bit one's column blocks are the narrower), db2's partial sums included."""
    return math.ceil(n / min(BW_COLS, HB_COLS)) * ((C + 1) * H + C)


class OutputPartials(NamedTuple):
    """output_backward's partial sums left for the update to add (sgd_update(partials=)): the workspace, the
    classes, the last hidden width, the column blocks and the values a block adds of db_L (C, or 0 where a row_sum
    pass makes db_L)."""
    part: object
    C: int
    H: int
    blocks: int
    sums: int


def output_partials(part, C: int, H: int, n: int, half: bool, db2: bool) -> OutputPartials:
    """The partials output_backward leaves in part for C classes, an H x n a1 (16-bit: half), with db2's sums or not."""
    return OutputPartials(part, C, H, math.ceil(n / (HB_COLS if half else BW_COLS)), C if db2 else 0)


def output_backward(W2, delta, a1, dz1, dW2, db1, part, dz1_small=None, db2=None, overflow=None, reduce=True):
    """dz1 <- (W2^T delta) o a1 o (1 - a1), dW2 <- delta a1^T, db1 <- row sums of dz1: one pass
    over a1 and a fixed-order reduction (C <= 16; part: output_backward_partials elements). With
    dz1_small (float32, dz1's shape), dz1 gets its TF32 big parts and dz1_small the small ones, as
    x3tf32 reads them (gemm(..., a_small=dz1_small)). With db2 (a 16-bit a1's pass), db2 <- delta's row
    sums too, in place of a row_sum launch of their own. With overflow (a float16 step's flag, int32),
    overflow[0] <- 1 where a dz1 stored, or a sum of dW2, db1 or db2, is not finite. reduce=False: the partials
    are left for the update to add (sgd_update(partials=) or sgd_update_scaled(partials=), where dW2, db1 and db2 are
    G's last values) and are returned (OutputPartials); the flag then covers dz1, which is enough (elementwise.cu's
    found_overflow, D78)."""
    check_small_part(dz1_small, dz1, "dz1_small")
    check_overflow_flag(overflow, dz1, "output_backward")
    C, H = W2.shape
    n = a1.shape[1]
    bound = class_bound(C, "output_backward")
    half = a1.dtype.name in HALF_CTYPES  # 16-bit a1: the tensor-core kernel (FP32 operands as BF16 pairs)
    if db2 is not None and (not half or db2.shape != (C,) or db2.dtype != np.float32):
        raise KernelError(f"output_backward makes db2 in a 16-bit a1's pass, as float32 of the {C} classes: got a1 "
                          f"{a1.dtype}, db2 {db2.dtype} {db2.shape}")
    partials = output_partials(part, C, H, n, half, db2 is not None)
    nb, sums = partials.blocks, partials.sums
    whole = nb * (C + 1) * H  # the blocks' partials, then db2's (sums a block)
    if part.size < whole + nb * sums:
        raise KernelError(f"output_backward needs a workspace of {whole + nb * sums} elements, got {part.size}")
    if half:
        elementwise_function(f"output_backward_half<{HALF_CTYPES[a1.dtype.name]}>", "float")(
            (nb, math.ceil(H / (HB_WARPS * HB_ROWS))), (32 * HB_WARPS,),
            (W2, delta, a1, dz1, part, i32(C), i32(H), i32(n), u64(0) if db2 is None else part[whole:],
             pointer(overflow)))
    else:
        elementwise("output_backward", a1.dtype, bound)(
            (nb, math.ceil(H / (8 * BW_ROWS))), (256,),
            (W2, delta, a1, dz1, part, i32(C), i32(H), i32(n), pointer(dz1_small)))
    if not reduce:
        return partials
    elementwise("output_backward_reduce", part.dtype)(grid_1d((C + 1) * H + sums), (256,),
                                                      (part, dW2, db1, i32(C), i32(H), i32(nb), pointer(db2),
                                                       pointer(overflow)))
    return dz1


def update_kernel(kernel: str, params, rounded):
    """sgd_update's or sgd_update_scaled's instantiation for params, and the pointer argument for rounded:
    None, or a half-precision array of params' size (FP32) that the update writes params into, rounded."""
    if params.dtype not in (np.float32, np.float64):
        raise KernelError(f"{kernel} updates float32 or float64 parameters (a half step's masters are float32): got "
                          f"{params.dtype}")
    if rounded is None:
        return elementwise(kernel, params.dtype), u64(0)
    if params.dtype != np.float32 or rounded.size != params.size or rounded.dtype.name not in HALF_CTYPES:
        raise KernelError(f"{kernel} rounds float32 parameters into a half-precision array of their size: got "
                          f"{params.dtype} {params.size} into {rounded.dtype} {rounded.size}")
    return elementwise_function(f"{kernel}<float,{HALF_CTYPES[rounded.dtype.name]}>", "float"), rounded


def sgd_update(params, grads, learning_rate, ends, regs, rounded=None, partials: OutputPartials | None = None):
    """params <- params - lr * (grads + regs[segment] * params), one launch for every parameter; with
    rounded, rounded <- the new params in its half precision in the same pass. partials (output_backward(reduce=False)):
    grads' last (C + 1) H + C values, db_{L-1}, dW_L, db_L, are first added up from them in the same launch (and
    written to grads), by blocks that run beside the update's rather than in a launch before it."""
    if partials is None:
        kernel, out = update_kernel("sgd_update", params, rounded)
        kernel(grid_1d(threads_16_bytes(params)), (256,),
               (params, grads, u64(params.size), params.dtype.type(learning_rate), ends, regs, i32(ends.size), out))
        return params
    return update_with_sums(params, grads, learning_rate, ends, regs, rounded, partials)


def update_with_sums(params, grads, learning_rate, ends, regs, rounded, partials: OutputPartials, scale=None,
                     overflow=None):
    """sgd_update(partials=)'s launch, and sgd_update_scaled(partials=)'s with scale and overflow."""
    part, C, H, blocks, sums = partials
    if part.dtype != params.dtype or grads.size != params.size or params.size < (C + 1) * H + C:
        raise KernelError(f"sgd_update adds output_backward's partials into the last (C + 1) H + C = {(C + 1) * H + C} "
                          f"of {params.size} gradients, in their dtype: got partials {part.dtype}, params "
                          f"{params.dtype}, grads {grads.size}")
    kernel, out = update_kernel("sgd_update_reduced", params, rounded)
    first = grid_1d((C + 1) * H + C)[0]  # the sums' blocks, a value a thread; then the rest's, 16 bytes a thread
    rest = grid_1d(threads_16_bytes(params, params.size - (C + 1) * H - C))[0]
    kernel((first + rest,), (256,),
           (params, grads, u64(params.size), params.dtype.type(learning_rate), ends, regs, i32(ends.size), out, part,
            i32(C), i32(H), i32(blocks), i32(sums), i32(first), pointer(scale), pointer(overflow)))
    return params


def sgd_update_scaled(params, grads, learning_rate, ends, regs, scale, overflow, counts, growth: int, rounded=None,
                      find: bool = True, partials: OutputPartials | None = None):
    """A float16 step's update under dynamic loss scaling, all on the device: overflow (0 on entry, and again
    on return) <- whether any gradient is not finite; unless so, params <- params - lr * (grads / scale +
    regs[segment] * params) (and rounded, as sgd_update's); then scale and counts (good steps in a row,
    overflowed in a row, overflowed in all) follow (docs/DECISIONS.md, D68). find=False: the passes that stored the
    step's float16 gradients have set overflow already (output_backward and sigmoid_backward_rows with overflow=,
    on one GPU), so no pass over grads looks (D72). partials: as sgd_update's, with find=False (the sums are made in
    this launch, after any pass could look at them; the passes' flag is enough: D78)."""
    if partials is not None:
        if find:
            raise KernelError("sgd_update_scaled adds output_backward's partials only with find=False: find_overflow "
                              "would look at G before the update has made its last values")
        update_with_sums(params, grads, learning_rate, ends, regs, rounded, partials, scale, overflow)
    else:
        if find:
            elementwise("find_overflow", grads.dtype)(grid_1d(-(-grads.size // 4)), (256,),
                                                      (grads, u64(grads.size), overflow))
        kernel, out = update_kernel("sgd_update_scaled", params, rounded)
        kernel(grid_1d(threads_16_bytes(params)), (256,), (params, grads, u64(params.size),
                                                         params.dtype.type(learning_rate), ends, regs, i32(ends.size),
                                                         scale, overflow, out))
    elementwise("loss_scale_update", params.dtype)((1,), (1,), (scale, overflow, counts, i32(growth)))
    return params


L2_BLOCKS = 264  # l2_partials' blocks: two a multiprocessor of an H100 SXM, enough to stream the weights


def l2_penalty(params, ends, regs, part, out):
    """out (0-d) = 1/2 sum_s regs[s] ||segment s of params||^2, the loss's L2 term: two launches and no
    host round trip or allocation, so a CUDA graph can hold it. part: L2_BLOCKS elements of scratch."""
    elementwise("l2_partials", params.dtype)((part.size,), (256,),
                                             (params, u64(params.size), ends, regs, i32(ends.size), part))
    return total(part, out)


def total(x, out):
    """out (0-d, or one element) = sum of vector x, in one launch that allocates nothing: cupy.sum(x, out=...)
    allocated a temporary, which inside a CUDA graph's capture is memory freed after it that the graph
    goes on writing at each replay (it overwrote a wgmma tensor map made later in its place)."""
    return row_sum(x.reshape(1, -1), out.reshape(1))
