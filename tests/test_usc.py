"""The USC seed's experiment (perflab.workbook.usc): each configuration its own `perflab train` process."""
import pandas as pd
import pytest

from perflab.workbook import usc

pytestmark = pytest.mark.mpi


def test_the_configurations_are_serial_once_then_each_way_at_each_core_count():
    got = usc.configs([1, 2, 4], gpu=True)
    assert [(c["net"], c["way"], c["cores"]) for c in got if c["net"] == "Network2"] == [
        ("Network2", "serial", 1), ("Network2", "examples", 2), ("Network2", "matrices", 2),
        ("Network2", "examples", 4), ("Network2", "matrices", 4), ("Network2", "gpu", 1)]
    assert len(usc.configs([1], nets={"a": (8,)})) == 1
    for bad in ([], [0], [2, -1]):
        with pytest.raises(ValueError, match="cores must be whole numbers of 1 or more"):
            usc.configs(bad)
    examples = usc.command({"net": "Network1", "way": "examples", "cores": 4}, usc.NETS, 1000, 12000, 3)
    assert examples[1:3] == ["-n", "4"] and examples[examples.index("--threads") + 1] == "1"
    matrices = usc.command({"net": "Network2", "way": "matrices", "cores": 4}, usc.NETS, 1000, 12000, 3)
    assert "-n" not in matrices and matrices[matrices.index("--threads") + 1] == "4"
    assert matrices[matrices.index("--hidden-size") + 1:matrices.index("--hidden-size") + 3] == ["1024", "1024"]


@pytest.mark.slow  # make test-all: six `perflab train` processes (the usc notebook runs them too)
def test_a_run_writes_each_configuration_and_a_rerun_measures_none_again(tmp_path):
    nets = {"Network1": (24,), "Network2": (24, 24)}
    table = usc.run([1, 2], nets=nets, batch=100, N=400, epochs=2, gpu=False, out=tmp_path, progress=False)
    assert len(table) == 6 and set(table.way) == {"serial", "examples", "matrices"}
    assert (table[table.way == "serial"].speedup == 1).all() and (table.gflops > 0).all()
    assert set(table.hidden) == {"24", "24-24"}
    before = (tmp_path / "usc.csv").read_text()
    assert len(usc.run([1, 2], nets=nets, batch=100, N=400, epochs=2, gpu=False, out=tmp_path, progress=False)) == 6
    assert (tmp_path / "usc.csv").read_text() == before
    assert len(pd.read_csv(tmp_path / "usc.csv")) == 6


def test_a_configuration_that_fails_is_named_with_what_its_process_said(tmp_path):
    with pytest.raises(usc.USCError, match=r"Network1 serial on 1 core\(s\) failed \(exit 2\): .*hidden-size"):
        usc.run([1], nets={"Network1": (0,)}, batch=100, N=400, epochs=1, gpu=False, out=tmp_path, progress=False)


def test_the_committed_run_holds_every_configuration_with_its_machine():
    """results/nvidia-h100-80gb-hbm3/usc.csv: both nets, every way at 1-16 cores and the GPU, on its machine."""
    import json

    from perflab.results import RESULTS_ROOT
    path = RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "usc.csv"
    table = usc.with_speedup(pd.read_csv(path))
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["cpu_count"] == 16 and meta["gpu"].startswith("NVIDIA H100") and meta["git_commit"] != "WORKTREE"
    expected = usc.configs([1, 2, 4, 8, 16], gpu=True)
    assert [(c["net"], c["way"], c["cores"]) for c in expected] == list(zip(table.net, table.way, table.cores))
    gpu, cpu = table[table.way == "gpu"], table[table.way != "gpu"]
    assert gpu.speedup.min() > 10 * cpu.speedup.max()  # what REPORT.md's USC section says of the GPU
