"""Timelines: ranges sorted into lanes, busy time merged, the figure drawn (GPU recording: test_gpu)."""
import pandas as pd
import pytest

from perflab.measure import timeline
from perflab.report import plots


def ranges(mode, rows):
    """rows: (phase, batch, start, end) in seconds; device and host clocks agree."""
    return pd.DataFrame([{"phase": ph, "batch": b, "rank": 0, "stream": 1, "device_start": s, "device_end": e,
                          "host_start": s, "host_end": e, "mode": mode} for ph, b, s, e in rows])


def made_up() -> pd.DataFrame:
    serial = ranges("staged", [("copying images host -> device", 0, 1.0, 1.2), ("forward", 0, 1.2, 1.4),
                               ("backward", 0, 1.4, 1.6), ("backward GEMM 3", 0, 1.5, 1.6),
                               ("cudaMemcpyDeviceToHost", 0, 1.6, 1.7), ("MPI_Allreduce", 0, 1.7, 2.0),
                               ("cudaMemcpyHostToDevice", 0, 2.0, 2.1), ("step", 0, 2.1, 2.11)])
    piped = ranges("pipelined", [("copying images host -> device", 0, 5.0, 5.2), ("forward", 0, 5.0, 5.2),
                                 ("backward", 0, 5.2, 5.4), ("cudaMemcpyDeviceToHost", 0, 5.3, 5.35),
                                 ("cudaMemcpyDeviceToHost", 0, 5.34, 5.4), ("MPI_Allreduce", 0, 5.35, 5.5),
                                 ("cudaMemcpyHostToDevice", 0, 5.5, 5.52), ("step", 0, 5.52, 5.53)])
    return pd.concat([serial, piped], ignore_index=True)


def test_lanes_start_each_mode_at_zero_and_keep_only_lane_phases():
    lanes = timeline.lanes(made_up())
    assert "backward GEMM 3" not in set(lanes.phase)  # nested in backward: drawn once
    assert lanes.groupby("mode").start_ms.min().tolist() == [0.0, 0.0]
    serial = lanes[lanes["mode"] == "staged"]
    mpi = serial[serial.lane == "MPI all-reduce (host)"]
    assert mpi.start_ms.iloc[0] == pytest.approx(700.0) and mpi.end_ms.iloc[0] == pytest.approx(1000.0)


def test_busy_merges_overlapping_ranges_and_shows_the_overlap():
    busy = timeline.busy(timeline.lanes(made_up())).set_index(["mode", "lane"])
    assert busy.loc[("pipelined", "gradients device -> host"), "busy_ms"] == pytest.approx(100.0)  # 5.30-5.40 merged
    assert busy.loc[("staged", "compute"), "busy_ms"] == pytest.approx(410.0)
    for mode in ("staged", "pipelined"):
        lanes_sum = busy.loc[mode].busy_ms.sum()
        span = busy.loc[mode].span_ms.iloc[0]
        assert (lanes_sum <= span + 1e-9) if mode == "staged" else (lanes_sum > span)


def test_the_timeline_figure_has_a_panel_per_mode(tmp_path):
    fig = plots.timeline(timeline.lanes(made_up()), title="made up")
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["staged (rank 0)", "pipelined (rank 0)"]
    assert plots.save(fig, "timeline_test", "made-up ranges", tmp_path).exists()


def test_timeline_from_a_recorded_csv_redraws_without_a_gpu(tmp_path, capsys):
    from perflab.cli import main
    path = tmp_path / "timeline_H8_b4_p1.csv"
    made_up().to_csv(path, index=False)
    main(["timeline", "--from", str(path), "--out", str(tmp_path / "drawn")])
    assert (tmp_path / "drawn" / "figures" / "timeline_H8_b4_p1.png").exists()
    assert "compute" in capsys.readouterr().out  # the busy table
    with pytest.raises(SystemExit) as info:
        main(["timeline", "--from", str(tmp_path / "missing.csv")])
    assert info.value.code == 2 and "--from" in capsys.readouterr().err


def test_report_names_a_timelines_dtype_and_takes_float64_for_one_recorded_before_the_column():
    from perflab.report import markdown
    assert markdown.timeline_dtype(made_up().assign(dtype="float32")) == "float32"
    assert markdown.timeline_dtype(made_up()).startswith("float64")


def test_an_overlapped_run_draws_nccls_all_reduce_from_its_stream_under_backward():
    """--modes overlap (resident with --overlap, WFBP past one hidden layer): NCCL's all-reduce is timed by its
    side stream's events, not the host's clock, and drawn in a lane of its own beside compute."""
    t = ranges("overlap", [("forward", 0, 1.0, 1.2), ("backward", 0, 1.2, 1.6), ("MPI_Allreduce", 0, 1.3, 1.4),
                           ("MPI_Allreduce", 0, 1.5, 1.65), ("step", 0, 1.65, 1.66)])
    t.loc[t.phase == "MPI_Allreduce", ["host_start", "host_end"]] = [9.0, 9.1]  # the host's clock is elsewhere
    lanes = timeline.lanes(t)
    nccl = lanes[lanes.lane == timeline.DEVICE_EXCHANGE]
    assert len(nccl) == 2 and nccl.start_ms.round(6).tolist() == [300.0, 500.0]
    busy = timeline.busy(lanes).set_index("lane").busy_ms
    assert busy[timeline.DEVICE_EXCHANGE] == pytest.approx(250.0) and busy["compute"] == pytest.approx(610.0)
    fig = plots.timeline(lanes)
    assert [tick.get_text() for tick in fig.axes[0].get_yticklabels()] == ["compute", timeline.DEVICE_EXCHANGE]
