"""A main job run while another program holds a core (a student's laptop) says so in its report's first lines,
and judges every point's miss against the band the machine's own noise allows. How many points fall inside that
band depends on the machine and its predictor's accuracy there (issue 66's target, >= 90%, is measured in the
committed runs), so it is counted and said, not asserted. The job is conftest.loaded_main_job, run once for this
test and test_mainjob's fresh clone: the other program holds its core from before the job's first probe of the
host until its last (after the sweep), through the ceilings and the sweep, everything the report judges."""
import re

import pandas as pd
import pytest

from perflab.measure import steadiness
from perflab.report import pdf


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the job, loaded for its measurements: about 2 min here, more on a slower machine
def test_a_main_job_on_a_loaded_machine_says_it_was_noisy_first_and_judges_its_misses_by_that_noise(loaded_main_job):
    proc, run = loaded_main_job.procs[0], loaded_main_job.run
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = pdf.first_lines(run)
    assert said and "noisy" in said[0].lower() and "rerun" in " ".join(said).lower(), said
    table = pd.read_csv(run / "validation.csv")
    judged = steadiness.judge(table[(table.source == "roofline.csv") & table.predicted_ms.notna()], run)
    assert len(judged) >= 5 and judged.inside_noise.notna().all(), judged.to_string()
    counted = re.search(r"(\d+) of (\d+) points lie inside their prediction's band", " ".join(said))
    inside = sum(x is True for x in judged.inside_noise)
    assert counted and (int(counted[1]), int(counted[2])) == (inside, len(judged)), (said, judged.to_string())
