"""The device campaigns (scripts/*.sh) run where CI cannot: check here that they parse and name
only peers that exist, so a renamed peer fails CI instead of a device call."""
import shlex
import subprocess
import sys

import pytest

from perflab.data import PROJECT_ROOT
from perflab.measure.peers import PEERS

SCRIPTS = sorted((PROJECT_ROOT / "scripts").glob("*.sh"))


def peer_lists(text: str):
    """The names after each --peers, up to the next option or shell operator."""
    for line in text.replace("\\\n", " ").splitlines():
        if "--peers" not in line:
            continue
        names = []
        for token in shlex.split(line.split("--peers", 1)[1], comments=True):
            if token.startswith("-") or any(c in token for c in "|>;&"):
                break
            names.append(token)
        yield names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_device_script_parses_and_names_existing_peers(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    for names in peer_lists(script.read_text()):
        assert names and not set(names) - set(PEERS), f"{script.name}: unknown peers {set(names) - set(PEERS)}"


def test_peer_lists_are_read_across_continuations():
    text = 'bench train --peers perflab "jax scan epoch" \\\n  "cublas 5-gemm floor" --out "$OUT" 2>&1 | tail'
    assert list(peer_lists(text)) == [["perflab", "jax scan epoch", "cublas 5-gemm floor"]]


@pytest.mark.parametrize("script", sorted((PROJECT_ROOT / "scripts").glob("*.py")), ids=lambda p: p.name)
def test_device_python_script_compiles(script):
    compile(script.read_text(), str(script), "exec")


@pytest.mark.parametrize("arg", ["(128, 64)", "not a tuple", "(1, 2, 3, 4, 5, 6, 7, 8, 9, -1)"])
def test_gemm_sweep_names_a_bad_config_before_it_needs_a_gpu(arg):
    proc = subprocess.run([sys.executable, str(PROJECT_ROOT / "scripts" / "gemm_sweep.py"), arg],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"a config is 10 non-negative integers (BM, BN, BK, WM, WN, TM, TN, STAGES, KV, MINB), got {arg!r}" in proc.stderr


@pytest.mark.parametrize("script, shape, message", [
    ("ncu_gemm.py", "fwd1 H=500 B=800",
     "unknown shape(s) ['fwd1 H=500 B=800']: the shapes are ['fwd1 H=512 B=800', 'bwd3 H=512 B=800'"),
    ("gemm_timeline.py", "bwd3 H=500 B=800", "unknown shape(s) ['bwd3 H=500 B=800']: the shapes are ['fwd1 H=512 B=800'"),
])
def test_device_scripts_name_an_unknown_shape_before_they_need_a_gpu(script, shape, message):
    proc = subprocess.run([sys.executable, str(PROJECT_ROOT / "scripts" / script), shape],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert message in proc.stderr


def timeline_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gemm_timeline", PROJECT_ROOT / "scripts" / "gemm_timeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gemm_timeline_takes_a_config_and_blocks_after_the_shape_and_checks_them():
    timeline = timeline_script()
    assert timeline.parse_runs(["fwd1 H=512 B=800", "fwd1 H=512 B=800/128x64x16_w64x32_t8x8_s3_xt_b3/260"]) == [
        ("fwd1 H=512 B=800", None, None), ("fwd1 H=512 B=800", "128x64x16_w64x32_t8x8_s3_xt_b3", 260)]
    for bad in ("fwd1 H=512 B=800/128x64/260", "fwd1 H=512 B=800/128x64x16_w64x32_t8x8_s3_xt_b3/0",
                "fwd1 H=512 B=800/128x64x16_w64x32_t8x8_s3_xt_b3"):
        with pytest.raises(SystemExit, match="after the shape name give /CONFIG/BLOCKS, a config of"):
            timeline.parse_runs([bad])
    with pytest.raises(SystemExit, match=r"unknown shape\(s\) \['fwd1 H=500 B=800'\]"):
        timeline.parse_runs(["fwd1 H=500 B=800/128x64x16_w64x32_t8x8_s3_xt_b3/260"])


@pytest.mark.slow  # make test-all: an nvcc compile, beside the kernels' own
@pytest.mark.timeout(300)
def test_gemm_timeline_probes_fit_the_shipped_kernel_and_compile(tmp_path):
    """The probes' anchors are in gemm_best.cu once each (a moved one is named), and the
    instrumented copy compiles, with a tile a block, shared tiles and the TF32 kernel."""
    import shutil

    from perflab.kernels import KERNEL_DIR
    timeline = timeline_script()
    source = (KERNEL_DIR / "gemm_best.cu").read_text()
    probed = timeline.instrument(source)
    assert probed.count("trace_now()") == 7 and probed.count("trace_start(") == 3
    with pytest.raises(SystemExit, match="the probe anchor 'body\\(i0, j0, 0, K, 0\\);' is not there once"):
        timeline.instrument(source.replace("body(i0, j0, 0, K, 0);", "body(i0, j0, 0, K , 0);"))
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.fail("nvcc is not on PATH: CI must compile the CUDA kernels (install the CUDA toolkit)")
    (tmp_path / "timeline.cu").write_text(probed)
    names = ["gemm_best<float, false, false, 0, true, 64, 64, 16, 32, 32, 8, 4, 3, 0, 4>",
             "gemm_best<float, false, true, 0, false, 64, 64, 16, 32, 32, 8, 4, 3, 0, 4>",
             "gemm_tf32<false, false, 0, true, 64, 64, 16, 32, 32, 4>"]
    unit = tmp_path / "unit.cu"
    unit.write_text('#include "timeline.cu"\nstatic void* instances[] = {' + ", ".join(f"(void*)&{n}" for n in names)
                    + "};\nvoid* keep() { return instances; }\n")
    proc = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "-c", f"-I{KERNEL_DIR}", str(unit), "-o",
                           str(tmp_path / "unit.o")], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_gemm_timeline_counts_idle_sms_ages_and_edge_tiles(tmp_path):
    """On a made-up launch: 2 SMs, a tile a block; SM 1 is done at half the span, so a quarter of
    the SMs' time is idle; the second block on each SM (by start, then number) is age 1."""
    import numpy as np
    timeline = timeline_script()
    # 2 x 2 tiles of 64 x 64: tiles 1, 2 and 3 touch the last row or column
    assert timeline.edge_blocks(4, 128, 128, 64, 64, 64, 16).tolist() == [False, True, True, True]
    # 10 x 2 tiles, a block each, in groups of 8 rows taken column by column: blocks 0-15 cover rows
    # 0-7 (8-15 the last column), blocks 16-19 rows 8 and 9 (17 and 19 the last row, 18 and 19
    # the last column)
    edge = timeline.edge_blocks(20, 640, 128, 64, 64, 64, 16)
    assert np.flatnonzero(edge).tolist() == [*range(8, 16), 17, 18, 19]
    # 3 x 2 tiles, 4 K steps each, 12 blocks of 2 steps: block c covers tile c // 2
    assert timeline.edge_blocks(12, 192, 128, 64, 64, 64, 16).tolist() == [False, False, True, True, False, False,
                                                                          True, True, True, True, True, True]
    t = np.zeros((4, 8), np.uint64)  # start, SM, K-loop ends x 3, sum start, end, shares (ns)
    for block, (start, sm, k_end, end) in enumerate([(0, 0, 800, 1000), (0, 0, 900, 1000), (0, 1, 400, 500),
                                                     (100, 1, 300, 400)]):
        t[block, [0, 1, 2, 6, 7]] = start, sm, k_end, end, 1
    text = timeline.summary("made up", t, 128, 128, 64, 64, 64, 16)
    assert "4 blocks, span 1.0 us, SMs idle 25.0% of it; last start 0.1 us" in text
    assert "age 0 on its SM, inner tiles: 1 blocks, K loops end median 0.8 us" in text
    assert "age 1 on its SM, edge tiles: 2 blocks, K loops end median 0.6 us, max 0.9" in text
    assert "after the last K loop, blocks that sum no tile: median 0.10 us" in text and "sums of shared" not in text
    t[0, 5] = 850  # block 0 sums a shared tile from 0.85 us on
    text = timeline.summary("made up", t, 128, 128, 64, 64, 64, 16)
    assert "blocks that sum no tile: median 0.10 us" in text
    assert "1 sums of shared tiles: from the K loop's end to the sum median 0.05 us, the sum median 0.15 us" in text
    t[1:, 5] = t[1:, 0] + 1  # every block sums one: no line for the others (no median of nothing)
    assert "blocks that sum no tile" not in timeline.summary("made up", t, 128, 128, 64, 64, 64, 16)
    timeline.plot({"made up": (t, timeline.edge_blocks(4, 128, 128, 64, 64, 64, 16))}, str(tmp_path / "t.png"))
    assert (tmp_path / "t.png").stat().st_size > 1000


def test_gemm_operands_are_stored_as_training_stores_them():
    """gemm_inputs.gemm_operands (NumPy standing in for CuPy): a is M x K, b is K x N, each a transposed
    view exactly where gemm_shapes marks it, values in [-1, 1)."""
    import numpy as np

    from perflab.measure.gemm_inputs import gemm_operands, gemm_shapes
    for name, M, K, N, ta, tb in gemm_shapes(hidden=(5,), batches=(3,)):
        a, b = gemm_operands(np, np.random.default_rng(0), M, K, N, ta, tb)
        assert a.shape == (M, K) and b.shape == (K, N), name
        assert (a.flags.f_contiguous and not a.flags.c_contiguous) == ta, name
        assert (b.flags.f_contiguous and not b.flags.c_contiguous) == tb, name
        assert a.dtype == np.float32 and -1 <= a.min() and a.max() < 1, name


def test_results_hold_data_not_code():
    """Experiments' code lives in experiments/; results/ is data and figures."""
    code = [p for p in (PROJECT_ROOT / "results").rglob("*") if p.suffix in (".py", ".patch", ".cu", ".sh", ".ipy")]
    assert not code, f"code under results/: {code[:5]}"


def test_every_prediction_check_a_device_script_runs_has_its_committed_prediction():
    """A run named prediction_check_X tests results/predictions/X.json: a typo would measure points
    no prediction preceded."""
    import re
    names = set()
    for script in (PROJECT_ROOT / "scripts").glob("*.sh"):
        names |= set(re.findall(r"--name (prediction_check_[\w-]+)", script.read_text()))
    assert names, "no device script runs a committed prediction's points"
    for name in names:
        made = PROJECT_ROOT / "results" / "predictions" / f"{name.removeprefix('prediction_check_')}.json"
        assert made.exists(), f"{name}: no {made.relative_to(PROJECT_ROOT)}"


def test_gpu_check_refuses_an_unknown_stage_before_running_any(tmp_path):
    """A typo in a paid device call's stage list stops it at once, naming the stages there are;
    the list it checks against is the script's own case labels."""
    import re
    script = PROJECT_ROOT / "scripts" / "gpu_check.sh"
    text = script.read_text()
    known = set(re.search(r'known=" ([^"]+) "', text).group(1).split())
    assert known == set(re.findall(r"^    (\w+)\)", text, re.M))
    out = subprocess.run(["bash", str(script), "info", "splitabb"], cwd=tmp_path, capture_output=True, text=True,
                         env={"OUT": str(tmp_path / "out"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and "unknown stage 'splitabb'" in out.stderr and "splitab" in out.stderr
    assert "=== info" not in out.stdout  # nothing ran
