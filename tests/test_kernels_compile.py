"""The kernels without a GPU: every .cu compiles with nvcc for sm_90 with every instantiation perflab
launches, and the untuned tile choice is sound."""
import shutil
import subprocess

import pytest

from perflab.kernels import KERNEL_DIR, instantiations

NVCC = shutil.which("nvcc")


@pytest.mark.parametrize("source", sorted(p.name for p in KERNEL_DIR.glob("*.cu")))
def test_kernel_compiles_for_sm90(tmp_path, source):
    if NVCC is None:
        pytest.fail("nvcc is not on PATH: CI must compile the CUDA kernels (install the CUDA toolkit)")
    names = instantiations()[source]
    unit = tmp_path / f"inst_{source}"
    unit.write_text(f'#include "{source}"\nstatic void* instances[] = {{\n'
                    + ",\n".join(f"    (void*)&{n}" for n in names) + "\n};\n"
                    "void* keep() { return instances; }\n")
    proc = subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", "-c", "-Xptxas", "-warn-spills", f"-I{KERNEL_DIR}",
                           str(unit), "-o", str(tmp_path / "out.o")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "spill" not in proc.stderr.lower(), proc.stderr[-3000:]


def test_sources_avoid_what_nvrtc_lacks():
    """CuPy compiles with NVRTC, which has no C library headers: math.h macros do not exist there."""
    for source in KERNEL_DIR.glob("*.cu*"):
        text = source.read_text()
        for macro in ("INFINITY", "NAN", "#include <"):
            assert macro not in text, f"{source.name} uses {macro!r}, which NVRTC does not provide"


def test_untuned_tile_choice_fills_the_chip_or_splits_k():
    """Without tune(): the first config whose grid covers the SMs; when none does, the smallest
    tile with split-K, never below 256 of K per split (pure Python, no GPU)."""
    from perflab.kernels import SPLITS, heuristic_tiles, tile_configs
    configs = tile_configs("best", "float")
    name, splits = heuristic_tiles("best", "float", 2048, 12000, 784, 132)
    assert (name, splits) == (next(iter(configs)), 1)
    name, splits = heuristic_tiles("best", "float", 64, 784, 12000, 132)
    bm, bn = configs[name][:2]
    assert bm * bn == min(c[0] * c[1] for c in configs.values()) and 1 < splits <= max(SPLITS)
    assert heuristic_tiles("best", "float", 64, 64, 300, 132)[1] == 1  # K too short to split


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


def test_tune_tries_split_k_only_where_k_and_the_workspace_allow():
    """tile_choices (pure Python): every config whole; split-K only while each split keeps 64 of K
    and the workspace holds splits x M x N partial sums."""
    from types import SimpleNamespace

    from perflab.kernels import SPLITS, tile_choices, tile_configs
    configs = set(tile_configs("best", "float"))
    assert {c for c, s in tile_choices("best", "float", 64, 64, 4000) if s == 1} == configs
    assert all(s == 1 for _, s in tile_choices("best", "float", 64, 64, 4000))  # no workspace
    work = SimpleNamespace(size=4 * 64 * 64)
    assert {s for _, s in tile_choices("best", "float", 64, 64, 4000, work)} == {s for s in SPLITS if s <= 4}
    assert {s for _, s in tile_choices("best", "float", 64, 64, 200, work)} == {1, 2, 3}  # 200 // 4 < 64
