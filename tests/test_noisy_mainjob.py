"""A main job run while another program holds a core (a student's laptop) says so in its report's first lines,
and its misses lie inside the band the machine's own noise allows (issue 66's target: >= 90% of points)."""
import os
import subprocess
import sys

import pandas as pd
import pytest

from perflab.data import PROJECT_ROOT
from perflab.measure import steadiness
from perflab.report import pdf

SMALL = ["-p", "hidden", "[64]", "-p", "per_rank_batch", "100", "-p", "batch_sweep", "[100, 400]", "-p", "N", "800",
         "-p", "engines", "2", "-p", "problem1_minutes", "0.1", "-p", "compare_committed", "False"]


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a main job under load: about 4 min here, three times that on a slow machine
def test_a_main_job_on_a_loaded_machine_says_it_was_noisy_first_and_judges_its_misses_by_that_noise(tmp_path):
    run = tmp_path / "run"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PERFLAB_")}, "PERFLAB_RUN_DIR": str(run)}
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # another program on one core, all along
    try:
        proc = subprocess.run([sys.executable, "-m", "perflab", "notebook", "roofline", *SMALL, "--json"], cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=1200, env=env)
    finally:
        busy.kill()
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = pdf.first_lines(run)
    assert said and "noisy" in said[0].lower() and "rerun" in " ".join(said).lower(), said
    judged = steadiness.judge(pd.read_csv(run / "validation.csv"), run)
    inside = judged.inside_noise.dropna().astype(bool)
    assert len(inside) >= 5 and inside.mean() >= 0.9, judged[["H", "B", "p", "measured_ms", "predicted_ms",
                                                               "noise_low_ms", "noise_high_ms"]].to_string()
