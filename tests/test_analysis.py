import json

import numpy as np
import pandas as pd
import pytest

from perflab.analysis import roofline
from perflab.report import markdown, plots, predictions
from perflab.results import RESULTS_ROOT


def table():
    base = dict(parallel="data", backend="numpy", mode="resident", gemm="best", dtype="float32", N=3200, epochs=1)
    rows = [dict(base, H=512, B=800, p=1, epoch_seconds=0.4, batches=4, **{"t_batch iteration": 0.1}, P_flops=1e10),
            dict(base, H=512, B=1600, p=2, epoch_seconds=0.5, batches=2, **{"t_batch iteration": 0.25}, P_flops=2e10,
                 P_mpi=1e9)]
    return pd.DataFrame(rows)


def results_root(monkeypatch, path):
    """The report's modules read the committed results from RESULTS_ROOT: here, from path."""
    from perflab.report import tables
    for module in (markdown, predictions, tables):
        monkeypatch.setattr(module, "RESULTS_ROOT", path)


def test_reference_rates_take_largest_p_at_h512():
    rates = roofline.reference_rates(table())
    assert rates["P_flops"] == 2e10 and rates["P_mpi"] == 1e9 and rates["reference"] == "H=512 B=1600 p=2"


def test_prediction_table_errors():
    pred = roofline.prediction_table(table(), {"P_flops": 2e10, "P_mpi": 1e9})
    expected_p2 = (4 * 800 * 512 * 784 + 6 * 800 * 512 * 10) / 2e10 + 2 * 407050 * 4 / 1e9  # five GEMMs + MPI
    assert pred.loc[1, "predicted_ms"] == pytest.approx(1e3 * expected_p2, rel=1e-9)
    assert pred.loc[1, "error"] == pytest.approx(expected_p2 / 0.25 - 1)
    assert roofline.median_abs_error(pred) == pytest.approx(pred["error"].abs().median())


def test_flops_bytes_table():
    t = roofline.flops_bytes_table(table())
    assert t.loc[1, "B'"] == 800 and t.loc[1, "forward GFLOP"] == pytest.approx(2 * 800 * 512 * 794 / 1e9)
    assert t.loc[0, "PCIe MB"] == 0 and t.loc[1, "PCIe MB"] == pytest.approx(2 * 407050 * 4 / 1e6)


def test_parallel_section_counts_where_model_parallel_wins(tmp_path, monkeypatch):
    import json

    import pandas as pd

    from perflab.report import markdown
    folder = tmp_path / "some-machine"
    folder.mkdir()
    rows = [{"H": 512, "B": B, "p": p, "parallel": par, "epoch_seconds": sec, "t_MPI_Allreduce": 1e-3,
             "bytes_mpi": nbytes}
            for B, p, par, sec, nbytes in [(800, 1, "data", 2.0, 0), (800, 1, "model", 2.0, 0),
                                           (1600, 2, "data", 1.2, 3.2e6), (1600, 2, "model", 1.0, 1.6e5),
                                           (6000, 2, "data", 1.0, 3.2e6), (6000, 2, "model", 1.5, 6e5)]]
    pd.DataFrame(rows).to_csv(folder / "parallel.csv", index=False)
    (folder / "parallel.json").write_text(json.dumps({"cpu": "test cpu", "git_commit": "abc", "date": "today"}))
    results_root(monkeypatch, tmp_path)
    text = "\n".join(markdown.parallel_section())
    assert "Model parallel was faster at 1 of the 2 points with p > 1" in text
    assert "the bytes differ 5 to 20 times" in text
    # a model-only blind check is read beside the data-parallel sweep of its name without _model (resident rows)
    frame = pd.DataFrame(rows).assign(mode="resident")
    frame[frame.parallel == "model"].to_csv(folder / "prediction_check_x_model_s.csv", index=False)
    staged = frame[frame.parallel == "data"].assign(mode="staged", epoch_seconds=9.0)
    pd.concat([frame[frame.parallel == "data"], staged]).to_csv(folder / "prediction_check_x_s.csv", index=False)
    for name in ("prediction_check_x_model_s", "prediction_check_x_s"):
        (folder / f"{name}.json").write_text(json.dumps({"cpu": "test cpu", "git_commit": "abc", "date": "today"}))
    text = "\n".join(markdown.parallel_section())
    assert text.count("Model parallel was faster at 1 of the 2 points with p > 1") == 2
    assert "; data parallel: `" in text and "prediction_check_x_s.csv" in text
    (folder / "prediction_check_x_s.csv").unlink()
    assert "prediction_check_x_model_s" not in "\n".join(markdown.parallel_section())  # no data side: left out


def test_epoch_predicted_as_the_sum_of_its_kernels():
    import pandas as pd

    from perflab.report import markdown
    steps = pd.DataFrame([{"H": 8, "B": 100, "kernel": k, "ms": ms} for k, ms in
                          [("forward GEMM 1", 1.0), ("fused forward: softmax", 0.25), ("fused backward: dz1", 0.5),
                           ("unfused: sigmoid'", 0.25), ("unfused: db1 row sums", 0.5)]])
    train = pd.DataFrame([{"H": 8, "B": 100, "N": 1000, "peer": "perflab", "epoch_ms": 16.0},
                          {"H": 8, "B": 100, "N": 1000, "peer": "perflab (unfused)", "epoch_ms": 17.5}])
    table = markdown.step_prediction(steps, train).set_index("step")
    assert table.loc["perflab", "predicted_epoch_ms"] == 17.5  # (1.0 + 0.25 + 0.5) ms x 1000 / 100 steps
    assert table.loc["perflab (unfused)", "predicted_epoch_ms"] == 17.5  # no kernel named "fused ..."
    assert abs(table.loc["perflab", "error"] - 1.5 / 16) < 1e-12


def test_the_deep_step_breakdown_is_read_beside_the_deep_epochs(tmp_path, monkeypatch):
    """bench_step_deep.csv pairs with bench_train_deep.csv (not bench_train.csv), each net's kernels listed."""
    from perflab.report import markdown
    steps = [{"H": net, "B": 100, "kernel": k, "ms": 1.0, "gbps": 10.0} for net in ("8", "8-8")
             for k in ("forward GEMM 1 (cuBLAS)", "fused forward: sigmoid, GEMM 2, softmax")]
    write_result(tmp_path / "m", "bench_step_deep", steps, {})
    write_result(tmp_path / "m", "bench_train", [{"H": "8-8", "B": 100, "N": 1000, "peer": "perflab", "epoch_ms": 99.0}], {})
    results_root(monkeypatch, tmp_path)
    assert "\n".join(markdown.step_section()) == ""  # no bench_train_deep.csv: nothing to compare
    write_result(tmp_path / "m", "bench_train_deep", [{"H": "8-8", "B": 100, "N": 1000, "peer": "perflab",
                                                       "epoch_ms": 25.0}], {})
    text = "\n".join(markdown.step_section())
    assert "(deeper nets)" in text and "| 8-8 | 100 | perflab | 2 | 20 | 25 | -0.2 |" in text
    assert "8 x 100:" in text and "8-8 x 100:" in text


def write_result(folder, name, rows, meta):
    import json

    import pandas as pd
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / f"{name}.csv", index=False)
    (folder / f"{name}.json").write_text(json.dumps({"git_commit": "abc", "date": "today", **meta}))


def test_allreduce_section_ratios(tmp_path, monkeypatch):
    from perflab.report import markdown
    rows = [{"impl": impl, "size_bytes": size, "ranks": 2, "ms": ms} for size, impl, ms in
            [(1024, "perflab nccl", 0.01), (1024, "perflab staged mpi", 0.3), (1024, "torch.distributed nccl", 0.04),
             (4096, "perflab nccl", 0.02), (4096, "perflab staged mpi", 1.0), (4096, "torch.distributed nccl", 0.02)]]
    write_result(tmp_path / "gpu-box", "bench_allreduce_p2", rows, {"gpu": "test gpu"})
    results_root(monkeypatch, tmp_path)
    text = "\n".join(markdown.allreduce_section())
    assert "| 1024 | 0.01 | 0.3 | 0.04 | 0.25 |" in text and "| 4096 | 0.02 | 1 | 0.02 | 1 |" in text
    assert "takes 40 times NCCL's time" in text  # median of 30 and 50


def test_held_section_splits_the_gap_into_clock_and_work_per_clock(tmp_path, monkeypatch):
    from perflab.report import markdown
    rows = [{"shape": shape, "variant": variant, "round": r, "seconds": 2.0, "ms_first": 1.0, "ms_held": 1.0,
             "tflops_held": tflops, "clock_mhz": clock, "power_w": 690.4, "reasons": reasons}
            for r in (0, 1) for shape, variant, tflops, clock, reasons in [
                ("capped", "best", 40.0, 1800.0, "software power cap"), ("capped", "cublas", 45.0, 1980.0, None),
                ("free", "best", 36.0, 1980.0, None), ("free", "cublas", 34.0, 1980.0, None)]]
    write_result(tmp_path / "gpu-box", "bench_hold", rows, {"gpu": "test gpu"})
    results_root(monkeypatch, tmp_path)
    text = "\n".join(markdown.held_section())
    assert "| capped | 0.889 | 0.909 | 0.978 |" in text  # 40/45 = (1800/1980) x 0.978
    assert "| free | 1.06 | 1 | 1.06 |" in text
    assert "| capped | best | 1 | 1 | 40 | 1800 | 690 | software power cap |" in text
    assert "2 s at a time, best and cuBLAS in turn, 2 rounds a shape" in text


def test_prediction_checked_against_gpu_parallel_runs(tmp_path, monkeypatch):
    import json

    from perflab.report import markdown
    (tmp_path / "predictions").mkdir()
    pred = [{"parallel": par, "H": 64, "b": 100, "p": p, "epoch_ms": ms} for par, p, ms in
            [("data", 1, 10.0), ("data", 2, 5.5), ("data", 4, 3.0), ("model", 2, 5.0), ("model", 4, 2.0)]]
    (tmp_path / "predictions" / "p8.json").write_text(json.dumps({"rows": pred}))
    measured = [{"parallel": par, "H": 64, "B": 100 * p, "p": p, "epoch_seconds": s, "bytes_mpi": 1e3} for par, p, s in
                [("data", 1, 0.010), ("data", 2, 0.005), ("data", 4, 0.003), ("model", 1, 0.030), ("model", 2, 0.010)]]
    write_result(tmp_path / "gpu-box", "parallel", measured, {"gpu": "test gpu"})
    results_root(monkeypatch, tmp_path)
    text = "\n".join(predictions.prediction_check_section())
    assert "| data | 64 | 100 | 2 | 5.5 | 5 | 0.1 |" in text and "| model | 64 | 100 | 2 | 5 | 10 | -0.5 |" in text
    assert "Median |error| data parallel 5%, model parallel 50%" in text  # (10% + 0%) / 2; model p=4 unmeasured
    assert "already 3.0 to 3.0 times slower at p=1" in text
    assert "Not measured" in "\n".join(markdown.parallel_section()) and "H=64 b=100 p=4" in "\n".join(markdown.parallel_section())


def test_ceiling_rates_in_the_seeds_terms():
    import pandas as pd

    from perflab.analysis import roofline
    rows = [("gemm_flops", "gpu", "cublas", 0, 1, 4e13), ("gemm_flops", "gpu", "cublas", 0, 1, 5e13),
            ("gemm_flops", "gpu", "best", 0, 1, 9e13), ("gemm_flops", "cpu", "numpy BLAS", 0, 1, 8e13),
            ("h2d", "gpu", "pageable", 1 << 20, 1, 12e9), ("d2h", "gpu", "pageable", 1 << 20, 1, 6e9),
            ("h2d", "gpu", "pageable", 1 << 26, 1, 99e9), ("h2d", "gpu", "pinned", 1 << 20, 1, 50e9),
            ("mpi_allreduce", "cpu", "Open", 1 << 20, 2, 3e9), ("mpi_allreduce", "cpu", "Open", 1 << 20, 4, 1e9)]
    table = pd.DataFrame(rows, columns=["ceiling", "device", "impl", "size_bytes", "ranks", "value"])
    got = roofline.ceiling_rates(table, nbytes=1.5e6, p=2)
    assert got["P_flops"] == 5e13  # cuBLAS on the GPU only
    assert got["P_pci"] == 2 / (1 / 12e9 + 1 / 6e9)  # pageable, at the size nearest 1.5 MB
    assert got["P_mpi"] == 2 * 3e9  # the seeds count both directions; p=2's row


def test_roofline_placement_bounds_and_byte_share():
    import pandas as pd

    from perflab.analysis import perfmodel, roofline
    points = pd.DataFrame([{"H": 512, "B": 6400, "p": 2, "ai": 800.0, "flops_per_batch": 4e9, "t_batch iteration": 2e-3},
                           {"H": 2048, "B": 3200, "p": 1, "ai": 3200.0, "flops_per_batch": 8e9, "t_batch iteration": 1e-3}])
    rates = {"P_flops": 1.6e13, "P_pci": 1e10, "P_mpi": 5e9}
    t = roofline.roofline_placement(points, rates)
    serial = perfmodel.roofline_serial(800.0, 1.6e13, 1e10)
    assert t.loc[0, "of serial"] == 2e12 / serial
    assert t.loc[0, "bytes share"] == (1 / 1e10) / (800 / 1.6e13 + 1 / 1e10)  # 2/3: left of the ridge at 1600
    assert t.loc[0, "of combined"] == 2e12 / perfmodel.roofline_combined(800.0, 1.6e13, 1e10, 5e9)
    assert pd.isna(t.loc[1, "of combined"])  # one rank: no all-reduce to charge


def test_overlap_bounds_say_which_roof_each_staged_point_meets():
    from perflab.analysis import perfmodel
    roofs = {"P_flops": 50e12, "P_pci": 50e9, "P_mpi": 8e9}
    bw = 2 / (1 / 50e9 + 1 / 8e9)
    rows = []
    for mode, roof in (("staged", perfmodel.roofline_serial), ("pipelined", perfmodel.roofline_standard)):
        point = {"H": 2048, "B": 6000, "p": 2, "N": 60000, "parallel": "data", "dtype": "float32", "backend": "cupy",
                 "mode": mode, "gemm": "cublas", "batches": 10}
        w = roofline.workload(point)
        ai = perfmodel.arithmetic_intensity(w)
        flops = perfmodel.seeds_flops(w)["batch"]
        rows.append({**point, "ai": ai, "epoch_seconds": 10 * flops / (0.97 * roof(ai, 50e12, bw))})
    rows.append({**rows[0], "p": 1, "mode": "staged"})  # nothing exchanged: not on these roofs
    b = roofline.overlap_bounds(pd.DataFrame(rows), roofs).set_index("mode")
    assert list(b.index) == ["staged", "pipelined"]
    assert b.loc["staged", "meets"] == "serial" and b.loc["pipelined", "meets"] == "standard"
    assert b.loc["staged", "of serial"] == pytest.approx(0.97) and b.loc["pipelined", "of standard"] == pytest.approx(0.97)
    assert (b.serial_bound < b.standard_bound).all()
    assert plots.overlap_roofline(b.reset_index(), roofs["P_flops"]).axes[0].get_xscale() == "log"


def test_scaling_efficiency_is_per_shape_and_the_story_names_both_parallels(tmp_path):
    folder = tmp_path / "some-gpu"
    folder.mkdir()
    rows = [("perflab resident", 2048, 3000, 1, 10.0), ("perflab resident", 2048, 3000, 2, 6.0),
            ("perflab resident", 512, 800, 1, 6.0), ("perflab resident", 512, 800, 2, 4.0),
            ("perflab resident, model parallel", 512, 800, 1, 6.0), ("perflab resident, model parallel", 512, 800, 2, 3.0),
            ("jax sharded scan", 512, 800, 1, 6.5), ("jax sharded scan", 512, 800, 2, 5.0),
            ("perflab resident, p2p", 512, 800, 2, 3.5), ("perflab resident, no graphs", 512, 800, 2, 5.0)]
    (folder / "scaling.jsonl").write_text("".join(
        json.dumps({"peer": n, "H": H, "b": b, "p": p, "epoch_ms": ms}) + "\n" for n, H, b, p, ms in rows))
    t = roofline.scaling_rows(tmp_path).set_index(["peer", "H", "p"])
    assert t.efficiency[("perflab resident", 2048, 2)] == pytest.approx(10 / 12)  # against its own shape's p=1
    assert t.efficiency[("perflab resident", 512, 2)] == pytest.approx(6 / 8)
    # p2p changes only the exchange: on one GPU it is perflab resident's run; no graphs is not
    assert t.efficiency[("perflab resident, p2p", 512, 2)] == pytest.approx(6 / 7)
    assert np.isnan(t.efficiency[("perflab resident, no graphs", 512, 2)])
    text = "\n".join(markdown.scaling_story(roofline.scaling_rows(tmp_path)))
    assert "perflab resident, model parallel: efficiency 1.00 at p=2, epoch 0.60 of the best peer's (jax sharded scan)" in text
    assert "### H=2048, b=3000" in text and "### H=512, b=800" in text
    assert "| prediction error p=2 |" in text  # this made-up machine has no validation.csv: every cell "-"


def test_the_scaling_tables_carry_the_predictors_error_at_each_harness_point():
    """markdown.harness_errors reads a machine's validation.csv rows of its scaling harness: the committed
    two-H100 run's p2p point is predicted, the JAX row is not."""
    t = pd.read_csv(RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "validation.csv")
    row = t[(t.source == "scaling.jsonl") & (t.peer == "perflab resident, p2p") & (t.H.astype(str) == "2048")].iloc[0]
    errors = markdown.harness_errors("nvidia-h100-80gb-hbm3", 2048, 3000)
    assert errors[("perflab resident, p2p", 2)] == pytest.approx(row.error)
    assert ("jax sharded scan", 2) not in errors and markdown.harness_errors("no-such-machine", 2048, 3000) == {}


def test_missed_points_say_what_their_profiled_phases_and_other_runs_show(tmp_path):
    base = {"H": 512, "B": 800, "p": 1, "mode": "staged", "parallel": "data"}
    pd.DataFrame([{**base, "source": "a.csv", "predicted_ms": 0.8, "measured_ms": 1.2, "error": 0.8 / 1.2 - 1},
                  {**base, "source": "b.csv", "predicted_ms": 0.8, "measured_ms": 0.75, "error": 0.8 / 0.75 - 1},
                  {**base, "H": 2048, "source": "a.csv", "predicted_ms": 1.0, "measured_ms": 1.05, "error": -0.05}]
                 ).to_csv(tmp_path / "validation.csv", index=False)
    pd.DataFrame([{**base, "source": "a.csv", "phase": "forward GEMM 1", "measured_ms": 0.10, "predicted_ms": 0.11,
                   "error": 0.1},
                  {**base, "source": "a.csv", "phase": "copying images host -> device", "measured_ms": 0.5,
                   "predicted_ms": 0.4, "error": -0.2}]).to_csv(tmp_path / "validation_phases.csv", index=False)
    t = predictions.missed_points(tmp_path)
    assert len(t) == 1 and t.source.iloc[0] == "a.csv" and t.error.iloc[0] == "-33%"
    assert t["phase missed most"].iloc[0] == "copying images host -> device (+0.100 ms)"
    assert t["phases: median abs error"].iloc[0] == "15% (2)"
    assert t["same point, other runs (ms)"].iloc[0] == "0.75"
    # a tensor-core point is not read against cuBLAS's phases, nor an eager run against a graphed one
    v = pd.read_csv(tmp_path / "validation.csv").assign(gemm="cublas", graphs=True)
    v.loc[len(v)] = {**base, "source": "a.csv", "gemm": "wgmma", "graphs": True, "predicted_ms": 0.5, "measured_ms": 1.0,
                     "error": -0.5}
    v.to_csv(tmp_path / "validation.csv", index=False)
    pd.read_csv(tmp_path / "validation_phases.csv").assign(gemm="cublas", launch="graph").to_csv(
        tmp_path / "validation_phases.csv", index=False)
    t = predictions.missed_points(tmp_path).set_index("GEMM")
    assert t.loc["cublas", "phases: median abs error"] == "15% (2)" and pd.isna(t.loc["wgmma", "phases: median abs error"])
    assert (t.launch == "graph").all() and t.loc["wgmma", "same point, other runs (ms)"] == "-"


def test_an_epoch_graph_is_judged_by_the_step_against_the_host_floor():
    from perflab.results import RESULTS_ROOT
    text = " ".join(markdown.epoch_graph_text(RESULTS_ROOT / "nvidia-h200", 512, 800))
    assert "the GPU is the bottleneck" in text and "ceilings_p" in text
    assert markdown.epoch_graph_text(RESULTS_ROOT / "nvidia-h200-x4", 512, 800) == []  # no step kernels measured there


def test_predicted_vs_measured_draws_a_staged_points_band_as_an_error_bar():
    table = pd.DataFrame({"H": [512, 512], "B": [3000, 3000], "p": [1, 1], "mode": ["resident", "staged"],
                          "measured_ms": [0.2, 2.0], "predicted_ms": [0.21, 1.8], "error": [0.05, -0.1],
                          "predicted_low_ms": [np.nan, 1.6], "predicted_high_ms": [np.nan, 2.3]})
    ax = plots.predicted_vs_measured(table).axes[0]
    (bars,) = [c for c in ax.containers if getattr(c, "errorbar", None) is not None]
    segments = bars.errorbar.lines[2][0].get_segments()
    assert [tuple(np.round(s[:, 1], 6)) for s in segments] == [(0.21, 0.21), (1.6, 2.3)]  # none for resident
    assert "staged" in ax.get_xticklabels()[1].get_text()
    plain = plots.predicted_vs_measured(table.drop(columns=["predicted_low_ms", "predicted_high_ms"])).axes[0]
    assert all(getattr(c, "errorbar", None) is None for c in plain.containers)


def test_validation_scatter_draws_a_panel_per_folder_with_predictions():
    made_up = pd.DataFrame({"H": [512] * 3, "B": [3000] * 3, "p": [1, 2, 1], "backend": ["cupy"] * 3,
                            "mode": ["resident", "resident", "staged"], "measured_ms": [0.2, 0.3, 2.0],
                            "predicted_ms": [0.21, 0.25, 1.5], "predicted_low_ms": [np.nan, np.nan, 1.3],
                            "predicted_high_ms": [np.nan, np.nan, 1.9]})
    skipped = pd.DataFrame({"H": [512], "measured_ms": [1.0], "skipped": ["no ceilings"]})
    fig = plots.validation_scatter({"gpu-box": made_up, "old-box": skipped})
    (ax,) = fig.axes
    points = sorted(tuple(xy) for c in ax.collections if type(c).__name__ == "PathCollection" for xy in c.get_offsets().tolist())
    assert points == [(0.2, 0.21), (0.3, 0.25), (2.0, 1.5)]  # the folder with no prediction has no panel
    assert "3 points, median |error| 17%, worst 25%" in ax.get_title()
    bands = [s for c in ax.collections if type(c).__name__ == "LineCollection" for s in c.get_segments()]
    assert [tuple(s[:, 1]) for s in bands] == [(1.3, 1.9)]


def test_trainer_form_ratios_charge_dz1s_split_to_backward_gemm_3(tmp_path, monkeypatch):
    results_root(monkeypatch, tmp_path / "results")
    folder = tmp_path / "results" / "gpu-box"
    folder.mkdir(parents=True)
    times = {"forward GEMM 1 (cuBLAS)": 4.0, "forward GEMM 1 (x3tf32)": 2.0, "backward GEMM 3 (cuBLAS)": 6.0,
             "backward GEMM 3 (x3tf32)": 2.5, "fused backward with dz1's split (x3tf32)": 1.5, "fused backward: dz1, dW2, db1": 1.0}
    rows = [{"ceiling": "step_kernel", "impl": name, "H": H, "B": B, "seconds": s * (1 + (H == 512))}
            for name, s in times.items() for H in (512, 1024) for B in (3200,)]
    pd.DataFrame(rows).to_csv(folder / "ceilings_p1.csv", index=False)
    (line,) = [x for x in markdown.trainer_form_ratios(folder / "ceilings_p1.csv", hidden=(512, 1024), batches=(3200,)) if x]
    assert "x3tf32 2.00x cuBLAS SGEMM" in line and "worst 2.00x" in line  # bwd3: 6 / (2.5 + 1.5 - 1.0)
    pd.DataFrame(rows[:3]).to_csv(folder / "ceilings_p1.csv", index=False)
    assert markdown.trainer_form_ratios(folder / "ceilings_p1.csv") == []  # no tensor-core step kernels: no line


def test_a_figure_saved_twice_is_the_same_bytes(tmp_path, monkeypatch):
    """Regenerating the committed figures leaves git clean where nothing changed (no date in the PDF)."""
    table = pd.DataFrame({"H": [512], "B": [3000], "p": [1], "measured_ms": [0.2], "predicted_ms": [0.21], "error": [0.05]})
    saved = []
    for day in range(2):  # two saves a day apart, as matplotlib would date them
        monkeypatch.setenv("SOURCE_DATE_EPOCH", str(86400 * (day + 1)))
        saved.append(plots.save(plots.predicted_vs_measured(table), "twice", "a caption", folder=tmp_path / str(day)))
    assert all((s.with_suffix(x).read_bytes() == saved[0].with_suffix(x).read_bytes()) for s in saved for x in (".pdf", ".png"))


def test_the_readme_shows_the_tensor_core_roofline_where_report_markdown_drew_it(tmp_path, monkeypatch):
    import shutil

    from perflab.results import RESULTS_ROOT
    results_root(monkeypatch, tmp_path / "results")
    folder = tmp_path / "results" / "nvidia-h100-80gb-hbm3"
    folder.mkdir(parents=True)
    for name in ("bench_train_tensor_cores.csv", "bench_gemm_tensor_cores.csv"):
        shutil.copy(RESULTS_ROOT / folder.name / name, folder / name)
    link = "figures/tensor_core_roofline_nvidia-h100-80gb-hbm3.png"  # from results/README.md, where the section lies
    section = lambda: markdown.tensor_core_section(folder / "bench_train_tensor_cores.csv",  # noqa: E731
                                                   folder / "bench_gemm_tensor_cores.csv")
    assert link not in section()  # no figure drawn yet: no dangling link
    (png,) = [p.with_suffix(".png") for p in markdown.tensor_core_figures()]
    assert png == tmp_path / "results" / link and png.stat().st_size > 0 and f"]({link})" in section()


def test_the_tensor_core_section_sets_wgmma_beside_the_fastest_tf32_peer(tmp_path, monkeypatch):
    results_root(monkeypatch, tmp_path)
    rows = [{"H": 512, "B": 3200, "N": 60000, "peer": peer, "epoch_ms": ms} for peer, ms in
            (("perflab (wgmma gemm)", 1.5), ("perflab (x3tf32 gemm)", 2.0), ("cublas 5-gemm floor", 3.0),
             ("jax scan epoch (3xTF32)", 4.0), ("jax scan epoch (TF32)", 2.5), ("pytorch cuda graph (TF32)", 2.0))]
    train = tmp_path / "bench_train_tensor_cores.csv"
    pd.DataFrame(rows).to_csv(train, index=False)
    text = markdown.tensor_core_section(train, tmp_path / "none.csv")
    assert "wgmma (TF32) 0.50 of the floor, 0.75 of the fastest TF32 peer's (pytorch cuda graph (TF32))." in text
    pd.DataFrame(rows[:4]).to_csv(train, index=False)  # a run without TF32 peers says nothing of them
    assert "TF32 peer" not in markdown.tensor_core_section(train, tmp_path / "none.csv")


def test_the_boot_table_gives_every_ceilings_files_host_terms_and_its_boot(tmp_path, monkeypatch):
    import json
    results_root(monkeypatch, tmp_path)
    folder = tmp_path / "gpu-box"
    for where, boot, scale in (("", "aaaa0001", 1.0), ("mainjob/", "bbbb0002", 2.0)):
        (folder / where).mkdir(parents=True, exist_ok=True)
        pd.DataFrame([{"ceiling": "staged_images", "impl": "pageable", "B": 3200, "seconds": scale * 1e-3},
                      {"ceiling": "staged_images", "impl": "pageable", "B": 800, "seconds": 9.0},
                      {"ceiling": "step_floor", "impl": "trainer staged", "B": None, "seconds": scale * 2e-4}]
                     ).to_csv(folder / where / "ceilings_p1.csv", index=False)
        (folder / where / "ceilings_p1.json").write_text(json.dumps({"boot": boot, "date": "2026-11-24T21:00:00+00:00",
                                                                    "git_commit": "abc"}))
    t = predictions.boot_table(folder).set_index("boot")
    assert list(t.ceilings) == ["ceilings_p1.csv", "mainjob/ceilings_p1.csv"]
    assert t.loc["bbbb0002", "staged copy, B = 3200 (ms)"] == 2.0 and t.loc["aaaa0001", "trainer staged, kernel by kernel (ms)"] == 0.2
    assert t.loc["aaaa0001", "trainer staged, graph (ms)"] == "-"  # a term the file lacks
    (section,) = predictions.boot_section()
    assert "gpu-box (slowest over fastest: staged copy, B = 3200 2.00x; trainer staged, kernel by kernel 2.00x)" in section
    assert "bbbb0002" in section


def test_staged_graphed_summarizes_only_the_staged_points_whose_step_replayed_a_graph():
    done = pd.DataFrame({"mode": ["staged", "staged", "staged", "resident"], "graphs": [True, False, True, None],
                         "error": [0.1, -0.9, -0.3, 0.5]})
    assert predictions.staged_graphed(done) == "20% (30%), 2"
    assert predictions.staged_graphed(done.drop(columns="graphs")) == "-"


def test_the_checks_summary_keeps_checks_measured_in_one_minute_in_their_order():
    """Checks whose runs share a minute keep the order they came in (their files'), so that a new check does not
    reshuffle the committed tables (quicksort did, for tables of more than a few rows)."""
    minutes = ["2026-11-26T00:15" if i % 3 else "2026-11-25T00:15" for i in range(40)]
    points = pd.DataFrame([{"check": f"c{i:02d}", "machine": "m", "measured": minute, "predicted at": "abc",
                            "error": 0.01, "mode": "resident", "launch": "graph"} for i, minute in enumerate(minutes)])
    names = [line.split("|")[1].strip() for line in predictions.checks_summary(points).splitlines()[2:]]
    newer = [f"c{i:02d}" for i in range(40) if i % 3]
    assert names == newer + [f"c{i:02d}" for i in range(40) if not i % 3]


def test_a_prediction_check_pairs_each_point_with_its_own_launch():
    """A check predicted and measured both graphed and eager: each prediction beside its own run
    only (matched without the launch, every row met both runs: four rows, two of them crossed)."""
    pred = pd.DataFrame([{"H": 512, "B": 800, "b": 800, "p": 1, "mode": "resident", "gemm": "cublas", "launch": la,
                          "batch_ms": ms} for la, ms in (("graph", 0.2), ("eager", 0.5))])
    measured = pd.DataFrame([{"H": 512, "B": 800, "p": 1, "mode": "resident", "gemm": "cublas", "launch": la,
                              "epoch_seconds": sec, "batches": 10} for la, sec in (("graph", 0.0025), ("eager", 0.004))])
    both, err, columns = predictions.check_table(pred, measured)
    assert len(both) == 2 and "launch" in columns
    assert dict(zip(both.launch, err.round(3))) == {"graph": -0.2, "eager": 0.25}


def test_the_checks_summary_has_a_row_per_measured_check_newest_first(tmp_path):
    """One row per prediction whose run was made (a prediction still waiting has none), its errors
    overall, per mode and for the graphed resident steps, the newest run first."""
    checks = []
    for name, date, graph_ms in (("old_h512_b800", "2026-11-24T01:00:00", 0.25), ("new_h512_b800", "2026-11-25T01:00:00", 0.2)):
        pred = [{"H": 512, "B": 800, "b": 800, "p": 1, "mode": m, "gemm": "cublas", "launch": la, "batch_ms": ms,
                 "low_ms": lo, "high_ms": hi}
                for m, la, ms, lo, hi in (("resident", "graph", graph_ms, None, None), ("resident", "eager", 0.5, 0.3, 0.45),
                                          ("staged", "graph", 1.5, 1.1, 1.2))]
        measured = pd.DataFrame([{**{k: r[k] for k in ("H", "B", "p", "mode", "gemm", "launch")}, "batches": 10,
                                  "epoch_seconds": sec} for r, sec in zip(pred, (0.0025, 0.004, 0.01))])
        check = tmp_path / f"prediction_check_{name}.csv"
        measured.to_csv(check, index=False)
        check.with_suffix(".json").write_text(json.dumps({"date": date}))
        checks.append((tmp_path / f"{name}.json", {"rows": pred, "predicted_by": "abcdef0123"}, check))
    checks.append((tmp_path / "waiting_h512_b800.json", {"rows": [], "predicted_by": "abcdef0123"}, None))
    points = predictions.check_points(checks)
    assert len(points) == 6 and set(points.launch) == {"graph", "eager"}
    # measured 0.4 (inside 0.3-0.45) and 1.0 (under 1.1-1.2); graphed resident had no band
    assert points.inside_band.tolist()[:3] == [None, True, False]
    lines = predictions.checks_summary(points).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| new_h512_b800 |") and lines[3].startswith("| old_h512_b800 |")
    row = dict(zip([c.strip() for c in lines[0].strip("|").split("|")], [c.strip() for c in lines[2].strip("|").split("|")]))
    assert row["points"] == "3" and row["worst"] == "50%" and row["median abs error"] == "25%"
    assert row["resident, graphed"] == "20% (20%), 1" and row["kernel by kernel"] == "25% (25%), 1"
    assert row["resident"] == "22% (25%), 2" and row["staged"] == "50% (50%), 1"
    assert predictions.checks_summary(predictions.check_points(checks[2:])) == ""
    kinds = points.apply(predictions.check_kind, axis=1)
    assert list(kinds[:3]) == ["resident, graphed", "kernel by kernel", "staged"]
    trust = predictions.trust(points, tmp_path.name)  # both checks: graphed errors 20% and 0%, eager 25%, staged 50%
    assert list(trust.index) == ["resident, graphed", "staged", "kernel by kernel"]
    assert trust.loc["resident, graphed"].tolist() == pytest.approx([2, 2, 0.1, 0.2])
    assert trust.loc["staged", "worst"] == pytest.approx(0.5) and not len(predictions.trust(points, "another-machine"))
    fig = plots.blind_checks(points)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["old_h512_b800", "new_h512_b800"]  # in the order they ran
    assert len(ax.collections) == 3  # a scatter per kind present


def test_what_graphs_buy_pairs_each_point_measured_both_ways():
    rows = [{"H": 512, "B": 800, "mode": m, "gemm": "cublas", "launch": la, "epoch_seconds": sec, "batches": 10,
             "status": "measured"}
            for m, la, sec in (("resident", "graph", 0.002), ("resident", "eager", 0.005), ("staged", "graph", 0.01))]
    t = markdown.launch_table(pd.DataFrame(rows))
    assert len(t) == 1 and t["mode"].iloc[0] == "resident"  # the staged point was measured one way only
    assert t["graph"].iloc[0] == pytest.approx(0.2) and t["eager / graph"].iloc[0] == pytest.approx(2.5)
    assert len(markdown.launch_table(pd.DataFrame(rows[:1] + rows[2:]))) == 0  # every point one way: nothing to pair


def test_the_graphs_bought_figure_draws_a_bar_per_point_and_mode():
    rows = [{"H": 512, "B": 800, "mode": m, "gemm": g, "launch": la, "epoch_seconds": sec, "batches": 10,
             "status": "measured"}
            for m in ("resident", "staged") for g in ("cublas", "wgmma")
            for la, sec in (("graph", 0.002), ("eager", 0.005 if m == "resident" else 0.003))]
    fig = plots.graphs_bought(markdown.launch_table(pd.DataFrame(rows)))
    heights = sorted(round(b.get_height(), 3) for b in fig.axes[0].patches)
    assert heights == [1.5, 1.5, 2.5, 2.5]  # eager over graph: staged 1.5x, resident 2.5x, for both GEMMs
    more = markdown.launch_table(pd.DataFrame(rows))
    more = pd.concat([more, more.assign(**{"eager / graph": more["eager / graph"] * 2})], ignore_index=True)
    fig = plots.graphs_bought(more)  # two points each (x1, x2): the median between, a dot for each
    assert sorted(round(b.get_height(), 3) for b in fig.axes[0].patches) == [2.25, 2.25, 3.75, 3.75]
    assert sum(len(line.get_xdata()) for line in fig.axes[0].lines if line.get_marker() == "o") == 8


def test_pipelined_section_reads_every_shape_of_a_check_and_shows_a_folders_timelines_once(tmp_path, monkeypatch):
    """Two pipelined checks in one machine folder, one of several shapes: each gets its own heading and a
    line per (H, b, p); the folder's timelines follow the first only."""
    import shutil

    from perflab.results import RESULTS_ROOT
    machine = "nvidia-h100-80gb-hbm3"
    folder, made = tmp_path / machine, tmp_path / "predictions"
    folder.mkdir()
    made.mkdir()
    checks = ("h100_pipelined_h2048_b3000", "h100x2_pipelined_graph_h1792_h2816_b1500_b3100")
    for name in checks:
        for suffix in (".csv", ".json"):
            shutil.copy(RESULTS_ROOT / machine / f"prediction_check_{name}{suffix}", folder)
        shutil.copy(RESULTS_ROOT / "predictions" / f"{name}.json", made)
    for name in ("ceilings_p1.csv", "ceilings_p1.json", "timeline_H1280_b3500_p2.csv", "timeline_H1280_b3500_p2.json"):
        shutil.copy(RESULTS_ROOT / machine / name, folder)
    results_root(monkeypatch, tmp_path)
    text = "\n".join(markdown.pipelined_section())
    assert all(f"## The seeds' path pipelined, {machine}, {name}" in text for name in checks)
    assert text.count("Lanes busy over the second epoch of `timeline_H1280_b3500_p2.csv`") == 1
    assert "H 1792, 2816; b 1500, 3100 samples a GPU per step" in text
    assert "H=2816 b=3100 p=2: pipelined" in text and "H=2048 b=3000 p=1: pipelined" in text


def test_the_scaling_figure_draws_a_line_per_peer_with_ticks_at_the_gpus_measured():
    import pandas as pd
    shape = pd.DataFrame([{"peer": peer, "p": p, "epoch_ms": ms / p} for peer, ms in (("perflab resident", 10.0),
                                                                                     ("jax sharded scan", 12.0))
                          for p in (2, 1)])
    fig = plots.scaling_epoch(shape, "x")
    ax = fig.axes[0]
    assert sorted(line.get_label() for line in ax.lines) == ["jax sharded scan", "perflab resident"]
    assert list(ax.get_xticks()) == [1, 2] and ax.get_yscale() == "log"
    assert [list(line.get_xdata()) for line in ax.lines] == [[1, 2], [1, 2]]  # in order of p, whatever the rows' order
    p2p = pd.concat([shape, pd.DataFrame([{"peer": "perflab resident, p2p", "p": 2, "epoch_ms": 4.5},
                                          {"peer": "perflab resident, no graphs", "p": 2, "epoch_ms": 6.0}])])
    lines = plots.scaling_epoch(p2p, "x").axes[0].lines
    dashed = [line for line in lines if line.get_linestyle() == "--"]  # p2p from the one-GPU epoch it shares; no graphs not
    assert len(dashed) == 1 and list(dashed[0].get_xdata()) == [1, 2] and list(dashed[0].get_ydata()) == [10.0, 4.5]


def test_the_validation_is_broken_down_by_the_path_a_step_takes(monkeypatch, tmp_path):
    """predictions.path_breakdown: a row per folder, mode and launch; paced_text counts the GPU-paced
    steps (resident and pipelined graphs) apart from the host-paced ones (kernel by kernel, staged)."""
    folder = tmp_path / "some-gpu"
    folder.mkdir()
    rows = [("resident", True, 0.05), ("resident", True, -0.30), ("pipelined", True, 0.02), ("resident", False, 0.6),
            ("staged", True, -0.4), ("staged", False, 0.1)]
    pd.DataFrame([{"source": "a.csv", "backend": "cupy", "mode": m, "graphs": g, "error": e} for m, g, e in rows]
                 ).to_csv(folder / "validation.csv", index=False)
    results_root(monkeypatch, tmp_path)
    t = predictions.path_breakdown().set_index(["mode", "launch"])
    assert t.loc[("resident", "graph"), "points"] == 2 and t.loc[("resident", "graph"), "beyond 25%"] == 1
    assert t.loc[("resident", "kernel by kernel"), "worst"] == "60%" and t.loc[("staged", "graph"), "beyond 25%"] == 1
    text = predictions.paced_text(predictions.path_breakdown())
    assert "where the GPU sets the pace, median |error| 5% and 1 of 3 points beyond 25%" in text
    assert "where the host sets the pace, median |error| 40% and 2 of 3 points beyond 25%" in text


@pytest.mark.parametrize("folder", ["cpu-amd-epyc/mainjob",
                                    pytest.param("nvidia-h100-80gb-hbm3/mainjob", marks=pytest.mark.slow)])  # make test-all
def test_the_main_jobs_rooflines_show_every_point_and_no_text_overlaps_another(folder):
    """Drawn from a committed main job as the notebook draws them: the ceilings roofline and the modified one
    show every point (p = 1's, which exchange nothing, in a strip at the right), and no two texts a reader
    sees (title, labels, point labels, legend, the caption) intersect (matplotlib's renderer gives the boxes)."""
    import matplotlib.text

    from perflab.report import plots
    path = RESULTS_ROOT / folder
    table = roofline.measured(roofline.load(path / "roofline.csv"))
    staged = table[table["mode"] == "staged"] if (table["mode"] == "staged").any() else table
    roofs = roofline.folder_roofs(path, "gpu" if (table.backend == "cupy").any() else "cpu")
    bounds = roofline.ceiling_bounds(table[table.gemm == "cublas"], roofs)
    rates = roofline.reference_rates(staged)
    figures = {"ceilings": plots.ceiling_roofline(bounds, roofs, title="Roofline from measured ceilings, a machine"),
               "serial": plots.roofline(staged, rates["P_flops"], rates.get("P_pci", rates.get("P_mpi")) or 1e10,
                                        title="Modified roofline, a machine"),
               "predicted": plots.predicted_vs_measured(roofline.prediction_table(staged, rates), title="Predicted")}
    both = roofline.overlap_bounds(table[table.gemm == "cublas"], roofs)
    if len(both):
        figures["pipelined"] = plots.overlap_roofline(both, roofs["P_flops"], title="Serial and pipelined")
    shown = {"ceilings": len(bounds), "serial": len(staged)}
    for name, fig in figures.items():
        fig.text(0.01, 0.005, "A caption of one sentence, as plots.save writes it. Source: roofline.csv.", fontsize=7)
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        plots.replace_labels(fig)  # as plots.save does once the caption moved the axes
        assert plots.text_overlaps(fig) == [], name
        if name in shown:  # a marker a point: every line artist's points, less the roofs' curves (200 samples each)
            drawn = sum(len(line.get_xdata()) for line in fig.axes[0].get_lines() if len(line.get_xdata()) < 50)
            labels = [t for t in fig.findobj(matplotlib.text.Annotation) if t.get_text().startswith("H=")]
            assert drawn - (2 if name == "serial" else 0) >= shown[name] and labels, (name, drawn, shown[name])


def test_the_committed_wfbp_runs_kept_the_fastest_exchange_and_checked_against_the_reference():
    """On two H100 (scripts/gpu_multi.sh wfbp): --comm auto timed the exchange after backward, WFBP (--overlap past
    one hidden layer) and p2p on deeper nets and kept the fastest; WFBP matched the float64 reference at depths 2-4."""
    folder = RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "wfbp"
    t = markdown.wfbp_rows(folder / "wfbp_h100x2.jsonl")
    assert len(t) == 8 and (t.net.str.count("-") >= 3).all()  # every net past one hidden layer
    times = t[["nccl after backward (ms)", "WFBP, --overlap (ms)", "p2p (ms)"]]
    kept = times.idxmin(axis=1).map({"nccl after backward (ms)": "nccl", "WFBP, --overlap (ms)": "overlap",
                                     "p2p (ms)": "p2p"})
    assert list(kept) == list(t["--comm auto kept"])
    checks = (folder / "wfbp_check_h100x2.log").read_text().splitlines()
    assert len(checks) == 6 and all(line.endswith(" True") and "--overlap" in line for line in checks)
    assert {line.split()[1] for line in checks} == {"float64", "float32"}


def test_the_committed_half_precision_floor_is_checked_and_below_fp32_everywhere():
    """bench gemm's BF16 and FP16 cuBLAS peers on one H100: every product within its precision of the float64 one,
    and every training shape's half GEMM faster than perflab's FP32 cuBLAS call."""
    from perflab.measure.gemm_peers import HALF_PEERS
    t = pd.read_csv(RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "bench_gemm_half_floor.csv")
    half = t[t.variant.isin(list(HALF_PEERS))]
    assert len(half) == 2 * 45 and half.checked.all()
    assert set(half.dtype) == {"bfloat16", "float16"}
    assert all(half[half.variant == v].rel_error.max() <= tol for v, (_, tol) in HALF_PEERS.items())
    wide = t.pivot_table(index="shape", columns="variant", values="ms")
    assert (wide["pytorch-bf16"] < wide["cublas"]).all() and (wide["pytorch-fp16"] < wide["cublas"]).all()


def test_the_half_precision_roof_comes_from_its_own_rows_and_is_drawn_above_fp32s():
    """cuBLAS's BF16/FP16 GEMM rows (perflab ceilings on a GPU that has them) set P_half, never P_flops; a
    half-precision point is bounded by P_half; the ceilings roofline draws it, its text clear of the rest."""
    from perflab.analysis.predictor import CEILINGS_COLUMNS, CEILINGS_FILE
    from perflab.results import read_table
    path = RESULTS_ROOT / "nvidia-h100-80gb-hbm3/mainjob"
    ceilings = pd.concat([read_table(f, CEILINGS_COLUMNS, CEILINGS_FILE) for f in sorted(path.rglob("ceilings_p*.csv"))],
                         ignore_index=True)
    fp32 = roofline.machine_roofs(ceilings, "gpu")
    assert np.isnan(fp32["P_half"])  # no half rows in this file: no half roof
    half = [{"ceiling": "gemm_flops", "device": "gpu", "impl": impl, "dtype": kind, "shape": "1024x784x3200",
             "size_bytes": 1, "ranks": 1, "value": rate, "unit": "FLOP/s"}
            for impl, kind, rate in (("cublas-bf16", "bfloat16", 6 * fp32["P_flops"]), ("cublas-fp16", "float16", 5 * fp32["P_flops"]))]
    roofs = roofline.machine_roofs(pd.concat([ceilings, pd.DataFrame(half)], ignore_index=True), "gpu")
    assert roofs["P_flops"] == fp32["P_flops"] and roofs["P_half"] == pytest.approx(6 * fp32["P_flops"])
    table = roofline.measured(roofline.load(path / "roofline.csv"))
    points = table[table.gemm == "cublas"]
    as_half = points.assign(dtype="bfloat16")
    plain, lifted = roofline.ceiling_bounds(points, roofs), roofline.ceiling_bounds(as_half, roofs)
    assert (lifted.bound > plain.bound).all()  # the GEMMs' share of the bound at the half roof
    # a half step whose exchange moves 16-bit values (p2p's BF16 copies, nccl-half) moves half the gradient's bytes
    several = as_half[as_half.backend == "cupy"].assign(p=2, mode="resident", parallel="data")
    assert len(several)
    linked = {**roofs, "P_nccl": 1e11}  # this one-GPU file measured no link
    by_comm = {comm: roofline.ceiling_bounds(several.assign(comm=comm), linked).bound for comm in ("nccl", "p2p", "nccl-half")}
    assert (by_comm["p2p"] > by_comm["nccl"]).all() and (by_comm["nccl-half"] == by_comm["p2p"]).all()
    assert (roofline.ceiling_bounds(several.assign(dtype="float32", comm="p2p"), linked).bound
            == roofline.ceiling_bounds(several.assign(dtype="float32", comm="nccl"), linked).bound).all()  # FP32: whole
    fig = plots.ceiling_roofline(plain, roofs, title="Roofline from measured ceilings, a machine")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any(t.startswith(f"P_half = {roofs['P_half'] / 1e12:.3g} TFLOP/s") for t in texts)
    fig.tight_layout()
    plots.replace_labels(fig)
    assert plots.text_overlaps(fig) == []


def test_a_report_heading_is_never_left_alone_at_the_foot_of_a_page(tmp_path):
    """A heading near a page's end goes to the next page with the figure it introduces."""
    from perflab.report import pdf
    png = sorted((RESULTS_ROOT / "cpu-amd-epyc" / "mainjob" / "figures").glob("*.png"))[0]
    doc = pdf.Document()
    for k in range(24):  # most of the first page
        doc.text(f"line {k}")
    doc.heading("A section", 1)
    doc.figure(png)
    doc.save(tmp_path / "r.pdf", "t")
    page = {getattr(f, "text", type(f).__name__): p for p, f in doc.placed}
    assert page["line 0"] == 1 and page["line 23"] == 1  # the filler stays on page 1, with room for a heading
    assert page["A section"] == page["Image"] == 2  # the figure did not fit there, so its heading went with it
