"""The structs perflab hands cuLaunchKernelEx, laid out as cuda.h lays them out (64-bit)."""
import ctypes

import pytest

from perflab.kernels import LaunchAttribute, LaunchConfig


def test_launch_structs_match_cuda_h():
    assert ctypes.sizeof(LaunchAttribute) == 72 and LaunchAttribute.value.offset == 8
    offsets = {name: getattr(LaunchConfig, name).offset for name, _ in LaunchConfig._fields_}
    assert offsets == {"grid": 0, "block": 12, "shared_mem": 24, "stream": 32, "attrs": 40, "num_attrs": 48}
    assert ctypes.sizeof(LaunchConfig) == 56


def test_kernel_types_come_from_any_spelling_of_the_dtype_and_refuse_the_rest():
    import numpy as np

    from perflab.kernels.build import KernelError, ctype
    assert [ctype(d) for d in (np.float32, np.dtype("float64"), "float32")] == ["float", "double", "float"]
    with pytest.raises(KernelError, match="take float32 or float64 arrays, got int32"):
        ctype(np.int32)


def test_every_name_the_kernels_package_exports_exists():
    import perflab.kernels
    missing = [name for name in perflab.kernels.__all__ if not hasattr(perflab.kernels, name)]
    assert not missing, f"perflab.kernels.__all__ names what it lacks: {missing}"


@pytest.mark.parametrize("first, labels", [(3, 8), (-1, 4), (0, 11)])
def test_the_softmax_refuses_labels_that_do_not_fit_its_columns_before_any_launch(first, labels):
    """A widened half batch's samples are z's columns first .. first + len(y) - 1 (D59): where they do not fit the
    10 columns, the wrapper says so before a kernel is compiled or launched."""
    import numpy as np

    from perflab import kernels
    z, b2, delta = np.zeros((7, 10), np.float32), np.zeros(7, np.float32), np.zeros((7, 10), np.float32)
    with pytest.raises(kernels.KernelError, match=f"{labels} labels from column {first} do not fit 10 columns"):
        kernels.softmax_xent_grad(z, b2, np.zeros(labels, np.int64), delta, 10, first=first)


def test_an_overflow_flag_is_refused_where_the_pass_stores_no_float16_gradient_before_any_launch():
    """Only float16's gradients overflow to a flag (docs/DECISIONS.md, D72): bfloat16 or float32 dz, or a flag that is
    not one int32, is refused naming what was given."""
    import numpy as np

    from perflab import kernels
    H, n, flag = 5, 4, np.zeros(1, np.int32)
    for dz, overflow in ((np.zeros((H, n), np.uint16), flag), (np.zeros((H, n), np.float32), flag),
                         (np.zeros((H, n), np.float16), np.zeros(2, np.int32))):
        with pytest.raises(kernels.KernelError, match=f"got {dz.dtype} gradients, a flag of {overflow.size} int32"):
            kernels.sigmoid_backward_rows(dz, dz, np.zeros(H, np.float32), overflow=overflow)


def test_the_update_refuses_output_partials_it_cannot_add_before_any_launch():
    """sgd_update(partials=) takes output_backward's partials in the parameters' dtype, for gradients that hold the
    output layer's (C + 1) H + C values (D77); float16's update takes them only with find=False, as find_overflow
    would read G before the update makes its last values (D78). Each is refused naming what was given."""
    import numpy as np

    from perflab import kernels
    C, H, n = 3, 5, 4
    ends, regs = np.array([100], np.int64), np.zeros(1, np.float32)
    P = G = np.zeros(100, np.float32)
    wrong = kernels.output_partials(np.zeros(64, np.float64), C, H, n, half=True, db2=True)
    with pytest.raises(kernels.KernelError, match="got partials float64, params float32"):
        kernels.sgd_update(P, G, 0.1, ends, regs, partials=wrong)
    small = kernels.output_partials(np.zeros(64, np.float32), C, 50, n, half=True, db2=True)
    with pytest.raises(kernels.KernelError, match=r"\(C \+ 1\) H \+ C = 203 of 100 gradients"):
        kernels.sgd_update(P, G, 0.1, ends, regs, partials=small)
    fine = kernels.output_partials(np.zeros(64, np.float32), C, H, n, half=True, db2=True)
    with pytest.raises(kernels.KernelError, match="only with find=False"):
        kernels.sgd_update_scaled(P, G, 0.1, ends, regs, np.ones(1, np.float32), np.zeros(1, np.int32),
                                  np.zeros(3, np.int64), 100, partials=fine)


def test_the_bf16_copy_takes_the_weight_gradients_that_start_and_end_on_a_whole_vector():
    """--comm p2p in BF16: a GEMM writes a weight gradient straight into the BF16 copy where its rows there are whole
    16-byte vectors (D81); the exchange narrows the rest, so a range it skips must hold no value of another array."""
    import numpy as np

    from perflab.kernels import p2p
    size = lambda shapes: sum(int(np.prod(s)) for s in shapes)  # noqa: E731
    wide = [(1024, 784), (1024,), (1024, 1024), (1024,), (10, 1024), (10,)]
    made = p2p.made_in_bf16(wide, range(0, 4, 2), size(wide))
    assert made == {0: (0, 1024 * 784 // 8), 2: ((1024 * 784 + 1024) // 8, (1024 * 784 + 1024 + 1024 * 1024) // 8)}
    odd = [(61, 97), (61,), (37, 61), (37,), (7, 37), (7,)]  # W1 ends, and W2 starts, inside a vector
    assert p2p.made_in_bf16(odd, [0, 2], size(odd)) == {}
    mixed = [(3, 8), (3,), (16, 8), (16,), (7, 16), (7,)]  # W1 [0, 24) whole vectors; W2 from 27 is not
    assert p2p.made_in_bf16(mixed, [0, 2], size(mixed)) == {0: (0, 3)}
    assert p2p.made_in_bf16(mixed, [0, 1, 2], size(mixed)) == {0: (0, 3)}  # b1 [24, 27) neither
    with pytest.raises(p2p.KernelError, match=r"hold 290 values, the gradient 291"):
        p2p.made_in_bf16(mixed, [0, 2], 291)


def test_a_tuned_choice_is_kept_apart_for_a_half_out_and_a_float_out():
    """A half product into the BF16 copy (--comm p2p, D81) and into FP32 G has each its epilogue: tune() keeps a choice
    for each, so one trainer's tuning is not the other's in a process that makes both (--comm auto's trial)."""
    import numpy as np

    from perflab.kernels import dispatch
    a, b = np.zeros((5, 3), np.uint16), np.zeros((3, 7), np.uint16)
    keys = {dispatch.tune_key("wgmma", a, b, np.zeros((5, 7), dtype), False, True) for dtype in ("uint16", "float32")}
    assert len(keys) == 2 and {key[:7] for key in keys} == {("wgmma", "bf16", 5, 7, 3, False, True)}


def test_the_bf16_exchange_refuses_made_ranges_not_given_as_pairs_before_any_launch():
    import numpy as np

    from perflab.kernels import p2p
    with pytest.raises(p2p.KernelError, match=r"shape \(k, 2\), got int64 \(4,\)"):
        p2p.exchange_update_bf16(*[None] * 4, 0, 8, 0.1, *[None] * 5, 0, 1, np.zeros(4, np.int64))


def test_every_p2p_kernel_function_the_exchange_calls_exists():
    """P2PComm calls its kernels through self.kernels (perflab.kernels.p2p), which only a GPU run would reach."""
    import inspect
    import re

    from perflab.kernels import p2p
    from perflab.train import comm
    called = set(re.findall(r"self\.kernels\.(\w+)", inspect.getsource(comm.P2PComm)))
    assert {"exchange_update", "exchange_update_bf16", "read_wait", "made_in_bf16"} <= called
    assert not [name for name in called if not hasattr(p2p, name)]


@pytest.mark.parametrize("out_dtype, weight_gradient, workspace", [("float32", False, True), ("uint16", False, False),
                                                                   ("uint16", True, True), ("float32", True, True)])
def test_cublas_keeps_its_workspace_for_weight_gradients_and_float_outs_only(monkeypatch, out_dtype, weight_gradient,
                                                                              workspace):
    """A half out is made without cuBLAS's workspace (D76) unless it is a weight gradient (--comm p2p's BF16 copy,
    D81): the caller says so, whatever the shapes."""
    import numpy as np

    from perflab.kernels import dispatch
    asked = []
    monkeypatch.setattr(dispatch, "cublas_gemm_half", lambda *args, workspace: asked.append(workspace))
    a, b = np.zeros((5, 3000), np.uint16), np.zeros((3000, 7), np.uint16)  # K far past M and N
    dispatch.half_gemm(a, b, np.zeros((5, 7), out_dtype), weight_gradient=weight_gradient)
    assert asked == [workspace]
