"""perflab.analysis.gemm_counts: the GEMM steps' counts against values derived by hand from the kernels'
tilings (no GPU), the story it tells from a bench, and the device script's Nsight Compute report read back."""
import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from perflab.analysis import gemm_counts as g
from perflab.report.answer import Answer
from perflab.results import RESULTS_ROOT

FWD, BWD = "fwd1 H=512 B=800", "bwd3 H=512 B=800"  # 512 x 784 x 800 and 512 x 800 x 784: tiles divide both
C10 = "bwd1 H=512 B=800"  # M = C = 10, K = 800, N = 512


def test_tilings_are_read_from_the_launch_and_the_sources():
    naive, tiled, reg = (g.tiling(v) for v in ("naive", "tiled", "regblock"))
    assert (naive.tile_m, naive.tile_n, naive.threads, naive.tile_k) == (8, 32, 256, 1)  # blocks of 32 x 8 threads
    assert (tiled.tile_m, tiled.tile_n, tiled.threads, tiled.tile_k) == (32, 32, 1024, 32)  # #define TILE 32
    assert tiled.smem == 2 * 32 * 33 * 4  # As and Bs, rows padded by one word
    assert (reg.tile_m, reg.tile_n, reg.threads, reg.tile_k) == (64, 16, 64, 4)  # §4.2: 16 x 4 threads, a 4 x 16 B tile
    assert (reg.thread_m, reg.thread_n, reg.a_via, reg.b_via, reg.smem) == (1, 16, "global", "shared", 4 * 16 * 4)
    best = g.tiling("best", "128x64x16_w64x32_t8x8_s3_xt_b3")
    assert (best.tile_m, best.tile_n, best.tile_k, best.threads, best.thread_m, best.thread_n) == (128, 64, 16, 128, 8, 8)
    assert g.launch("tiled", 10, 800, 512) == g.Launch((16, 1), (32, 32), 0)  # as dispatch.gemm launches it
    assert g.arithmetic("TILE * (TILE + 1) / 2", {"TILE": "32"}) == 528
    with pytest.raises(ValueError, match="not an integer constant expression"):
        g.arithmetic("sizeof(T)", {})


def test_global_loads_per_flop_fall_by_the_tile_width():
    naive, tiled, reg = (g.count(v, FWD) for v in ("naive", "tiled", "regblock"))
    assert naive["global B/FLOP"] == 4.0  # 2K elements of 4 bytes for 2K FLOPs
    assert naive["global B/FLOP"] / tiled["global B/FLOP"] == 32  # each element once a 32-wide tile
    assert reg["global B/FLOP"] == pytest.approx(4 * (1 / 16 + 1 / 64) / 2)  # A over 16 columns, B over 64 rows
    assert (naive["shared loads/FLOP"], tiled["shared loads/FLOP"], reg["shared loads/FLOP"]) == (0, 1, 0.5)
    best = g.count("best", FWD, "128x64x16_w64x32_t8x8_s3_xt_b3", 264)
    assert best["shared loads/FLOP"] == (8 + 8) / (2 * 8 * 8) and best["blocks"] == 264
    assert tiled["idle %"] == naive["idle %"] == reg["idle %"] == 0 and tiled["K steps a block"] == 25  # 784 / 32


def test_a_ten_row_output_leaves_most_threads_idle_and_few_blocks():
    reg = g.count("regblock", C10, regs=64)
    assert reg["blocks"] == 32 and reg["SMs used"] == 32  # 512 / 16 columns, one 64-row tile
    assert reg["idle %"] == pytest.approx(100 * (1 - 10 / 64))
    assert reg["blocks/SM"] == 16 and reg["occupancy limit"] == "registers"  # 64 x 32 = 2048 a warp: 32 warps
    assert reg["waves"] == pytest.approx(32 / (132 * 16)) and reg["warps/SM"] == pytest.approx(2 * 32 / 132)
    assert reg["K steps a block"] == 200  # 800 / 4
    tiled = g.count("tiled", C10, regs=32)
    assert tiled["blocks"] == 16 and tiled["idle %"] == pytest.approx(100 * (1 - 10 / 32))
    assert tiled["blocks/SM"] == 2 and tiled["theoretical occupancy %"] == 100
    assert g.count("naive", C10)["idle %"] == pytest.approx(100 * (1 - 10 / 16))  # two 8-row tiles


def test_a_rank_share_of_the_batch_leaves_edge_tiles():
    """B' = 3200 / 3 = 1067 columns on a rank: 34 tiles of 32 (the last 11 wide), 67 of 16."""
    assert g.dims("fwd1 H=512 B=1067") == (512, 784, 1067, False, True)
    assert g.count("tiled", "fwd1 H=512 B=1067")["idle %"] == pytest.approx(100 * (1 - 1067 / (34 * 32)))
    assert g.count("regblock", "fwd1 H=512 B=1067")["idle %"] == pytest.approx(100 * (1 - 1067 / (67 * 16)))
    assert g.count("tiled", "bwd3 H=512 B=1067")["K padding %"] == pytest.approx(100 * (1 - 1067 / (34 * 32)))
    with pytest.raises(ValueError, match="not a training GEMM"):
        g.dims("fwd3 H=512 B=800")


def test_occupancy_from_registers_and_shared_memory():
    assert g.blocks_per_sm(1024, 32, 0) == (2, "warps")
    assert g.blocks_per_sm(1024, 40, 0) == (1, "registers")  # 1280 a warp: 51 warps
    assert g.blocks_per_sm(64, 40, 0) == (25, "registers")
    assert g.blocks_per_sm(64, float("nan"), 0) == (32, "blocks")  # registers unknown: left out
    assert g.blocks_per_sm(128, 32, 50 * 1024) == (4, "shared memory")  # 228 KiB / (50 + 1) KiB


def test_warp_requests_and_steps_that_wait_on_l2():
    """naive reads B across its stored rows at fwd1 (X is B x 784, read as op(B) = X^T: a lane a row),
    along them at bwd3; regblock stores D a column at a time; its 16 x 4 tile of B at fwd1 is half a
    sector of each row, so every other step touches new sectors, at bwd3 every step."""
    assert g.count("naive", FWD)["b_sectors_per_request"] == 32 and g.count("naive", BWD)["b_sectors_per_request"] == 4
    assert g.count("naive", FWD)["a_sectors_per_request"] == 1  # one element, broadcast
    assert g.count("regblock", FWD)["d_sectors_per_request"] == 32 and g.count("tiled", FWD)["d_sectors_per_request"] == 4
    assert g.count("regblock", FWD)["L2-wait steps %"] == 50 and g.count("regblock", BWD)["L2-wait steps %"] == 100
    assert g.count("tiled", FWD)["L2-wait steps %"] == 100 == g.count("tiled", BWD)["L2-wait steps %"]


def bench(rates: dict) -> pd.DataFrame:
    """A made-up bench: TFLOP/s by (variant, shape); ms from the shape's FLOPs."""
    from perflab.kernels.tiles import tile_grid
    config, rows = "128x64x16_w64x32_t8x8_s3_xt_b3", []
    for (variant, shape), tflops in rates.items():
        M, K, N, _, _ = g.SHAPES[shape]
        best = variant == "best"
        rows.append({"shape": shape, "M": M, "K": K, "N": N, "variant": variant, "tflops": tflops,
                     "ms": 2 * M * N * K / tflops / 1e9, "config": config if best else None,
                     "blocks": tile_grid("best", "float", config, M, N, K)[0] if best else None})
    return pd.DataFrame(rows)


RATES = {shape: dict(zip(g.VARIANTS, r)) for shape, r in {
    FWD: (0.8, 5.3, 6.1, 25, 27), BWD: (5.4, 5.2, 4.5, 26, 24), C10: (0.07, 0.24, 0.13, 0.7, 1.0),
    "bwd2 H=512 B=800": (2.0, 1.2, 0.8, 2.8, 2.5), "fwd2 H=512 B=800": (0.5, 0.4, 0.17, 0.9, 1.2)}.items()}


def made_up() -> pd.DataFrame:
    return bench({(v, s): r for s, rates in RATES.items() for v, r in rates.items()})


def test_story_names_the_loser_and_the_quantities():
    b = made_up()
    table = g.explain(b, g.counts(list(RATES), b, pd.DataFrame(columns=["variant", "shape"])))
    text = g.story(table)
    assert "regblock) loses to tiled at 1 of 1 bwd1 shapes" in text and "wins at 1 of 1 fwd1 shapes" in text
    assert "32x fewer, the tile's width" in text  # naive -> tiled at the forward shape
    assert "halves the shared-memory loads a FLOP (1 to 0.5" in text
    assert f"At {C10} (M = 10: D has C = 10 rows) regblock's 64-row tiles leave 84% of their output slots outside D" in text
    assert "32 sectors a request (each lane its own row) against tiled's 4" in text  # bwd2's stores
    # the same M, N, K: only where B is found differs
    assert f"at {FWD} regblock wins" in text and "only 50% of its steps" in text and "(100% of steps wait on L2)" in text
    assert "Nsight Compute has not measured" in text
    row = table[(table.variant == "regblock") & (table["shape"] == BWD)].iloc[0]
    assert row["us a K step"] == pytest.approx(1e3 * row["ms"] / 200)  # one round of blocks, 800 / 4 steps


def test_story_says_when_regblock_does_not_lose():
    rates = {(v, s): r for s, rr in RATES.items() for v, r in rr.items()}
    rates.update({("regblock", s): 2 * rates[("tiled", s)] for s in RATES})
    b = bench(rates)
    text = g.story(g.explain(b, g.counts(list(RATES), b, pd.DataFrame(columns=["variant", "shape"]))))
    assert "at or above tiled at most shapes" in text and "So regblock's gain" not in text


def ncu_csv(kernels: list[tuple[str, dict]]) -> str:
    """A raw page as `ncu -i --csv --page raw --print-units base` prints it: header, units, a row a kernel."""
    metrics = list(g.NCU_COLUMNS)
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(["ID", "Process ID", "Kernel Name", "Block Size", "Grid Size", *metrics])
    w.writerow(["", "", "", "", "", *["byte"] * len(metrics)])
    for i, (name, values) in enumerate(kernels):
        w.writerow([i, 7, name, "(32, 32, 1)", "(16, 1, 1)", *[values.get(m, "n/a") for m in metrics]])
    return "==PROF== Connected\n" + out.getvalue()


def kernel(name: str, occupancy: float, ns: float = 1000, **more) -> tuple[str, dict]:
    return name, {"gpu__time_duration.sum": f"{ns:,.0f}", "sm__warps_active.avg.pct_of_peak_sustained_active": occupancy,
                  "launch__grid_size": 16, "launch__block_size": 256, "launch__registers_per_thread": 40,
                  "lts__t_sectors_srcunit_tex_op_read.sum": "1,000", **more}


def test_ncu_report_is_assigned_in_launch_order_cublas_summed():
    shapes = [FWD, C10]
    ours = [kernel(f"void gemm_{v}<float, false, true, 0>(int, int)", 50) for v in g.OWN]
    theirs = [kernel("sm90_xmma_gemm_f32f32", 40, 3000), kernel("splitKreduce_kernel", 90, 500)]
    rows = g.assign(g.read_ncu_csv(ncu_csv(ours + theirs + ours + theirs[:1])), shapes)
    assert [(r["variant"], r["shape"]) for r in rows] == [(v, s) for s in shapes for v in g.VARIANTS]
    cublas = rows[4]
    assert cublas["ncu_kernels"] == 2 and cublas["ncu_duration_ns"] == 3500 and cublas["ncu_l2_read_sectors"] == 2000
    assert cublas["ncu_achieved_occupancy_pct"] == 40  # the longest kernel's
    with pytest.raises(ValueError, match="kernel 1 of Nsight Compute's report is .*gemm_regblock.*where gemm_tiled"):
        g.assign(g.read_ncu_csv(ncu_csv([ours[0], ours[2]])), [FWD])
    with pytest.raises(ValueError, match="ends before best"):
        g.assign(g.read_ncu_csv(ncu_csv(ours[:3])), [FWD])


def test_device_files_feed_the_answer(tmp_path):
    """collect() joins CuPy's attributes and Nsight Compute's report; answer() reads them: occupancy from
    the registers CuPy reported, the measured columns in the table, a sentence on what was measured."""
    shapes = [FWD, BWD]
    attrs = []
    for s in shapes:
        for v in g.OWN:
            run = g.launch(v, *g.SHAPES[s][:3], *g.SHAPES[s][3:], *g.bench_choice(made_up(), s))
            attrs.append({"variant": v, "shape": s, "kernel": g.kernel_name(v, s, *g.bench_choice(made_up(), s)),
                          "launch_dynamic_smem": run.dynamic_smem,
                          "cupy_num_regs": 40, "cupy_shared_size_bytes": 0 if v == "best" else g.tiling(v).smem})
    pd.DataFrame(attrs).to_csv(tmp_path / "gemm_counts_attributes.csv", index=False)
    hits = {(FWD, "regblock"): 60, (BWD, "regblock"): 20}
    ncu = [kernel(f"gemm_{v}", {"regblock": 9, "tiled": 95}.get(v, 50), **{
        "l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct": hits.get((s, v), 30),
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 5 if v == "regblock" else 1})
        for s in shapes for v in g.VARIANTS]
    (tmp_path / "gemm_counts_ncu.csv").write_text(ncu_csv(ncu))
    path = g.collect(shapes, tmp_path)
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["ncu"] == "10 kernels profiled" and meta["shapes"] == shapes
    measured = g.read_measured(path)
    assert len(measured) == 10 and measured.loc[measured.variant == "cublas", "ncu_kernel"].iloc[0] == "gemm_cublas"
    made_up().to_csv(tmp_path / "bench.csv", index=False)
    a = g.answer(tmp_path / "bench.csv", path)
    assert isinstance(a, Answer) and a.sources[1].endswith("gemm_counts.csv")
    shown = a.tables[0][0]
    assert {"achieved occupancy %", "L1 hit %"} <= set(shown.columns) and len(shown) == 10
    reg = g.counts([BWD], made_up(), measured).set_index("variant").loc["regblock"]
    assert reg["registers from"] == "CuPy" and reg["blocks/SM"] == 25  # 40 registers: 51 warps, 2 a block
    assert g.kernel_name("naive", C10) == g.kernel_name("naive", FWD) == "gemm_naive<float,false,true,0>"
    naive = g.counts([C10], made_up(), measured).set_index("variant").loc["naive"]  # measured at FWD only
    assert naive["registers"] == 40 and naive["registers from"] == "CuPy (this kernel at another shape)"
    assert f"at {BWD} regblock's achieved occupancy was 9% against tiled's 95%" in a.text
    assert "waited on global memory (long scoreboard) 5 cycles an issued instruction against tiled's 1" in a.text
    assert f"hit L1 for 60% of their sectors at {FWD} against 20% at {BWD}, as its access pattern says" in a.text


@pytest.mark.skipif(not (RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "bench_gemm_float32.csv").exists(),
                    reason="no committed GEMM bench")
def test_answer_from_the_committed_bench():
    a = g.answer(RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "bench_gemm_float32.csv", None)
    assert a.sources == ["results/nvidia-h100-80gb-hbm3/bench_gemm_float32.csv"]
    table, caption = a.tables[0]
    assert list(table["GEMM"][:5]) == list(g.VARIANTS) and set(table["shape"]) == set(g.STEP_SHAPES)
    assert "regblock) loses to tiled at" in a.text and "warps an SM" in a.text and "steps of 4" in a.text


def test_device_steps_refuse_an_unknown_shape():
    with pytest.raises(SystemExit):
        g.main(["prepare", "fwd3 H=512 B=800"])
    assert Path(g.__file__).name == "gemm_counts.py"
