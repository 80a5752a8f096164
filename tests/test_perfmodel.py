import math

import pytest

from perflab.analysis import perfmodel as pm

SEEDS = pm.Workload(layers=(784, 512, 10), B=3000, p=2, dtype="float32")


def test_phase_flops_by_hand_small():
    w = pm.Workload(layers=(3, 2, 4), B=5, p=1)
    f = pm.phase_flops(w)
    assert f["forward GEMM 1"] == 2 * 2 * 3 * 5 and f["forward GEMM 2"] == 2 * 4 * 2 * 5
    assert f["backward GEMM 1"] == 2 * 4 * 2 * 5      # dW2 = delta a1^T
    assert f["backward GEMM 2"] == 2 * 4 * 2 * 5      # da1 = W2^T delta
    assert f["backward GEMM 3"] == 2 * 2 * 3 * 5      # dW1 = dz1 X^T
    assert "backward GEMM 4" not in f
    assert f["step"] == 2 * (2 * 3 + 2 + 4 * 2 + 4) + 2 * (2 * 3 + 4 * 2)
    deep = pm.phase_flops(pm.Workload(layers=(3, 2, 2, 4), B=1, p=1))
    assert sorted(k for k in deep if "backward GEMM" in k) == [f"backward GEMM {i}" for i in range(1, 6)]


def test_data_parallel_splits_batch_model_parallel_splits_units():
    one, four = pm.phase_flops(pm.Workload(p=1)), pm.phase_flops(pm.Workload(p=4))
    assert four["forward GEMM 1"] == one["forward GEMM 1"] / 4
    model = pm.phase_flops(pm.Workload(p=4, parallel="model"))
    assert model["forward GEMM 1"] == one["forward GEMM 1"] / 4 and model["forward GEMM 2"] == one["forward GEMM 2"] / 4
    by = pm.phase_bytes(pm.Workload(p=4, parallel="model", B=3200))
    assert by["payload"] == 10 * 3200 * 4 and by["mpi_ring"] == 2 * 3 / 4 * 10 * 3200 * 4


def test_seeds_approximation_and_bytes():
    """Question 2.3 of the final assignment: 2B'H(D+C) each way, 2(HD+H+CH+C)b over PCIe and MPI."""
    assert pm.seeds_flops(SEEDS)["forward"] == 2 * 1500 * 512 * 794
    by = pm.phase_bytes(SEEDS)
    two_s = 2 * (512 * 784 + 512 + 10 * 512 + 10) * 4
    assert by["pcie_gradients"] == two_s == by["mpi_seeds"] == 3_256_400
    assert by["mpi_ring"] == two_s / 2  # p = 2: 2(p-1)/p S = S
    assert pm.arithmetic_intensity(SEEDS) == pytest.approx(4 * 1500 * 512 * 794 / (2 * two_s))
    assert pm.Workload(p=1, host_allreduce=True).num_params == 407050
    assert pm.phase_bytes(pm.Workload(p=1))["pcie_gradients"] == 0


def test_effective_rates_reproduce_the_seeds_solution():
    """Medians from the seeds' Figure 11 give their P_flops, P_pci and P_mpi (Question 2.4)."""
    us = 1e-6
    medians = {"forward GEMM 1": 470.879 * us, "forward GEMM 2": 100.112 * us, "backward GEMM 1": 234.144 * us,
               "backward GEMM 3": 688.815 * us, "cudaMemcpyDeviceToHost": 124.960 * us,
               "cudaMemcpyHostToDevice": 131.055 * us, "MPI_Allreduce": 409.599 * us}
    rates = pm.effective_rates(SEEDS, medians)
    assert rates["P_flops"] == pytest.approx(1.632730e12, rel=1e-4)
    assert rates["P_pci"] == pytest.approx(1.2720e10, rel=1e-4)
    assert rates["P_mpi"] == pytest.approx(7.9502e9, rel=1e-4)


def test_rooflines():
    assert pm.roofline_standard(1.0, 10.0, 2.0) == 2.0 and pm.roofline_standard(100.0, 10.0, 2.0) == 10.0
    # serial: time adds, so at the ridge AI = P/BW the rate is half the peak
    assert pm.roofline_serial(5.0, 10.0, 2.0) == pytest.approx(5.0)
    assert pm.roofline_serial(1e9, 10.0, 2.0) == pytest.approx(10.0, rel=1e-6)
    assert pm.roofline_combined(5.0, 10.0, 2.0, 2.0) == pm.roofline_serial(5.0, 10.0, 2.0)
    assert pm.roofline_combined(3.0, 10.0, 1.0, 3.0) == pytest.approx(3.0 / (0.3 + 0.5 * (1 + 1 / 3)))


def test_predict_adds_phases_and_scales_with_epoch():
    c = pm.Ceilings(P_flops=1.63e12, P_pci=12.7e9, P_mpi=7.95e9)
    t = pm.predict(SEEDS, c)
    assert t["batch"] == pytest.approx(t["gemm"] + t["elementwise"] + t["pcie"] + t["mpi"] + t["launch"])
    assert t["mpi"] == pytest.approx(3_256_400 / 7.95e9)
    assert t["epoch"] == pytest.approx(t["batch"] * math.ceil(38400 / 3000))
    faster = pm.predict(pm.Workload(layers=(784, 512, 10), B=3000, p=2, staged=False, host_allreduce=False), c)
    assert faster["batch"] < t["batch"]


@pytest.mark.parametrize("H", [512, 2048])
def test_gradient_buffer_is_every_parameter_and_the_loss_slot(H):
    from perflab.train import model
    params = model.init_params((784, H, 10), "float32", 0)
    assert pm.gradient_buffer_bytes(H) == 4 * (sum(p.size for p in params) + 1)


def test_a_net_reads_the_same_however_a_table_wrote_it():
    """One text per net for every reader of a table's H column (sweeps write 512, CSVs read '512' or 512.0
    beside '1024-1024'); a gap names no net."""
    import pandas as pd
    assert pm.net_name(512) == pm.net_name("512") == pm.net_name((512,)) == "512"
    assert pm.net_name([1024, 1024]) == pm.net_name("1024-1024") == "1024-1024"
    column = pd.Series([512, "512", 512.0, "1024-1024", float("nan"), "", 2048], dtype=object)
    assert pm.is_net(column, 512).tolist() == [True, True, True, False, False, False, False]
    assert pm.is_net(column, (1024, 1024)).tolist() == [False, False, False, True, False, False, False]
