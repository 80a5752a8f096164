import pandas as pd
import pytest

from perflab.analysis import projection
from perflab.results import RESULTS_ROOT


def test_fit_allreduce_recovers_alpha_and_bandwidth():
    sizes = [1 << 20, 1 << 22, 1 << 24]
    rows = pd.DataFrame({"ceiling": "nccl_allreduce", "size_bytes": sizes, "ranks": 2,
                         "seconds": [20e-6 + s / 250e9 for s in sizes]})
    alpha, bw = projection.fit_allreduce(rows)
    assert alpha == pytest.approx(20e-6) and bw == pytest.approx(250e9)


def test_projection_formulas():
    one = projection.project(2048, 3000, 1, 60000, 0.5e-3, 3000, 20e-6, 250e9, 80e-6)
    assert one["steps"] == 20 and one["epoch_ms"] == pytest.approx(20 * 0.5)
    two = projection.project(2048, 3000, 2, 60000, 0.5e-3, 3000, 20e-6, 250e9, 80e-6)
    S = (2048 * 784 + 2048 + 10 * 2048 + 10) * 4
    assert two["allreduce_ms"] == pytest.approx(1e3 * (20e-6 + S / 250e9))
    assert two["epoch_ms"] == pytest.approx(10 * (0.5 + 0.08 + two["allreduce_ms"]))
    model = projection.project(2048, 3000, 8, 60000, 0.5e-3, 3000, 20e-6, 250e9, 80e-6, parallel="model")
    assert model["allreduce_ms"] == pytest.approx(1e3 * (20e-6 + 2 * 7 / 8 * 10 * 3000 * 8 * 4 / 250e9))
    assert projection.step_seconds(0.5e-3, 3000, 1500) == pytest.approx(40e-6 + (0.5e-3 - 40e-6) / 2)


@pytest.mark.parametrize("name, scaling", projection.CALIBRATIONS.items())
def test_committed_prediction_matches_the_committed_inputs(name, scaling):
    """Each committed prediction was computed from the committed H200 files (regenerate to compare)."""
    import json
    committed = json.loads((RESULTS_ROOT / "predictions" / f"{name}.json").read_text())
    fresh = projection.predictions(RESULTS_ROOT, scaling=scaling)
    assert [r["epoch_ms"] for r in committed["rows"]] == pytest.approx([r["epoch_ms"] for r in fresh["rows"]])


def test_committed_multinode_projection_matches_the_committed_inputs():
    committed = pd.read_csv(RESULTS_ROOT / "predictions" / "projection_64.csv")
    fresh = projection.multinode(RESULTS_ROOT, scaling=projection.MULTINODE_CALIBRATION)
    assert list(committed.strategy) == list(fresh.strategy)
    assert list(committed.epoch_ms) == pytest.approx(list(fresh.epoch_ms))


def test_multinode_allreduce_models():
    intra, inter = (20e-6, 250e9), (5e-6, 25e9)
    S = 6.5e6
    one_node = projection.allreduce_nodes(S, 8, 8, intra, inter, "flat")
    assert one_node == projection.allreduce_nodes(S, 8, 8, intra, inter, "hierarchical")
    flat = projection.allreduce_nodes(S, 64, 8, intra, inter, "flat")
    hier = projection.allreduce_nodes(S, 64, 8, intra, inter, "hierarchical")
    assert flat == pytest.approx(2 * 63 * 5e-6 + 2 * 63 / 64 * S / 25e9)
    assert hier == pytest.approx(20e-6 + 2 * 7 / 8 * S / 250e9 + 2 * 7 * 5e-6 + 2 * 7 / 8 * S / 25e9)
    assert hier < flat
    table = projection.projection_table(2048, 3000, 60000, 0.56e-3, 3000, 80e-6, intra, inter)
    eff = table.pivot_table(index="p", columns="strategy", values="efficiency")
    assert (eff.loc[1] == 1).all() and eff.loc[64].min() < eff.loc[8].max()
