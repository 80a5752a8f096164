import json
import subprocess
import sys

import pytest

from perflab.cli import main


def test_train_json_last_line(capsys):
    assert main(["train", "--dataset", "synthetic", "--input-size", "12", "--hidden-size", "8",
                 "--train-size", "200", "--batch-size", "50", "--test-size", "50", "--json",
                 "--learning-rate", "0.5", "--num-epochs", "2"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads(last)
    for key in ("final_loss", "test_precision", "epoch_seconds", "hidden_sizes", "batch_size", "learning_rate"):
        assert key in summary
    assert summary["hidden_sizes"] == [8] and summary["num_epochs"] == 2
    assert 0 <= summary["test_precision"] <= 1 and summary["final_loss"] > 0
    from perflab.results import git_commit
    assert summary["machine"]["git_commit"] == git_commit() and summary["machine"]["cpu_count"] > 0  # a result row


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "batch_size must be a positive integer, got 0"),
    (["--learning-rate", "-1"], "learning_rate must be positive, got -1.0"),
    (["--train-size", "10", "--batch-size", "20"], "batch_size B=20 is larger than train_size N=10"),
    (["--gemm", "tf32"], "--gemm tf32 runs perflab's CUDA kernels: it needs --backend cupy"),
    (["--overlap"], "--overlap overlaps an NCCL all-reduce with the backward pass: it needs --comm nccl"),
    (["--comm", "cuda-mpi"], "--comm cuda-mpi needs --backend cupy"),
    (["--comm", "p2p"], "--comm p2p needs --backend cupy"),
    (["--comm", "nccl-half", "--dtype", "bfloat16"], "--comm nccl-half needs --backend cupy"),
    (["--mode", "pipelined"], "--mode pipelined overlaps host <-> GPU copies with GPU compute: it needs --backend cupy"),
    (["--mode", "pipelined", "--comm", "nccl"], "--comm nccl needs --backend cupy"),
    (["--timeout", "0"], "argument --timeout: expected a positive number, got '0'"),
    (["--dtype", "bfloat16", "--parallel", "model"], "--dtype bfloat16 trains data parallel (or on one rank); got "
                                                      "--parallel model"),
    (["--dtype", "bf16"], "argument --dtype: invalid choice: 'bf16'"),
    (["--threads", "0"], "argument --threads: expected a positive integer, got '0'"),
    (["--threads", "many"], "argument --threads: expected a positive integer, got 'many'"),
    (["--timeout", "soon"], "argument --timeout: expected a positive number, got 'soon'"),
])
def test_train_bad_values_exit_2_with_message(capsys, args, message):
    with pytest.raises(SystemExit) as info:
        main(["train", "--dataset", "synthetic", *args])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("changes, message", [
    ({"mode": "staged", "overlap": False}, "--mode staged exchanges gradients through the host"),
    ({"parallel": "model", "overlap": False}, "--comm p2p exchanges the data-parallel gradient buffer; model parallel "
                                              "all-reduces its logits"),
    ({}, "--overlap overlaps an NCCL all-reduce with the backward pass: it needs --comm nccl"),
])
def test_the_p2p_exchange_is_refused_where_it_cannot_run(monkeypatch, changes, message):
    """--comm p2p on GPUs (CuPy faked here): resident data parallel without --overlap, named in the refusal."""
    import argparse
    import types

    import perflab.backend
    from perflab.cli import CLIError
    from perflab.commands.options import device_from_args
    monkeypatch.setattr(perflab.backend, "array_module", lambda name: types.SimpleNamespace(__name__="cupy"))
    args = dict(backend="cupy", mode="resident", gemm="cublas", comm="p2p", launch="graph", pinned=False, overlap=False,
                chunks=None, parallel="data", dtype="float32", json=True, timeout=60.0, threads=None)
    assert device_from_args(argparse.Namespace(**args)).comm == "p2p"
    with pytest.raises(CLIError, match=message):
        device_from_args(argparse.Namespace(**{**args, "overlap": True, **changes}))


def test_threads_are_numpys_and_refused_on_the_gpu_by_name(monkeypatch):
    import argparse
    import types

    import perflab.backend
    from perflab.cli import CLIError
    from perflab.commands.options import device_from_args
    monkeypatch.setattr(perflab.backend, "array_module", lambda name: types.SimpleNamespace(__name__=name))
    args = dict(backend="numpy", mode="resident", gemm="cublas", comm=None, launch="graph", pinned=False, overlap=False,
                chunks=None, parallel="data", dtype="float32", json=True, timeout=60.0, threads=3)
    assert device_from_args(argparse.Namespace(**args)).threads == 3
    with pytest.raises(CLIError, match="--threads 3 sets NumPy's BLAS threads a rank: it needs --backend numpy"):
        device_from_args(argparse.Namespace(**{**args, "backend": "cupy"}))


def test_a_gpu_run_chooses_its_exchange_by_timing_unless_told(monkeypatch):
    """--comm auto (the default on GPUs, resident) times the exchanges; --overlap alone means NCCL's; the host
    modes and the CPU take host MPI; --comm auto with --overlap names the conflict."""
    import argparse
    import types

    import perflab.backend
    from perflab.cli import CLIError
    from perflab.commands.options import device_from_args
    monkeypatch.setattr(perflab.backend, "array_module", lambda name: types.SimpleNamespace(__name__=name))
    args = dict(backend="cupy", mode="resident", gemm="cublas", comm=None, launch="graph", pinned=False, overlap=False,
                chunks=None, parallel="data", dtype="float32", json=True, timeout=60.0, threads=None)
    comm = lambda **changes: device_from_args(argparse.Namespace(**{**args, **changes})).comm
    assert comm() == "auto" and comm(overlap=True) == "nccl" and comm(mode="staged") == "mpi"
    assert comm(backend="numpy") == "mpi" and comm(backend="numpy", comm="auto") == "mpi"
    with pytest.raises(CLIError, match="--comm auto times NCCL with and without --overlap"):
        comm(comm="auto", overlap=True)


def test_help_explains_defaults():
    out = subprocess.run([sys.executable, "-m", "perflab", "train", "--help"], capture_output=True, text=True).stdout
    assert "seeds' performance workload" in out and "--learning-rate" in out and "--shuffle" in out


def test_save_writes_csv_and_metadata(tmp_path, monkeypatch, capsys):
    from perflab import results
    monkeypatch.delenv("PERFLAB_RUN_DIR", raising=False)
    monkeypatch.setattr(results, "RUNS_ROOT", tmp_path)
    main(["train", "--dataset", "synthetic", "--input-size", "10", "--hidden-size", "4", "--train-size", "40",
          "--batch-size", "10", "--test-size", "10", "--save", "demo", "--json"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    csv_path = tmp_path / results.machine_key() / "demo.csv"
    assert summary["saved"] == str(csv_path)
    assert csv_path.exists() and csv_path.with_suffix(".json").exists()
    meta = json.loads(csv_path.with_suffix(".json").read_text())
    assert meta["cpu"] and meta["git_commit"]
    assert len(meta["boot"]) == 8 and int(meta["boot"], 16) >= 0  # this boot of the kernel: boots of one image differ


def test_write_rows_appends_and_widens(tmp_path):
    import pandas as pd

    from perflab.results import write_rows
    path = tmp_path / "r.csv"
    write_rows(path, [{"a": 1, "b": 2}])
    write_rows(path, [{"a": 3, "b": 4}])
    write_rows(path, [{"a": 5, "c": 6}])
    table = pd.read_csv(path)
    assert list(table.columns) == ["a", "b", "c"] and list(table.a) == [1, 3, 5]
    assert table.c.isna().sum() == 2 and table.c.iloc[-1] == 6


@pytest.mark.parametrize("command", ["train", "step"])
@pytest.mark.parametrize("bad", ["512x3200", "1024-0,3200", "1024--1024,3200", "1024-1024,", "0,3200"])
def test_bench_configs_name_a_net_and_a_batch(capsys, bad, command):
    with pytest.raises(SystemExit) as info:
        main(["bench", command, "--configs", bad])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "expected H,B (one hidden layer, like 512,3200) or H1-H2-...,B" in err and repr(bad) in err


def test_bench_train_configs_take_deeper_nets():
    from perflab.commands.options import net_batch
    assert net_batch("512,3200") == (512, 3200)
    assert net_batch("1024-1024,3200") == ((1024, 1024), 3200)
    assert net_batch("2048-1024-512,12000") == ((2048, 1024, 512), 12000)


def test_bench_gemm_peers_are_named_with_the_ones_there_are(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "gemm", "--peers", "torch"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --peers: invalid choice: 'torch'" in err and "pytorch" in err


@pytest.mark.parametrize("extra", [["--variants", "best"], ["--peers", "pytorch"], ["--peers"]])
def test_bench_gemm_in_half_precision_refuses_the_fp32_benchs_variants_and_peers(capsys, extra):
    """--dtype bfloat16 times the half wgmma GEMM beside cuBLAS's only: --variants or --peers would be ignored, so
    they are refused, naming why, before anything needs a GPU."""
    with pytest.raises(SystemExit) as info:
        main(["bench", "gemm", "--dtype", "bfloat16", *extra])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "leave out --variants and --peers (they are for float32 and float64)" in err


def test_bench_train_peers_are_named_with_the_ones_there_are(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "train", "--peers", "perflab (one graph a batch)"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --peers: invalid choice: 'perflab (one graph a batch)'" in err
    assert "'perflab (a graph a batch)'" in err


def test_bench_train_where_no_peer_ran_says_so_and_saves_nothing(capsys, monkeypatch, tmp_path):
    from perflab.measure import peers
    monkeypatch.setattr(peers, "run_peer_process", lambda module, args, timeout: (None, "CuPy not installed"))
    with pytest.raises(SystemExit) as info:
        main(["bench", "train", "--peers", "perflab", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert info.value.code == 2 and "no peer ran" in captured.err and "peer skipped: perflab (CuPy not installed)" in captured.out
    assert not list(tmp_path.iterdir())


def test_a_gpu_sweep_without_cupy_says_what_it_needs_before_any_point_runs(capsys, monkeypatch, tmp_path):
    from perflab import backend
    monkeypatch.setattr(backend, "cupy_or_none", lambda: None)
    with pytest.raises(SystemExit) as info:
        main(["sweep", "--backend", "cupy", "--out", str(tmp_path)])
    assert info.value.code == 2 and "--backend cupy needs CuPy and a visible NVIDIA GPU" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_sweep_whose_grid_is_empty_says_why(capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["sweep", "--backend", "numpy", "--mode", "staged", "--hidden", "16", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "the grid is empty: on --backend numpy only --mode resident" in err
    assert "got --mode staged" in err and not list(tmp_path.iterdir())


def test_compile_without_a_gpu_says_what_it_needs(capsys, monkeypatch):
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: None)
    with pytest.raises(SystemExit) as info:
        main(["compile"])
    assert info.value.code == 2 and "compile builds perflab's CUDA kernels into CuPy's cache: it needs CuPy and a GPU" \
        in capsys.readouterr().err


def test_bench_hold_without_a_gpu_says_what_it_needs(capsys, monkeypatch):
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: None)
    with pytest.raises(SystemExit) as info:
        main(["bench", "hold", "--seconds", "0.5"])
    assert info.value.code == 2 and "bench hold replays GEMMs on the GPU while nvidia-smi samples it" \
        in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--mode", "pipelined", "--comm", "nccl"], "--mode pipelined exchanges gradients through the host: use --comm mpi"),
    (["--mode", "staged", "--comm", "cuda-mpi"], "--mode staged exchanges gradients through the host"),
    (["--mode", "pipelined", "--parallel", "model"], "--mode pipelined exchanges gradients: it runs --parallel data"),
    (["--gemm", "cublas-x3tf32", "--dtype", "float64"], "--gemm cublas-x3tf32 runs on TF32 tensor cores from float32 "
                                                        "operands: it needs --dtype float32, got --dtype float64"),
    (["--gemm", "tf32", "--dtype", "float64"], "--gemm tf32 runs on TF32 tensor cores"),
    (["--gemm", "x3tf32", "--dtype", "float64"], "--gemm x3tf32 runs on TF32 tensor cores"),
    (["--gemm", "wgmma", "--dtype", "float64"], "it needs --dtype float32 (or, wgmma only, bfloat16 or float16), got "
                                                 "--dtype float64"),
    (["--gemm", "x3tf32", "--dtype", "bfloat16"], "--gemm x3tf32 runs on TF32 tensor cores"),
    (["--comm", "nccl-half"], "--comm nccl-half exchanges the gradients in the run's half precision: it needs --dtype "
                              "bfloat16 or float16, got --dtype float64 (use --comm nccl)"),
    (["--comm", "nccl-half", "--dtype", "bfloat16", "--mode", "staged"], "--mode staged exchanges gradients through the host"),
])
def test_gpu_options_that_cannot_go_together_are_refused_before_anything_runs(capsys, monkeypatch, args, message):
    import types
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: types.ModuleType("cupy"))  # a GPU, as far as options go
    monkeypatch.setattr("perflab.train.comm.require_cuda_aware_mpi", lambda: None)
    with pytest.raises(SystemExit) as info:
        main(["train", "--dataset", "synthetic", "--backend", "cupy", *args])
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_timeline_without_a_gpu_says_what_it_needs(capsys, monkeypatch):
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: None)
    with pytest.raises(SystemExit) as info:
        main(["timeline", "--dataset", "synthetic"])
    assert info.value.code == 2 and "perflab timeline records CUDA streams: it needs CuPy" in capsys.readouterr().err


def test_timeline_measures_a_sweep_points_float32_and_train_the_float64_reference():
    """A timeline explains a sweep point: its default data sizes must be the sweep's (float32), not the
    reference's twice as large ones (a float64 timeline once passed for a float32 point's pieces)."""
    from perflab.cli import build_parser
    parser = build_parser()
    assert parser.parse_args(["timeline"]).dtype == "float32" == parser.parse_args(["sweep"]).dtype[0]
    assert parser.parse_args(["train"]).dtype == "float64"


def test_bench_allreduce_needs_several_ranks(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "allreduce"])
    assert info.value.code == 2 and "bench allreduce needs several ranks, one per GPU" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["sweep", "--ranks", "0"], "argument --ranks: expected a positive integer, got '0'"),
    (["sweep", "--hidden", "big"], "argument --hidden: hidden widths 'big': expected one width like 512, or a deeper "
                                   "net's widths like 1024-1024"),
    (["sweep", "--hidden", "1024-0"], "argument --hidden: hidden widths '1024-0': expected"),
    (["sweep", "--hidden", "-512"], "argument --hidden: hidden widths '-512': expected"),
    (["train", "--hidden-size", "1024", "abc"], "argument --hidden-size: expected a positive integer, got 'abc'"),
    (["train", "--hidden-size", "0"], "argument --hidden-size: expected a positive integer, got '0'"),
    (["whatif", "--ceilings", "x.csv", "--hidden", "1024-"], "argument --hidden: hidden widths '1024-': expected"),
    (["whatif", "--ceilings", "x.csv", "--hidden", ""], "argument --hidden: hidden widths '': expected"),
    (["ceilings", "--max-log2-size", "-3"], "argument --max-log2-size: expected a positive integer, got '-3'"),
    (["bench", "gemm", "--repeats", "0"], "argument --repeats: expected a positive integer, got '0'"),
    (["compile", "--processes", "0"], "argument --processes: expected a positive integer, got '0'"),
    (["bench", "allreduce", "--sizes", "65536", "-4"], "argument --sizes: expected a positive integer, got '-4'"),
    (["bench", "allreduce", "--repeats", "0"], "argument --repeats: expected a positive integer, got '0'"),
    (["train", "--chunks", "0"], "argument --chunks: expected a positive integer, got '0'"),
    (["bench", "hold", "--rounds", "0"], "argument --rounds: expected a positive integer, got '0'"),
    (["bench", "hold", "--seconds", "0"], "argument --seconds: expected a positive number, got '0'"),
    (["bench", "hold", "--seconds", "90"], "argument --seconds: expected seconds from 0.2 to 60, got '90'"),
    (["bench", "hold", "--shapes", "fwd1 H=512 B=801"], "argument --shapes: unknown shape 'fwd1 H=512 B=801': "
                                                         "expected one of fwd1 H=512 B=800, bwd3 H=512 B=800"),
    (["predict", "--inter-bw", "0"], "argument --inter-bw: expected a positive number, got '0'"),
    (["data", "fetch", "mnist", "--timeout", "-1"], "argument --timeout: expected a positive number, got '-1'"),
    (["ceilings", "--hidden", "0"], "argument --hidden: hidden widths '0': expected one width like 512, or a deeper"),
    (["ceilings", "--hidden", "1280-x"], "argument --hidden: hidden widths '1280-x': expected"),
    (["ceilings", "--per-rank-batch", "1500", "-8"], "argument --per-rank-batch: expected a positive integer, got '-8'"),
    (["sweep", "--launch", "lazy"], "argument --launch: invalid choice: 'lazy' (choose from"),
    (["whatif", "--ceilings", "x.csv", "--launch", "graph", "both"], "argument --launch: invalid choice: 'both'"),
    (["train", "--launch", "graphs"], "argument --launch: invalid choice: 'graphs'"),
    (["train", "--save", "../up"], "argument --save: expected a plain file name like run1, without a folder"),
    (["train", "--save", "a/b"], "argument --save: expected a plain file name like run1, without a folder"),
    (["sweep", "--name", ".hidden"], "argument --name: expected a plain file name like run1, without a folder"),
    (["whatif", "--ceilings", "x.csv", "--name", ""], "argument --name: expected a plain file name"),
    (["predict", "--name", ".."], "argument --name: expected a plain file name"),
])
def test_counts_and_rates_must_be_positive(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_predict_names_a_missing_calibration_file(capsys):
    with pytest.raises(SystemExit) as info:
        main(["predict", "--calibration", "nope.jsonl", "--name", "unused"])
    assert info.value.code == 2 and "--calibration nope.jsonl: no such file in" in capsys.readouterr().err


def test_predict_writes_to_the_run_folder_and_leaves_the_committed_predictions(tmp_path, monkeypatch):
    from perflab import results
    committed = results.RESULTS_ROOT / "predictions" / "p8.json"
    before = committed.read_bytes()
    monkeypatch.setattr(results, "run_dir", lambda meta=None: tmp_path / "run")
    main(["predict", "--json"])
    main(["predict", "--multinode", "--name", "projection_64", "--out", str(tmp_path / "elsewhere"), "--json"])
    assert json.loads((tmp_path / "run" / "p8.json").read_text())["rows"]
    assert (tmp_path / "elsewhere" / "projection_64.csv").stat().st_size > 0
    assert committed.read_bytes() == before


@pytest.mark.parametrize("command", [["predict"], ["whatif", "--ceilings", "x.csv"], ["sweep"], ["bench", "train"]])
def test_out_must_be_a_folder_not_a_file(capsys, tmp_path, command):
    afile = tmp_path / "a_file"
    afile.write_text("x")
    with pytest.raises(SystemExit) as info:
        main([*command, "--out", str(afile)])
    assert info.value.code == 2 and f"argument --out: expected a folder to write into, got '{afile}', which is a file" \
        in capsys.readouterr().err


def test_git_commit_says_dirty_where_the_code_differs_from_head(tmp_path, monkeypatch):
    """Results name the commit that made them: HEAD, with -dirty where perflab/ or scripts/ has
    changed since (results/ changing, as a run rewrites it, does not count)."""
    from perflab import results

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)
    (tmp_path / "perflab").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "perflab" / "x.py").write_text("a = 1\n")
    (tmp_path / "results" / "r.csv").write_text("a\n1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "first")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    monkeypatch.delenv("PERFLAB_GIT_COMMIT", raising=False)
    monkeypatch.setattr(results, "PROJECT_ROOT", tmp_path)
    assert results.git_commit() == head
    (tmp_path / "results" / "r.csv").write_text("a\n2\n")
    assert results.git_commit() == head
    (tmp_path / "perflab" / "x.py").write_text("a = 2\n")
    assert results.git_commit() == head + "-dirty"
    monkeypatch.setenv("PERFLAB_GIT_COMMIT", "abc123")
    assert results.git_commit() == "abc123"


def test_the_harnesses_name_a_deeper_net_and_count_its_gemms():
    """bench train's FLOPs: forward and weight gradient of every layer, the input gradient past the
    first (the one-layer count as it was); the multi-GPU harness reads H as one width or several,
    and stamps each line with where and when it ran."""
    from perflab.measure.peers import gemm_flops, net_name, widths
    from perflab.measure.peers_multi import machine_stamp, net_width
    N, H = 60000, 1024
    assert gemm_flops(N, 784, H) == 4 * N * H * 784 + 6 * N * H * 10
    assert gemm_flops(N, 784, (H, 512)) == 4 * N * H * 784 + 6 * N * 512 * H + 6 * N * 10 * 512
    assert widths(512) == (512,) and widths((1024, 1024)) == (1024, 1024)
    assert net_name(512) == "512" and net_name((1024, 1024)) == "1024-1024"
    assert net_width("512") == 512 and net_width("1024-1024") == (1024, 1024)
    stamp = machine_stamp()
    assert set(stamp) == {"gpu", "gpus", "git_commit", "date", "boot"} and len(stamp["date"]) == 10 and stamp["boot"]


@pytest.mark.parametrize("command", ["report", "validate"])
@pytest.mark.parametrize("content, says", [
    ("", "roofline.csv: the file is empty; a sweep file is the table `perflab sweep` or the main job writes"),
    ("x,y\n1,2\n", "roofline.csv: no 'H', 'B', 'p', 'backend', 'mode', 'epoch_seconds' columns (it has x, y)"),
    ('H,B\n"1,2\n', "roofline.csv: not a CSV table"),
])
def test_report_and_validate_name_a_malformed_sweep_file_and_what_it_lacks(tmp_path, capsys, command, content, says):
    (tmp_path / "roofline.csv").write_text(content)
    (tmp_path / "figures").mkdir()
    with pytest.raises(SystemExit) as info:
        main([command, "--folder", str(tmp_path)] + (["--out", str(tmp_path / "r.pdf")] if command == "report" else []))
    err = capsys.readouterr().err
    assert info.value.code == 2 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "r.pdf").exists() and not (tmp_path / "validation.csv").exists()  # nothing half written


def test_gemm_wgmma_takes_a_half_precision_dtype_and_the_tf32_gemms_do_not(monkeypatch):
    """--gemm wgmma with --dtype bfloat16 | float16 is perflab's own half GEMM: the options pass it to the trainer
    (which checks the GPU); x3tf32 stays float32 only."""
    import types

    from perflab.cli import build_parser
    from perflab.commands.options import device_from_args
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: types.ModuleType("cupy"))
    for dtype in ("bfloat16", "float16"):
        args = build_parser().parse_args(["train", "--dataset", "synthetic", "--backend", "cupy", "--gemm", "wgmma",
                                          "--dtype", dtype, "--json"])
        assert device_from_args(args).gemm == "wgmma"


def test_a_net_too_large_for_this_host_is_refused_before_anything_is_allocated(capsys, monkeypatch):
    from perflab import backend
    assert backend.host_memory_available() > 2**20  # this host's is read
    monkeypatch.setattr(backend, "host_memory_available", lambda: 2**30)
    with pytest.raises(SystemExit) as info:  # 784-20000-20000-10 in float64: about 9 GiB
        main(["train", "--dataset", "synthetic", "--hidden-size", "20000", "20000", "--train-size", "100",
              "--batch-size", "10"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "GiB of host memory (N=100, B=10, layers [784, 20000, 20000, 10], float64) but " \
                                    "1.00 GiB are available" in err


@pytest.mark.parametrize("argv, message", [
    (["notebook", "roofline", "-p", "hiden", "[64]"], "notebook roofline has no parameter 'hiden'; its parameters: "
                                                      "backend, engines, hidden,"),
    (["notebook", "scaling", "-p", "N", "800"], "notebook scaling has no parameter 'N'; it takes none"),
])
def test_a_notebook_parameter_it_does_not_have_is_refused_before_it_runs(capsys, argv, message):
    with pytest.raises(SystemExit) as info:  # papermill would only warn and run the notebook on its defaults
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--folder", "results/nvidia-h200"], ["--out", "x.pdf"]])
@pytest.mark.parametrize("what", ["--markdown", "--readme"])
def test_the_committed_reports_take_no_run_folder(capsys, what, extra):
    with pytest.raises(SystemExit) as info:
        main(["report", what, *extra])
    assert info.value.code == 2 and "regenerates the committed reports from results/" in capsys.readouterr().err


def test_validate_before_any_run_says_what_makes_the_run_folder(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RUN_DIR", str(tmp_path / "not-yet"))
    with pytest.raises(SystemExit) as info:
        main(["validate"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "run folder" in err and "does not exist yet: `make roofline`" in err
