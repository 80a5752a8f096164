"""perflab.measure.steadiness: the probe's row, the verdict on injected probes (never on how fast this
machine is), judge()'s widened bands and the report's first lines."""
import math
import os
import subprocess
import sys
import time

import pandas as pd
import pytest

from perflab import results
from perflab.measure import steadiness

SMALL = (128, 784, 400)  # a small GEMM: the probe tests last well under a second even on a busy machine
FIELDS = ("stage", "time", "gemm", "threads", "blas_default_threads", "cores", "usable_cores", "gemm_ms", "gemm_spread",
          "gemm_repeats", "gemm_1thread_ms", "thread_gain", "load1", "load_per_core", "others_cores", "steal",
          "cpu_per_wall", "seconds")


def row(stage, gemm_ms=10.0, spread=0.02, others=0.05, steal=0.0, gain=1.8, threads=2, default=2, usable=2):
    """A probe row as record() writes it, with the numbers a test chooses."""
    return {"stage": stage, "time": "2026-01-01T00:00:00+00:00", "gemm": "512x784x1600 float32", "threads": threads,
            "blas_default_threads": default, "cores": 2, "usable_cores": usable, "gemm_ms": gemm_ms, "gemm_spread": spread,
            "gemm_repeats": 40, "gemm_1thread_ms": gemm_ms * gain, "thread_gain": gain, "load1": 0.1, "load_per_core": 0.05,
            "others_cores": others, "steal": steal, "cpu_per_wall": 1.9, "seconds": 1.0}


def write(folder, *rows):
    results.write_rows(folder / steadiness.FILE, list(rows), {})


def test_probe_row_has_the_fields(tmp_path):
    written = steadiness.record(tmp_path, "start", seconds=0.05, shape=SMALL)
    back = pd.read_csv(tmp_path / steadiness.FILE)
    assert set(FIELDS) <= set(back.columns) and list(back.stage) == ["start"]
    assert (tmp_path / "steadiness.json").exists()  # the machine's metadata beside it
    assert written["gemm_ms"] > 0 and written["gemm_1thread_ms"] > 0 and written["gemm_spread"] >= 0
    assert written["gemm_repeats"] >= steadiness.MIN_PAIRS and written["threads"] == steadiness.sweep_threads()
    assert written["cores"] == os.cpu_count()
    if os.path.exists("/proc/stat"):  # Linux: the others' cores and the steal are read; elsewhere None
        assert written["others_cores"] >= 0 and 0 <= written["steal"] <= 1


def test_bad_values_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'middle'"):
        steadiness.record(tmp_path, "middle")
    with pytest.raises(ValueError, match="got 0"):
        steadiness.probe(0)
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        steadiness.probe(0.01, threads=0)
    write(tmp_path, row("start"), row("later"))
    with pytest.raises(results.ResultFileError, match="'later'"):
        steadiness.verdict(tmp_path)


def test_quiet_pair_is_steady(tmp_path):
    write(tmp_path, row("start", 10.0), row("end", 10.3, spread=0.03))
    v = steadiness.verdict(tmp_path)
    assert v["noisy"] is False and v["noise"] == pytest.approx(0.03)
    assert "steady" in v["sentences"][0] and "rerun" not in " ".join(v["sentences"])


def test_slow_end_is_noisy_and_says_rerun(tmp_path):
    write(tmp_path, row("start", 10.0), row("end", 14.0, spread=0.25))
    v = steadiness.verdict(tmp_path)
    assert v["noisy"] is True and v["noise"] == pytest.approx(0.4)
    assert v["parts"]["drift"] == pytest.approx(0.4) and v["parts"]["spread"] == pytest.approx(0.25)
    first, todo = v["sentences"]
    assert "noisy" in first and "+40%" in first
    assert "Close other programs" in todo and "rerun" in todo and "resumes" in todo


def test_the_last_run_of_the_folder_counts(tmp_path):
    """A rerun appends its own start: the verdict takes it and the end after it, not an earlier run's end."""
    write(tmp_path, row("start", 10.0), row("end", 20.0), row("start", 10.0))
    v = steadiness.verdict(tmp_path)
    assert v["end"] is None and v["parts"]["drift"] is None and v["noisy"] is False
    assert "no end probe" in v["sentences"][0]


def test_load_steal_and_threads_make_it_noisy(tmp_path):
    write(tmp_path, row("start", 10.0, others=1.0), row("end", 10.0))
    assert steadiness.verdict(tmp_path)["parts"]["load"] == pytest.approx(0.5)  # one of two cores
    (tmp_path / steadiness.FILE).unlink()
    write(tmp_path, row("start", 10.0, steal=0.2), row("end", 10.0))
    assert steadiness.verdict(tmp_path)["noise"] == pytest.approx(0.2)
    (tmp_path / steadiness.FILE).unlink()
    write(tmp_path, row("start", 10.0), row("end", 10.5, gain=0.45))  # the 0.64 s on one thread, 1.43 s on two
    v = steadiness.verdict(tmp_path)
    assert v["noisy"] is True
    assert any("--threads 1" in n and "slowest thread" in n for n in v["notes"])


def test_thread_counts_that_differ_are_named(tmp_path):
    write(tmp_path, row("start", default=1, usable=1), row("end"))
    notes = " ".join(steadiness.verdict(tmp_path)["notes"])
    assert "default of 1 threads" in notes and "p = 1 points on 2" in notes
    assert "may run on 1 of the 2 cores" in notes


def test_sweep_epochs_enter_the_noise(tmp_path):
    write(tmp_path, row("start"), row("end"))
    pd.DataFrame({"status": ["measured"] * 3 + ["failed"], "epoch_spread": [0.0, 0.12, 0.16, 0.9],
                  "timed_epochs": [1, 3, 3, 3]}).to_csv(tmp_path / "roofline.csv", index=False)
    v = steadiness.verdict(tmp_path)
    assert v["parts"]["epochs"] == pytest.approx(0.14) and v["noisy"] is True
    assert any("1 of 3 points" in n and "single epoch" in n for n in v["notes"])


def validation_table():
    """Predicted 10 ms each; the host's noise (below) is 10%, so 10/1.1 to 11 ms is inside."""
    return pd.DataFrame({"H": [512] * 6, "measured_ms": [10.5, 12.0, 12.0, 12.5, 10.0, 12.0],
                         "predicted_ms": [10.0, 10.0, 10.0, 10.0, 10.0, math.nan],
                         "predicted_low_ms": [math.nan, math.nan, 9.0, math.nan, math.nan, math.nan],
                         "predicted_high_ms": [math.nan, math.nan, 11.0, math.nan, math.nan, math.nan],
                         "epoch_spread": [0.0, 0.0, 0.0, 0.3, math.nan, math.nan]})


def test_judge_widens_each_band_by_the_noise(tmp_path):
    write(tmp_path, row("start", 10.0), row("end", 11.0))  # a drift of 10%: the host's noise
    judged = steadiness.judge(validation_table(), tmp_path)
    assert list(judged.inside_noise) == [True, False, True, True, True, None]
    # 10.5 inside 10 +- 10%; 12 outside it; 12 inside the band 9-11 widened to 12.1; 12.5 inside the point's own 30%
    assert judged.noise_high_ms[2] == pytest.approx(12.1) and judged.noise_low_ms[0] == pytest.approx(10 / 1.1)
    assert judged.noise[3] == pytest.approx(0.3) and judged.noise[0] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="predicted_ms"):
        steadiness.judge(pd.DataFrame({"measured_ms": [1.0]}), tmp_path)


def test_first_lines_say_noisy_and_count_the_points(tmp_path):
    write(tmp_path, row("start", 10.0), row("end", 11.5))
    scratch = pd.DataFrame({"source": ["mysweep.csv"], "measured_ms": [30.0], "predicted_ms": [10.0]})  # not the main job's
    pd.concat([validation_table().assign(source="roofline.csv"), scratch]).to_csv(tmp_path / "validation.csv", index=False)
    lines = steadiness.first_lines(tmp_path)
    assert "noisy" in lines[0] and "rerun" in lines[1]
    assert any(line.startswith("4 of 5 points lie inside") for line in lines)  # 12.0 unbanded is past 11.5


def test_no_probe_is_said(tmp_path):
    v = steadiness.verdict(tmp_path)
    assert v["noisy"] is None and "did not probe" in v["sentences"][0]
    assert steadiness.first_lines(tmp_path) == v["sentences"]


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="others' CPU time is read from Linux's /proc/stat")
def test_a_busy_program_shows_in_the_probe(tmp_path):
    """A quiet probe, then one with a core loaded: the loader's CPU time shows as other programs', and the
    verdict is computed from the two as recorded (what it concludes depends on this machine, not asserted)."""
    quiet = steadiness.probe(0.1, shape=SMALL)
    busy = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        time.sleep(0.3)  # the loader is running
        loaded = steadiness.probe(0.2, shape=SMALL)
    finally:
        busy.kill()
        busy.wait()
    assert loaded["others_cores"] >= 0.1
    write(tmp_path, {"stage": "start", **quiet}, {"stage": "end", **loaded})
    v = steadiness.verdict(tmp_path)
    assert v["parts"]["drift"] == pytest.approx(max(abs(loaded[k] / quiet[k] - 1) for k in ("gemm_ms", "gemm_1thread_ms")))
    assert v["noise"] >= max(v["parts"]["drift"], loaded["others_cores"] / loaded["cores"])


def test_the_probe_spread_sees_a_lasting_change_of_the_host_and_not_one_call_held_up():
    steady = [1.0] * 50
    held_up = steady[:20] + [30.0] + steady[21:]  # one call waited 30 times as long
    slowed = [1.0] * 30 + [2.0] * 20  # the host halved its speed for the last two fifths
    assert steadiness.chunk_spread(steady) == 0 and steadiness.chunk_spread(held_up) == 0
    assert steadiness.chunk_spread(slowed) == pytest.approx(1.0)


def test_a_host_that_slows_one_thread_and_not_two_is_noisy(tmp_path):
    """The two-core Intel VM (experiments/cpu_host): its one-thread GEMM moved by half from start to end while the
    two-thread one stayed; a p = 2 rank trains on one thread, so the run was noisy."""
    start, end = row("start", 10.0, gain=1.0), row("end", 10.3, gain=1.5)
    write(tmp_path, start, end)
    v = steadiness.verdict(tmp_path)
    assert v["noisy"] is True and v["parts"]["drift"] == pytest.approx(10.3 * 1.5 / 10.0 - 1)
    assert "+3% at the end of the run against the start on 2 BLAS thread(s), +55% on one" in v["sentences"][0]
    write(tmp_path, {**row("start", 10.0), "gemm_1thread_spread": 0.3}, row("end", 10.0))
    assert steadiness.verdict(tmp_path)["parts"]["spread"] == pytest.approx(0.3)  # a probe's one-thread spread counts


def test_probes_beside_the_points_show_a_host_that_switched_speed_between_start_and_end(tmp_path):
    """The start and the end can both land in the host's fast spells (experiments/cpu_host): the probes beside the
    points see the slow one, and the drift is the slowest of all the run's probes over the fastest."""
    beside = [{**row("point", ms), "point": f"H={h}"} for h, ms in ((512, 10.2), (1024, 14.8), (2048, 10.1))]
    write(tmp_path, row("start", 10.0), *beside, row("end", 10.1))
    v = steadiness.verdict(tmp_path)
    assert v["parts"]["drift"] == pytest.approx(14.8 / 10.0 - 1) and v["noisy"] is True
    assert "over 5 probes (at the start, beside each of 3 points, at the end) its probe GEMM took 10.0-14.8 ms" \
        in v["sentences"][0]
    write(tmp_path, row("start", 10.0), row("end", 10.2))  # a rerun: its own start, no points beside it yet
    assert steadiness.verdict(tmp_path)["parts"]["drift"] == pytest.approx(0.02)


def test_a_short_probe_beside_a_point_counts_by_its_median_not_its_own_spread(tmp_path):
    """A 0.2 s probe just after a point can catch the host finishing it (one H100: 825% within such a probe, the
    medians of all within 25%): its median moves the drift, its spread does not count as the host's noise."""
    beside = {**row("point", 10.5, spread=8.2), "point": "H=512"}
    write(tmp_path, row("start", 10.0, spread=0.02), beside, row("end", 10.1, spread=0.03))
    v = steadiness.verdict(tmp_path)
    assert v["parts"]["spread"] == pytest.approx(0.03) and v["parts"]["drift"] == pytest.approx(0.05)
    assert v["noise"] == pytest.approx(0.05) and v["noisy"] is False


def test_a_sweep_probes_the_host_before_each_point(tmp_path):
    """run_grid_engines' `between` runs before each point it measures, and steadiness.beside writes a short probe
    named for the point."""
    from perflab.workbook import sweep
    points = sweep.grid(hidden=(8, 12), batch=(100,), N=2000)
    order = []

    class View:
        def apply_sync(self, fn, point, dataset, timeout, where):
            order.append(("point", point["H"]))
            return [{**point, "status": "measured", "epoch_seconds": 0.1}]

    probe = steadiness.beside(tmp_path)
    sweep.run_grid_engines(View(), points, "s", out=tmp_path, progress=False, log=lambda _: None,
                           between=lambda pt: order.append(("probe", pt["H"])) or probe(pt))
    assert order == [("probe", 8), ("point", 8), ("probe", 12), ("point", 12)]
    probes = pd.read_csv(tmp_path / steadiness.FILE)
    assert list(probes.stage) == ["point", "point"] and list(probes.point) == [
        "H=8 B=100 p=1 numpy resident", "H=12 B=100 p=1 numpy resident"]
    assert (probes.gemm_repeats >= steadiness.MIN_PAIRS).all()


def test_each_points_miss_is_set_against_the_hosts_speed_beside_it(tmp_path):
    """A point measured while the host ran 1.5x slower than when the ceilings ran: its miss, scaled by that, is
    the predictor's own (none here); a p = 2 point is scaled by the one-thread GEMM its ranks train on."""
    beside = [{**row("point", 10.0, gain=1.5), "point": "H=512 B=1600 p=1 numpy resident"},
              {**row("point", 10.0, gain=3.0), "point": "H=512 B=3200 p=2 numpy resident"}]
    write(tmp_path, row("start", 10.0 / 1.5, gain=2.25), *beside, row("end", 10.0))  # one thread: 15 ms
    table = pd.DataFrame({"H": [512, 512, 1024], "B": [1600, 3200, 1600], "p": [1, 2, 1], "backend": "numpy",
                          "mode": "resident", "measured_ms": [30.0, 40.0, 50.0], "predicted_ms": [20.0, 20.0, 50.0]})
    judged = steadiness.judge(table, tmp_path)
    assert judged.host_ratio[0] == pytest.approx(1.5) and judged.host_ratio[1] == pytest.approx(2.0)
    assert judged.error_at_host_speed[0] == pytest.approx(0.0) and judged.error_at_host_speed[1] == pytest.approx(0.0)
    assert pd.isna(judged.host_ratio[2])  # no probe named it


def test_first_lines_scale_the_misses_by_the_probes_beside_the_points_and_say_how_good_those_were(tmp_path):
    beside = {**row("point", 15.0, spread=0.3), "point": "H=512 B=1600 p=1 numpy resident"}
    write(tmp_path, row("start", 10.0), beside, row("end", 10.0))
    pd.DataFrame({"source": "roofline.csv", "H": [512], "B": [1600], "p": [1], "backend": "numpy", "mode": "resident",
                  "measured_ms": [30.0], "predicted_ms": [20.0]}).to_csv(tmp_path / "validation.csv", index=False)
    lines = steadiness.first_lines(tmp_path)
    assert "the predictions of 1 points miss by a median of 0%, the worst 0%; a probe beside a point is itself good to " \
           "about ±30% (median)" in " ".join(lines)


def test_the_one_thread_probe_counts_only_where_a_point_trains_on_one_thread(tmp_path):
    """A CPU point over several ranks trains each on one thread (D57); a GPU point or a one-rank CPU point does not,
    and the one-thread GEMM moving beside them (9.2-20.7 ms on one H100's host) is not their noise (D61)."""
    beside = {**row("point", 10.0, gain=2.0), "point": "H=512"}  # one thread 20 ms here, 18 at the start and end
    write(tmp_path, row("start", 10.0), beside, row("end", 10.0))
    assert steadiness.verdict(tmp_path)["parts"]["drift"] == pytest.approx(20.0 / 18.0 - 1)  # no sweep yet: both
    for backend, p, counted in (("cupy", 1, False), ("numpy", 1, False), ("numpy", 2, True)):
        pd.DataFrame({"backend": [backend], "p": [p], "H": [512]}).to_csv(tmp_path / "roofline.csv", index=False)
        drift = steadiness.verdict(tmp_path)["parts"]["drift"]
        assert drift == pytest.approx(20.0 / 18.0 - 1 if counted else 0.0), (backend, p)
