"""One GPU kind predicted from another's ceilings and the two datasheets (perflab.analysis.transfer)."""
import json

import pytest

from perflab import results
from perflab.analysis import predictor, transfer
from perflab.results import RESULTS_ROOT

H200 = RESULTS_ROOT / "nvidia-h200" / "mainjob_877c899" / "ceilings_p1.csv"
H100, H200_KIND = "nvidia-h100-80gb-hbm3", "nvidia-h200"


def test_compute_bound_gemms_carry_over_and_memory_bound_passes_scale_by_the_bandwidths():
    source, target = H200_KIND, H100
    bandwidth = transfer.sheet(source)["memory_tb_s"] / transfer.sheet(target)["memory_tb_s"]
    assert transfer.kernel_factor("forward GEMM 1 (cuBLAS)", 2048, 3200, source, target) == pytest.approx(1.0)
    assert transfer.kernel_factor("SGD + L2 update", 2048, 3200, source, target) == pytest.approx(bandwidth)
    assert transfer.kernel_factor("db2 row sums", 512, 400, source, target) == pytest.approx(bandwidth)
    whole = transfer.kernel_factor("step in sequence (cublas)", 1024, 3200, source, target)
    half = transfer.kernel_factor("step in sequence (cublas-bf16)", 1024, 3200, source, target)
    assert 1.0 < whole < half < bandwidth  # a step is its mix; in BF16 the GEMMs are a smaller part of it
    assert transfer.kernel_factor("hidden layer (cublas)", 1024, 3200, target, source) == pytest.approx(
        1 / transfer.kernel_factor("hidden layer (cublas)", 1024, 3200, source, target))
    assert transfer.kernel_factor("no such kernel", 1024, 3200, source, target) is None


def test_a_transfer_scales_the_gpu_kernels_and_keeps_the_host_and_the_links():
    c = predictor.Ceilings.load(H200)
    moved, made = transfer.to_kind(c, "NVIDIA H200", H100)
    a, b = c.table, moved.table
    kernels = (a.ceiling == "step_kernel") & (a.device == "gpu")
    ratio = b.seconds[kernels] / a.seconds[kernels]
    assert ratio.min() >= 1.0 - 1e-12 and ratio.max() == pytest.approx(4.8 / 3.35) and (ratio > 1.01).any()
    host = a.ceiling.isin(transfer.CARRIED)
    assert host.any() and a[host].equals(b[host])
    copy = a.ceiling == "device_copy"
    assert (b.value[copy] / a.value[copy]).iloc[0] == pytest.approx(3.35 / 4.8)
    assert len(moved.boots) == len(c.boots) > 0 and made["from_kind"] == H200_KIND and made["to_kind"] == H100
    assert made["unscaled_kernels"] == []


def test_a_transfer_is_refused_across_architectures_and_from_a_cpu(monkeypatch):
    c = predictor.Ceilings.load(H200)
    with pytest.raises(transfer.TransferError, match="measured on no GPU"):
        transfer.to_kind(c, None, H100)
    monkeypatch.setitem(transfer.SHEETS, "other", {**transfer.SHEETS[H100], "architecture": "sm_80", "gpu_names": []})
    monkeypatch.setattr(transfer, "KINDS", transfer.KINDS + ("other",))
    with pytest.raises(transfer.TransferError, match="only within one architecture"):
        transfer.to_kind(c, "NVIDIA H200", "other")


def test_whatif_for_another_kind_reads_no_file_of_that_kind(tmp_path, monkeypatch, capsys):
    from tests.test_predictor import perflab_here
    read = []
    real = results.read_table
    monkeypatch.setattr(results, "read_table", lambda path, *a: read.append(str(path)) or real(path, *a))
    predictor.BOOTS.clear()  # the source machine's boots are read again, and seen
    proc = perflab_here(capsys, "whatif", "--ceilings", str(H200), "--gpu-kind", H100, "--hidden", "1760", "--launch",
                        "graph", "eager", "--dtype", "float32", "bfloat16", "--out", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(read) > 1 and all("/nvidia-h200/" in path for path in read), read
    made = json.loads((tmp_path / "whatif.json").read_text())
    assert made["transfer"]["to_kind"] == H100 and "no file of that kind read" in made["method"]
    same = perflab_here(capsys, "whatif", "--ceilings", str(H200), "--hidden", "1760", "--launch", "graph", "eager",
                        "--dtype", "float32", "bfloat16", "--out", str(tmp_path), "--name", "same", "--json")
    assert same.returncode == 0
    own = {(r["launch"], r["dtype"]): r["batch_ms"] for r in json.loads((tmp_path / "same.json").read_text())["rows"]}
    for r in made["rows"]:  # the slower memory makes every step slower, the half step most
        assert r["batch_ms"] > own[(r["launch"], r["dtype"])], r


def test_whatif_refuses_an_unknown_gpu_kind_naming_the_kinds_it_knows(capsys):
    from tests.test_predictor import perflab_here
    proc = perflab_here(capsys, "whatif", "--ceilings", str(H200), "--gpu-kind", "nvidia-a100", "--hidden", "1760")
    assert proc.returncode == 2
    assert "--gpu-kind" in proc.stderr and "nvidia-a100" in proc.stderr and all(k in proc.stderr for k in transfer.KINDS)


def test_a_blind_prediction_of_a_kind_from_its_own_ceilings_is_refused(tmp_path, capsys):
    """--gpu-kind names a kind the ceilings (or an --exchange-ceilings file) were measured on: refused, since the
    prediction would read a file of the kind it predicts while saying it read none."""
    from tests.test_predictor import perflab_here
    with pytest.raises(transfer.TransferError, match="that kind itself"):
        transfer.to_kind(predictor.Ceilings.load(H200), "NVIDIA H200", H200_KIND)
    own = perflab_here(capsys, "whatif", "--ceilings", str(H200), "--gpu-kind", H200_KIND, "--hidden", "1760", "--out",
                       str(tmp_path))
    assert own.returncode == 2 and "--gpu-kind nvidia-h200" in own.stderr and "that kind itself" in own.stderr
    h100 = RESULTS_ROOT / H100 / "mainjob" / "ceilings_p1.csv"
    exchange = RESULTS_ROOT / "nvidia-h200-x4" / "ceilings_p4.csv"
    mixed = perflab_here(capsys, "whatif", "--ceilings", str(h100), "--exchange-ceilings", str(exchange), "--gpu-kind",
                         H200_KIND, "--hidden", "1760", "--ranks", "4", "--out", str(tmp_path))
    assert mixed.returncode == 2 and str(exchange) in mixed.stderr and "NVIDIA H200" in mixed.stderr
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("field", transfer.SHEET_FIELDS)
def test_a_datasheet_without_a_field_a_transfer_reads_is_refused_naming_it(monkeypatch, field):
    sheet = {k: v for k, v in transfer.SHEETS[H100].items() if k != field}
    monkeypatch.setitem(transfer.SHEETS, H100, sheet)
    with pytest.raises(transfer.TransferError, match=f"datasheet of {H100} .* lacks {field}"):
        transfer.to_kind(predictor.Ceilings.load(H200), "NVIDIA H200", H100)


def test_an_incomplete_datasheet_of_another_kind_does_not_stop_a_gpu_being_named(monkeypatch):
    """kind_of reads each kind's GPU names only: a sheet added by hand without the fields a transfer reads is refused
    where a transfer reads it, not while another kind is named."""
    monkeypatch.setitem(transfer.SHEETS, "nvidia-a100", {"gpu_names": ["NVIDIA A100-SXM4-80GB"]})
    monkeypatch.setattr(transfer, "KINDS", ("nvidia-a100",) + transfer.KINDS)
    assert transfer.kind_of("NVIDIA H200") == H200_KIND and transfer.kind_of("NVIDIA A100-SXM4-80GB") == "nvidia-a100"
    assert transfer.measured_on("NVIDIA H200", H200_KIND) and not transfer.measured_on("NVIDIA H200", "nvidia-a100")
    with pytest.raises(transfer.TransferError, match="datasheet of nvidia-a100 .* lacks"):
        transfer.sheet("nvidia-a100")
