"""The seeds' correctness check on every ipyparallel MPI engine at once (the correctness notebook)."""
from __future__ import annotations

import pandas as pd


def config(cfg_dict: dict):
    from perflab.config import Config
    return Config(**{**cfg_dict, "hidden_sizes": tuple(cfg_dict["hidden_sizes"])})


def check_on_world(cfg_dict: dict, parallel: str, p: int, backend: str = "numpy"):
    """On every engine: the seeds' correctness check on the first p ranks; rank 0 returns it."""
    from perflab.train.comm import on_first_ranks
    from perflab.train.runner import Device, check
    return on_first_ranks(p, lambda comm: check(config(cfg_dict), parallel, comm, Device(backend=backend)))


def correctness_table(view, cfg_dict: dict, ranks, parallels=("data", "model"), dtypes=("float64", "float32")):
    """The seeds' Questions 1.1/1.2: per-parameter relative errors of every (p, mode, dtype)."""
    for dtype in dtypes:
        config({**cfg_dict, "dtype": dtype})  # a bad value is named here, before any engine runs
    rows = []
    for dtype in dtypes:
        for parallel in parallels:
            for p in ranks:
                got = [r for r in view.apply_sync(check_on_world, {**cfg_dict, "dtype": dtype}, parallel, p) if r]
                r = got[0]
                rows.append({"dtype": dtype, "parallel": parallel, "p": p, "max_rel_error": r["max_rel_error"],
                             "tolerance": r["tolerance"], "passed": r["passed"], **r["errors"]})
    return pd.DataFrame(rows)
