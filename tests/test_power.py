"""Clock and power sampling (perflab.measure.power) without a GPU: nvidia-smi's lines parsed, a window
summarized, and the sampler's process driven through a stand-in nvidia-smi."""
import datetime
import os
import time

import pandas as pd
import pytest

from perflab.measure import power
from perflab.report import plots


def smi_line(t: float, clock: float, watts: float, reasons: int, temp: float = 60) -> str:
    stamp = datetime.datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, {clock:.0f}, {watts:.2f}, {temp:.0f}, 0x{reasons:016x}"


def test_parse_samples_reads_nvidia_smi_lines_and_skips_the_rest():
    t = 1_700_000_000.25
    lines = [smi_line(t, 1980, 125.5, 0), "Failed to ...", smi_line(t + 0.05, 1800, 699.1, 0x4),
             "2026/11/23 18:16:13.022, [N/A], 120.0, 36, 0x0000000000000000"]
    samples = power.parse_samples(lines)
    assert [s["clock_mhz"] for s in samples] == [1980, 1800]
    assert samples[1]["power_w"] == pytest.approx(699.1) and samples[1]["reasons"] == 0x4
    assert samples[0]["t"] == pytest.approx(t, abs=1e-3) and samples[1]["t"] - samples[0]["t"] == pytest.approx(0.05, abs=1e-3)


def test_summarize_takes_the_window_and_names_the_reasons():
    samples = [{"t": 10 + i / 10, "clock_mhz": 1980 - 10 * i, "power_w": 600 + i, "temp_c": 50 + i,
                "reasons": 0x4 if i >= 5 else 0x1} for i in range(10)]
    window = power.summarize(samples, 10.45, 11.0, settle=0)  # i = 5 .. 9
    assert window["samples"] == 5 and window["clock_mhz"] == 1910 and window["clock_mhz_min"] == 1890
    assert window["power_w"] == 607 and window["power_w_max"] == 609 and window["temp_c_max"] == 59
    assert window["reasons"] == "software power cap"
    assert power.summarize(samples, 10.0, 10.3)["reasons"] == "idle"  # the settle time drops t < 10.2
    assert power.summarize(samples, 20, 21) == {"samples": 0}
    assert power.reason_names(0x4 | 0x40 | 0x10000) == ["software power cap", "hardware thermal slowdown", "0x10000"]


def test_sampler_runs_nvidia_smi_and_reads_its_samples(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n"
                    "echo \"$@\" > \"$(dirname \"$0\")/args\"\n"
                    "while true; do date '+%Y/%m/%d %H:%M:%S.%N' | cut -c1-23 | sed 's/$/, 1755, 698.50, 61, 0x0000000000000004/'; "
                    "sleep 0.05; done\n")
    fake.chmod(0o755)
    with power.Sampler(tmp_path / "smi.csv", "00000000:18:00.0", smi=str(fake)) as sampler:
        start = time.time()
        time.sleep(0.6)
    assert len(sampler.samples) >= 4
    assert {s["clock_mhz"] for s in sampler.samples} == {1755} and sampler.samples[0]["reasons"] == 0x4
    assert abs(sampler.samples[0]["t"] - start) < 1.0
    args = (tmp_path / "args").read_text().split()
    assert "-i" in args and args[args.index("-i") + 1] == "00000000:18:00.0" and f"--query-gpu={power.QUERY}" in args
    assert power.summarize(sampler.samples, start, time.time())["reasons"] == "software power cap"


def test_sampler_without_nvidia_smi_or_its_samples_says_so(tmp_path):
    with pytest.raises(power.SamplingError, match="'no-such-smi' is not on PATH"):
        power.Sampler(tmp_path / "smi.csv", "0", smi="no-such-smi")
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\necho \'Field "clocks_event_reasons.active" is not a valid field to query.\'\nexit 2\n')
    fake.chmod(0o755)
    with pytest.raises(power.SamplingError, match='gave no samples .* it said: Field "clocks_event_reasons.active" is not'):
        with power.Sampler(tmp_path / "smi.csv", "0", smi=str(fake)):
            time.sleep(0.2)


def test_held_clocks_figure_draws_from_the_tables(tmp_path):
    samples = pd.DataFrame({"t": [100 + i / 20 for i in range(80)], "clock_mhz": [1980] * 40 + [1800] * 40,
                            "power_w": [650] * 80})
    holds = pd.DataFrame([{"shape": "bwd3 H=2048 B=12000", "variant": v, "t0": 100 + 2 * i, "t1": 101.9 + 2 * i,
                           "tflops_held": 40 + i} for i, v in enumerate(("best", "cublas"))])
    png = plots.save(plots.held_clocks(holds, samples), "held", "a caption", folder=tmp_path)
    assert png.exists() and png.stat().st_size > 10_000 and os.path.exists(tmp_path / "held.pdf")
