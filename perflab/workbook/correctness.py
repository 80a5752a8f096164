"""The seeds' correctness check on every ipyparallel MPI engine at once (the correctness notebook)."""
from __future__ import annotations

import pandas as pd

PARALLELS, DTYPES = ("data", "model"), ("float64", "float32")


def config(cfg_dict: dict):
    from perflab.config import Config
    return Config(**{**cfg_dict, "hidden_sizes": tuple(cfg_dict["hidden_sizes"])})


def run_spec(parallel: str, dtype: str, backend: str = "numpy"):
    """One check's run as a RunSpec."""
    from perflab.train.spec import RunSpec
    return RunSpec(backend=backend, parallel=parallel, dtype=dtype)


def checked(cfg_dict: dict, parallels=PARALLELS, dtypes=DTYPES) -> None:
    """Every check's Config and RunSpec, validated: a bad value is named (the hyperparameter's, or RunSpec's
    message) before any engine runs or starts."""
    for dtype in dtypes:
        config({**cfg_dict, "dtype": dtype})
        for parallel in parallels:
            run_spec(parallel, dtype).validate()


def check_on_world(cfg_dict: dict, parallel: str, p: int, backend: str = "numpy"):
    """On every engine: the seeds' correctness check on the first p ranks; rank 0 returns it."""
    from perflab.train.comm import on_first_ranks
    from perflab.train.runner import check
    cfg = config(cfg_dict)
    spec = run_spec(parallel, cfg.dtype, backend)
    return on_first_ranks(p, lambda comm: check(cfg, parallel, comm, spec))


def correctness_table(view, cfg_dict: dict, ranks, parallels=PARALLELS, dtypes=DTYPES):
    """The seeds' Questions 1.1/1.2: per-parameter relative errors of every (p, mode, dtype)."""
    checked(cfg_dict, parallels, dtypes)  # a bad value is named here, before any engine runs
    rows = []
    for dtype in dtypes:
        for parallel in parallels:
            for p in ranks:
                got = [r for r in view.apply_sync(check_on_world, {**cfg_dict, "dtype": dtype}, parallel, p) if r]
                r = got[0]
                rows.append({"dtype": dtype, "parallel": parallel, "p": p, "max_rel_error": r["max_rel_error"],
                             "tolerance": r["tolerance"], "passed": r["passed"], **r["errors"]})
    return pd.DataFrame(rows)
