"""A main job run while another program holds a core (a student's laptop) says so in its report's first lines,
and judges every point's miss against the band the machine's own noise allows. How many points fall inside that
band depends on the machine and its predictor's accuracy there (issue 66's target, >= 90%, is measured in the
committed runs), so it is counted and said, not asserted."""
import os
import re
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
    table = pd.read_csv(run / "validation.csv")
    judged = steadiness.judge(table[(table.source == "roofline.csv") & table.predicted_ms.notna()], run)
    assert len(judged) >= 5 and judged.inside_noise.notna().all(), judged.to_string()
    counted = re.search(r"(\d+) of (\d+) points lie inside their prediction's band", " ".join(said))
    inside = sum(x is True for x in judged.inside_noise)
    assert counted and (int(counted[1]), int(counted[2])) == (inside, len(judged)), (said, judged.to_string())
