"""The GPU datasheets perflab.analysis.transfer scales ceilings by, apart from it: the command line lists their
kinds (`perflab whatif --gpu-kind`) on every start, and transfer brings the predictor and pandas with it."""
import json
from pathlib import Path

SHEETS = json.loads((Path(__file__).with_name("datasheets.json")).read_text())
KINDS = tuple(k for k in SHEETS if k != "about")
