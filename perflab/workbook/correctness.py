"""The seeds' correctness check on every ipyparallel MPI engine at once (the correctness notebook)."""
from __future__ import annotations

import pandas as pd


def check_on_world(cfg_dict: dict, parallel: str, p: int, backend: str = "numpy"):
    """On every engine: the seeds' correctness check on the first p ranks; rank 0 returns it."""
    from perflab.config import Config
    from perflab.train.comm import sub_world, world
    from perflab.train.runner import Device, check
    w = world()
    comm = sub_world(w, p)
    result = None
    if comm is not None:
        cfg = Config(**{**cfg_dict, "hidden_sizes": tuple(cfg_dict["hidden_sizes"])})
        result = check(cfg, parallel, comm, Device(backend=backend))
        if comm.comm is not w.comm:
            comm.comm.Free()
    w.idle_barrier()
    return result if (comm is not None and comm.rank == 0) else None


def correctness_table(view, cfg_dict: dict, ranks, parallels=("data", "model"), dtypes=("float64", "float32")):
    """The seeds' Questions 1.1/1.2: per-parameter relative errors of every (p, mode, dtype)."""
    rows = []
    for dtype in dtypes:
        for parallel in parallels:
            for p in ranks:
                got = [r for r in view.apply_sync(check_on_world, {**cfg_dict, "dtype": dtype}, parallel, p) if r]
                r = got[0]
                rows.append({"dtype": dtype, "parallel": parallel, "p": p, "max_rel_error": r["max_rel_error"],
                             "tolerance": r["tolerance"], "passed": r["passed"], **r["errors"]})
    return pd.DataFrame(rows)
