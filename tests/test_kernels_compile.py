"""The kernels without a GPU: every .cu compiles with nvcc for sm_90 with every instantiation perflab
launches, the heaviest of each tile configuration (and every other kernel) built optimized without register
spills (`make test-kernels`: every instantiation so), and the untuned tile choice is sound."""
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from perflab.kernels import KERNEL_DIR, instantiations
from perflab.kernels.build import ARCH_OPTIONS

NVCC = shutil.which("nvcc")
# the tile GEMMs: many instantiations of one tile configuration (its warps, thread tile, stages and register cap),
# which differ in orientation (TA, TB), epilogue, schedule (shared tiles) or cluster; (where their flags are, how many)
TILE_FLAGS = {"gemm_best": (1, 4), "gemm_tf32": (0, 4), "gemm_wgmma": (6, 3)}  # wgmma: CL, TA, TB


def template(name: str) -> tuple[str, list[str]]:
    """A kernel's name and template arguments: gemm_best<float,false,...> -> (gemm_best, [float, false, ...])."""
    if "<" not in name:
        return name, []
    return name[:name.index("<")], name[name.index("<") + 1:-1].split(",")


def spill_checked(names) -> list[str]:
    """The instantiations built as perflab builds them (optimized) with ptxas' spill check in `make test-all`:
    every kernel but the tile GEMMs, and of each tile configuration of those (its sizes, stages and register
    cap), the variants with the most live state: gemm_best's and gemm_tf32's shared-tile schedule (split-K,
    stream-K) with the plain epilogue, operands read straight and both transposed; gemm_wgmma's largest
    cluster, operands MN-major, each output type. With CUDA 13 that takes, in every tile configuration, one at
    its fewest registers to spare (0 to 2 under the cap where the cap binds: gemm_best's float configs with
    MINB > 1; the group's most for gemm_wgmma, where 32 instantiations sit at their cap of 168). The others are compiled
    (code generation and ptxas at -O0), not spill-checked. PERFLAB_SPILL_CHECK=all (`make test-kernels`)
    spill-checks every instantiation."""
    if os.environ.get("PERFLAB_SPILL_CHECK") == "all":
        return list(names)
    groups: dict[tuple, list[str]] = {}
    for name in names:
        kernel, args = template(name)
        if kernel not in TILE_FLAGS:
            groups[(name,)] = [name]
            continue
        at, n = TILE_FLAGS[kernel]
        groups.setdefault((kernel, *args[:at], *args[at + n:]), []).append(name)  # a tile configuration's
    chosen = []
    for key, group in groups.items():
        if key[0] == "gemm_wgmma":  # (E, O, WGS, BN, STAGES, X3, CL, TA, TB, R): the largest CL, then TA, TB
            chosen.append(max(group, key=lambda g: (int(template(g)[1][6]), template(g)[1][7:9])))
        elif key[0] in ("gemm_best", "gemm_tf32"):  # TA, TB, EPI, SHARED at TILE_FLAGS' place
            at = TILE_FLAGS[key[0]][0]
            flags = [template(g)[1][at:at + 4] for g in group]
            chosen += [g for g, (ta, tb, epi, shared) in zip(group, flags) if shared == "true" and epi == "0" and ta == tb] \
                or group[:1]
        else:
            chosen += group
    return chosen


def nvcc_jobs(tmp_path, source: str, names, spills: bool, units: int) -> list[tuple[list[str], str]]:
    """nvcc command lines that build `names` of one .cu file for sm_90 (sm_90a for wgmma) in `units` units:
    with `spills`, as perflab builds them (NVRTC: device code, optimized) with ptxas' spill warning; else its
    front end, code generation and ptxas at -O0 (every template instantiated, every PTX instruction assembled)."""
    arch = "-gencode=arch=compute_90a,code=sm_90a" if source in ARCH_OPTIONS else "-arch=sm_90"
    how = ["-Xptxas", "-warn-spills"] if spills else ["-Xcicc", "-O0", "-Xptxas", "-O0"]
    jobs = []
    for i in range(min(units, len(names))):
        unit = tmp_path / f"{'opt' if spills else 'O0'}{i}_{source}"
        unit.write_text(f'#include "{source}"\nstatic void* instances[] = {{\n'
                        + ",\n".join(f"    (void*)&{n}" for n in names[i::units]) + "\n};\n"
                        "void* keep() { return instances; }\n")
        jobs.append(([NVCC, "-std=c++17", arch, "-cubin", *how, f"-I{KERNEL_DIR}", str(unit), "-o",
                      str(unit.with_suffix(".cubin"))], unit.name))
    return jobs


@pytest.mark.slow  # make test-all: a minute of nvcc and ptxas for gemm_best.cu and gemm_wgmma.cu
@pytest.mark.timeout(900)  # PERFLAB_SPILL_CHECK=all: every instantiation optimized, minutes of ptxas
@pytest.mark.parametrize("source", sorted(p.name for p in KERNEL_DIR.glob("*.cu")))
def test_kernel_compiles_for_sm90(tmp_path, source):
    """Every instantiation compiles for sm_90 (front end, code generation, ptxas), and those spill_checked
    names, built as perflab builds them, spill no register; side by side, as many nvcc as cores."""
    if NVCC is None:
        pytest.fail("nvcc is not on PATH: CI must compile the CUDA kernels (install the CUDA toolkit)")
    names = instantiations()[source]
    checked = spill_checked(names)
    rest = [n for n in names if n not in set(checked)]
    cores = os.cpu_count() or 1
    # the optimized units first (an instantiation takes nvcc and ptxas about ten times as long as at -O0)
    jobs = [(cmd, unit, True) for cmd, unit in nvcc_jobs(tmp_path, source, checked, True, cores)]
    jobs += [(cmd, unit, False) for cmd, unit in nvcc_jobs(tmp_path, source, rest, False, cores)]
    pending, running, failures = list(jobs), [], []
    while pending or running:
        while pending and len(running) < cores:
            cmd, unit, spills = pending.pop(0)
            log = (tmp_path / unit).with_suffix(".log")
            with open(log, "w") as out:
                running.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), unit, spills, log))
        time.sleep(0.2)
        for proc, unit, spills, log in [r for r in running if r[0].poll() is not None]:
            running.remove((proc, unit, spills, log))
            said = log.read_text()
            if proc.returncode != 0 or (spills and "spill" in said.lower()):
                failures.append(f"{unit}: exit {proc.returncode}\n{said[-3000:]}")
    assert not failures, "\n".join(failures)
    assert len(checked) + len(rest) == len(names)


def test_the_spill_check_takes_every_kernel_and_each_tile_configuration(monkeypatch):
    """spill_checked (pure Python): every kernel that is not a tile GEMM whole; of the tile GEMMs, at least one
    instantiation of each tile configuration, and every instantiation under PERFLAB_SPILL_CHECK=all."""
    for source, names in instantiations().items():
        checked = set(spill_checked(names))
        assert checked <= set(names)
        configs = {}
        for name in names:
            kernel, args = template(name)
            if kernel in TILE_FLAGS:
                at, n = TILE_FLAGS[kernel]
                configs.setdefault((kernel, *args[:at], *args[at + n:]), set()).add(name)
            else:
                assert name in checked, name
        assert all(group & checked for group in configs.values()), source
        if source in ("gemm_best.cu", "gemm_wgmma.cu"):
            assert len(checked) < len(names) / 2, (source, len(checked))  # what makes test-all minutes shorter
    monkeypatch.setenv("PERFLAB_SPILL_CHECK", "all")
    assert all(spill_checked(names) == list(names) for names in instantiations().values())


def test_sources_avoid_what_nvrtc_lacks():
    """CuPy compiles with NVRTC, which has no C library headers: math.h macros do not exist there."""
    for source in KERNEL_DIR.glob("*.cu*"):
        text = source.read_text()
        for macro in ("INFINITY", "NAN", "#include <"):
            assert macro not in text, f"{source.name} uses {macro!r}, which NVRTC does not provide"


def test_untuned_tile_choice_fills_the_chip_or_splits_k():
    """Without tune(): the first config whose tiles cover the SMs, a block a tile; when none
    does, the smallest tile with split-K, never below 256 of K per split (pure Python, no GPU)."""
    from perflab.kernels import SPLITS, heuristic_tiles, tile_configs, tile_grid
    configs = tile_configs("best", "float")
    first = next(iter(configs))
    assert heuristic_tiles("best", "float", 2048, 12000, 784, 132) == (first, tile_grid("best", "float", first, 2048, 12000, 784)[0])
    name, blocks = heuristic_tiles("best", "float", 64, 784, 12000, 132)
    bm, bn = configs[name][:2]
    tiles = tile_grid("best", "float", name, 64, 784, 12000)[0]
    assert bm * bn == min(c[0] * c[1] for c in configs.values())
    assert blocks % tiles == 0 and 1 < blocks // tiles <= max(SPLITS)
    name, blocks = heuristic_tiles("best", "float", 64, 64, 300, 132)  # K too short to split
    assert blocks == tile_grid("best", "float", name, 64, 64, 300)[0]


def test_every_tile_config_fits_a_hopper_block():
    """Each config's block fits an H100/H200: at most 1024 threads, whole warps, at most 227 KiB of
    shared memory (the opt-in limit), and MINB blocks of it fit an SM's 228 KiB."""
    from perflab.kernels import TILE_CONFIGS, config_name, tile_launch
    for (variant, T), configs in TILE_CONFIGS.items():
        for cfg in configs:
            name = config_name(variant, cfg)
            minb = 1 if variant == "tf32" else cfg[9]
            for ta in (False, True):
                for tb in (False, True):
                    threads, smem = tile_launch(variant, T, name, ta, tb)
                    assert threads % 32 == 0 and threads <= 1024, (name, threads)
                    assert smem <= 227 * 1024 and minb * (smem + 1024) <= 228 * 1024, (name, ta, tb, smem)


def test_tune_tries_shared_tiles_only_where_k_and_the_workspace_allow():
    """tile_choices (pure Python): every config a block a tile; split-K only while each split
    keeps 64 of K, stream-K only while each block keeps 4 K steps, and either only where the
    workspace holds two partial tiles a block."""
    from types import SimpleNamespace

    from perflab.kernels import SPLITS, STREAM_K_BLOCKS_PER_SM, tile_choices, tile_configs, tile_grid, workspace_elements
    configs = tile_configs("best", "float")
    whole = {c: tile_grid("best", "float", c, 64, 64, 4000)[0] for c in configs}
    assert set(tile_choices("best", "float", 64, 64, 4000)) == set(whole.items())  # no workspace
    big = SimpleNamespace(size=10**9)
    for config, tiles in whole.items():
        blocks = {b for c, b in tile_choices("best", "float", 64, 64, 4000, big, sms=132) if c == config}
        steps = tile_grid("best", "float", config, 64, 64, 4000)[1]
        assert blocks == ({tiles * s for s in SPLITS}
                          | {132 * b for b in STREAM_K_BLOCKS_PER_SM if tiles * steps >= 4 * 132 * b})
    config = next(iter(configs))
    tiles = whole[config]
    short = {b for c, b in tile_choices("best", "float", 64, 64, 200, big, sms=132) if c == config}
    assert short == {tiles * s for s in (1, 2, 3)}  # 200 // 4 < 64, and too few K steps for stream-K
    small = SimpleNamespace(size=workspace_elements("best", "float", config, 2 * tiles))
    assert {b for c, b in tile_choices("best", "float", 64, 64, 4000, small, sms=132) if c == config} == {tiles, 2 * tiles}
    # the kernel counts a shared schedule's tiles x K steps in an int: none offered past that
    huge = {(c, b) for c, b in tile_choices("best", "float", 2**17, 2**17, 2**17, big, sms=132)}
    assert huge == {(c, tile_grid("best", "float", c, 2**17, 2**17, 2**17)[0]) for c in configs}


def test_a_block_count_the_kernel_cannot_run_is_refused_by_name():
    """check_blocks (pure Python, what gemm() calls before a launch): 1 to tiles x K steps, and
    shared tiles only below the kernel's 2^31 tile K steps."""
    from perflab.kernels import FLAG_SLOTS, KernelError, check_blocks, tile_configs, tile_grid
    config = next(iter(tile_configs("best", "float")))
    tiles, steps = tile_grid("best", "float", config, 64, 64, 32)
    check_blocks("best", "float", config, 64, 64, 32, tiles * steps)
    for bad in (0, tiles * steps + 1):
        with pytest.raises(KernelError, match=f"blocks must be 1 to {tiles * steps} .*got {bad}$"):
            check_blocks("best", "float", config, 64, 64, 32, bad)
    with pytest.raises(KernelError, match=f"at most {FLAG_SLOTS}"):
        check_blocks("best", "float", config, 4096, 4096, 4096, FLAG_SLOTS + 1)
    big, whole = 2**16, tile_grid("best", "float", config, 2**16, 2**16, 2**16)[0]
    check_blocks("best", "float", config, big, big, big, whole)  # a tile a block needs no shared count
    with pytest.raises(KernelError, match=f"fewer than 2147483648 tile K steps.*take blocks={whole}"):
        check_blocks("best", "float", config, big, big, big, 132)


def test_schedule_names_say_how_blocks_share_the_tiles():
    from perflab.kernels import schedule_name, tile_configs, tile_grid
    config = next(iter(tile_configs("best", "float")))
    tiles = tile_grid("best", "float", config, 512, 784, 3200)[0]
    assert schedule_name("best", "float", config, 512, 784, 3200, tiles) == "a tile a block"
    assert schedule_name("best", "float", config, 512, 784, 3200, 5 * tiles) == "split-K 5"
    assert schedule_name("best", "float", config, 512, 784, 3200, 5 * tiles + 1) == f"stream-K {5 * tiles + 1} blocks"


def test_the_wgmma_wrappers_are_what_their_generator_writes():
    """wgmma_ops.cuh is generated (each wrapper lists N/2 accumulators): it cannot drift from the script."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "scripts" / "gen_wgmma_ops.py"
    spec = importlib.util.spec_from_file_location("gen_wgmma_ops", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (KERNEL_DIR / "wgmma_ops.cuh").read_text() == gen.header()


def test_a_half_config_is_compiled_for_an_mn_major_b_only_where_its_b_part_is_whole_64_row_boxes():
    """gemm_wgmma.cu's static_assert: an MN-major B part a CTA loads is whole 64-row boxes. The configs
    that are not so (BN = 112, a quarter of 128) read B K-major, and no such instantiation is compiled."""
    from perflab.kernels.wgmma import CONFIGS, config_name, kernel_name, reads_b_mn_major, wgmma_names
    names = set(wgmma_names())
    narrow = [c for c in CONFIGS["half"] if not reads_b_mn_major(c)]
    assert {config_name(c) for c in narrow} == {"wg1-n112-s9-c2", "wg2-n112-s6-c2", "wg1-n128-s8-c4", "wg2-n112-s8-k2",
                                                "wg2-n112-s8-c2-k2", "wg2-n128-s8-c4-k2"}
    for config in CONFIGS["half"]:
        for ta in (False, True):
            mn = kernel_name(config, "half", "bf16", ta, True, "bf16")
            assert (mn in names) == reads_b_mn_major(config) == ((config[1] // config[3]) % 64 == 0)
            assert kernel_name(config, "half", "bf16", ta, False, "float") in names


def test_every_wgmma_config_fits_a_hopper_block():
    """Each wgmma config's CTA (a producer warpgroup and its consumers) fits an H100/H200: at most
    1024 threads, at most 227 KiB of shared memory, N a wgmma shape the kernel has a wrapper and an
    mma<N> for; at least 2 stages; a cluster's CTAs each load whole 8-row swizzle atoms of B."""
    from perflab.kernels.build import KERNEL_DIR
    from perflab.kernels.wgmma import CONFIGS, KINDS, smem_bytes
    ops = (KERNEL_DIR / "wgmma_ops.cuh").read_text()
    assert set(CONFIGS) == set(KINDS)
    for kind, configs in CONFIGS.items():
        for wgs, bn, stages, cluster, rows, ways in configs:
            assert 128 * (wgs + 1) <= 1024 and bn % 8 == 0 and bn <= 256 and stages >= 2
            assert rows == 1 or (kind == "half" and rows * bn // 2 <= 192), (kind, rows, bn)  # accumulators a thread
            assert ways == 1 or (ways == 2 and wgs == 2 and rows == 1 and kind != "x3tf32" and bn % 16 == 0)
            instructions = ("k16.f32.bf16", "k16.f32.f16") if kind == "half" else ("k8.f32.tf32",)
            assert all(f"m64n{bn}{i}" in ops for i in instructions), bn
            assert cluster in (1, 2, 4) and bn % (8 * cluster) == 0
            assert smem_bytes((wgs, bn, stages, cluster, rows, ways), kind) <= 227 * 1024, (kind, wgs, bn, stages)


@pytest.mark.parametrize("M, N, K", [(1, 1, 1), (2048, 12000, 784), (512, 784, 3200), (130, 260, 1000), (7, 9, 33)])
def test_wgmma_plans_cover_k_in_whole_stages_on_a_persistent_grid(M, N, K):
    """Every split is whole 32-k stages, the splits cover K and none is empty; the grid is at most
    a CTA an SM, in whole clusters, and no more clusters than there are pairs of tiles to take;
    the untuned choice fills the SMs or keeps 256 of K a split (pure Python)."""
    from perflab.kernels.wgmma import CONFIGS, KINDS, MIN_SPLIT_K, SPLITS, choices, heuristic, plan
    for kind in KINDS:
        bk = 64 if kind == "half" else 32
        for _, splits in choices(M, N, K, kind):
            assert splits == 1 or K // splits >= MIN_SPLIT_K
        for config in CONFIGS[kind]:
            for splits in SPLITS:
                kps, z, grid = plan(M, N, K, config, splits, 132, bk)
                assert kps % bk == 0 and z * kps >= K and (z - 1) * kps < K and z <= splits
                units = -(-N // config[1]) * -(-M // (64 * config[0] // config[5] * config[4] * config[3])) * z
                assert 1 <= grid <= 132 and grid % config[3] == 0
                assert grid // config[3] <= units
        config, splits = heuristic(M, N, K, kind, 132)
        tiles = -(-N // config[1]) * -(-M // (64 * config[0] * config[4]))
        assert config == CONFIGS[kind][0]
        assert splits == 1 or tiles * splits // 2 < 132 and K // splits >= MIN_SPLIT_K


def test_wgmma_refuses_what_the_copy_engine_and_its_configs_cannot_take():
    from perflab.kernels import KernelError
    from perflab.kernels.wgmma import parse_config, tensor_map_fields
    assert tensor_map_fields(100, 785, 3152, 128)["dims"] == (785, 100)
    with pytest.raises(KernelError, match="16-byte aligned, got 3140 bytes"):
        tensor_map_fields(100, 785, 3140, 128)
    with pytest.raises(KernelError, match="wg2-n128-s3"):
        parse_config("wg9-n1-s1", "x3tf32")
    with pytest.raises(KernelError, match="half has no tile config 'wg2-n192-s5'.*wg1-n128-s8"):
        parse_config("wg2-n192-s5", "half")
    # 16-bit: 64 k a box (128 bytes); MN-major boxes are 64 rows of M or N by that k, the rows contiguous
    k_major = tensor_map_fields(1000, 784, 1568, 256, "uint16")
    assert k_major["dtype"] == 9 and k_major["dims"] == (784, 1000) and k_major["box"] == (64, 256)
    mn_major = tensor_map_fields(1000, 784, 2000, 256, "float16", mn_major=True)
    assert mn_major["dtype"] == 6 and mn_major["dims"] == (1000, 784) and mn_major["box"] == (64, 64)


def test_a_slice_of_a_constant_is_found_in_either_orientation():
    """slice_of() recovers where a view lies in a contiguous array and whether it is transposed, so
    slices of the trainer's images are read from their kept forms (NumPy stands in for CuPy: the
    same strides; only .data.ptr differs)."""
    import types

    import numpy as np

    from perflab.kernels.wgmma import slice_of

    def dev(a):  # an ndarray with CuPy's .data.ptr
        view = types.SimpleNamespace(shape=a.shape, strides=a.strides, itemsize=a.itemsize, size=a.size,
                                     nbytes=a.nbytes)
        view.data = types.SimpleNamespace(ptr=a.__array_interface__["data"][0])
        return view
    for order in "CF":
        x = np.zeros((784, 1000), np.float32, order=order)
        assert slice_of(dev(x[:, 200:300]), dev(x)) == (0, 200, False)
        assert slice_of(dev(x[:, 200:300].T), dev(x)) == (0, 200, True)
        assert slice_of(dev(x[5:9, 7:8]), dev(x)) == (5, 7, False)
        assert slice_of(dev(x[::2, :]), dev(x)) is None  # strided: no plain slice
        assert slice_of(dev(np.zeros((3, 3), np.float32)), dev(x)) is None  # elsewhere


def test_a_constant_is_kept_until_its_last_user_forgets_it():
    """Two trainers may hold one array of images (the runner's, on the GPU): the first to close must
    not drop the kept forms the other's graphs read (NumPy stands in for CuPy here)."""
    import numpy as np

    from perflab.kernels import KernelError
    from perflab.kernels.wgmma import CONSTANTS, constant, forget
    x = np.zeros((97, 517), np.float32, order="F")
    constant(x)
    constant(x)
    forget(x)
    assert any(entry[0] is x for entry in CONSTANTS)
    forget(x)
    assert not any(entry[0] is x for entry in CONSTANTS)
    with pytest.raises(KernelError, match="C- or F-contiguous 2D"):
        constant(x[::2])


def test_the_fused_backward_refuses_a_dz1_small_it_cannot_write():
    """output_backward(dz1_small=...) checks the split's buffer before anything runs (NumPy stands
    in: the check reads shapes, dtypes and flags only)."""
    import numpy as np

    from perflab.kernels import KernelError, output_backward
    dz1 = np.zeros((61, 333), np.float32)
    for bad in (np.zeros((61, 332), np.float32), np.zeros((61, 333), np.float64),
                np.zeros((333, 61), np.float32).T):
        with pytest.raises(KernelError, match=r"dz1_small must be a C-contiguous float32 array shaped as \(61, 333\)"):
            output_backward(None, None, None, dz1, None, None, None, bad)


def test_the_fused_backward_makes_db2_only_in_a_16_bit_pass_and_names_what_it_got():
    """output_backward(db2=...) refuses an FP32 a1 (its pass keeps a row_sum of its own) and a db2 that is not
    float32 of the classes, naming them, before anything runs (NumPy stands in: the check reads shapes and dtypes)."""
    import numpy as np

    from perflab.kernels import KernelError, output_backward
    W2, C = np.zeros((10, 61), np.float32), 10
    for a1, db2 in ((np.zeros((61, 333), np.float32), np.zeros(C, np.float32)),
                    (np.zeros((61, 333), np.float16), np.zeros(C + 1, np.float32)),
                    (np.zeros((61, 333), np.float16), np.zeros(C, np.float64))):
        with pytest.raises(KernelError, match=rf"makes db2 in a 16-bit a1's pass, as float32 of the 10 classes: got a1 "
                                              rf"{a1.dtype}, db2 {db2.dtype} \({db2.size},\)"):
            output_backward(W2, None, a1, None, None, None, None, db2=db2)


def test_the_update_refuses_to_round_into_anything_but_a_half_array_of_the_weights_size():
    """sgd_update(rounded=) names what it got: float32 weights round into a bfloat16 (uint16) or float16
    array of their size, nothing else (checked before any launch)."""
    from perflab.kernels import KernelError, sgd_update
    ends, regs = np.array([5]), np.zeros(1, np.float32)
    for params, rounded, got in ((np.zeros(5), np.zeros(5, np.uint16), "float64 5 into uint16 5"),
                                 (np.zeros(5, np.float32), np.zeros(4, np.float16), "float32 5 into float16 4"),
                                 (np.zeros(5, np.float32), np.zeros(5, np.float32), "float32 5 into float32 5")):
        with pytest.raises(KernelError, match=f"sgd_update rounds float32 parameters .*got {got}$"):
            sgd_update(params, params, 0.1, ends, regs, rounded=rounded)
    half = np.zeros(5, np.float16)  # a thread takes 16 bytes of its compute type: half parameters would be half missed
    with pytest.raises(KernelError, match="sgd_update updates float32 or float64 parameters .*got float16$"):
        sgd_update(half, half, 0.1, ends, regs)


def test_the_launch_shapes_python_gives_the_fused_kernels_are_those_elementwise_cu_defines():
    """A block shape lives twice, as a #define the kernel is written for and a constant its launch uses:
    they must agree, or a launch covers the wrong rows or columns."""
    import importlib
    import re

    elementwise = importlib.import_module("perflab.kernels.elementwise")  # the package's name is the function
    defines = dict(re.findall(r"^#define (\w+) (\d+)$", (KERNEL_DIR / "elementwise.cu").read_text(), re.M))
    for name in ("ROW_SUM_THREADS", "FW_ROWS", "FW_BYTES", "BW_ROWS", "BW_COLS", "HB_ROWS", "HB_COLS", "HB_WARPS", "SOFTMAX_CLASSES"):
        assert int(defines[name]) == getattr(elementwise, name), name
