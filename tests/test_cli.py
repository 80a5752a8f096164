import json
import subprocess
import sys

import pytest

from perflab.cli import main

ONE_NET = dict(hidden=None, hidden_size=None, batch_size=3200, command="train")  # train's options a spec reads


def test_the_command_line_is_built_without_pandas():
    """Every rank of an MPI job builds the whole command line before it runs its command: pandas, which the
    ranks of perflab train and check never use, stays out of that start (each rank paid for importing it)."""
    proc = subprocess.run([sys.executable, "-c", "import sys; from perflab.cli import build_parser; build_parser(); "
                           "print('pandas' in sys.modules)"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-2000:]


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
    (["--batch-size", "0"], "error: --batch-size must be a positive integer, got 0"),  # the option, not the field
    (["--learning-rate", "-1"], "error: --learning-rate must be positive, got -1.0"),
    (["--train-size", "10", "--batch-size", "20"], "--batch-size B=20 is larger than --train-size N=10"),
    (["--mode", "staged"], "--mode staged copies each batch host -> GPU and the gradients through the host: it needs "
                           "--backend cupy"),
    (["--pinned"], "--pinned is a GPU setting: it needs --backend cupy"),
    (["--chunks", "2"], "--chunks 2 is a GPU setting: it needs --backend cupy"),
    (["--launch", "graph"], "--launch graph is a GPU setting: it needs --backend cupy"),
    (["--comm", "overlap"], "--overlap overlaps an NCCL all-reduce with the backward pass: it needs --comm nccl"),
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
    from perflab.commands.options import run_spec
    monkeypatch.setattr(perflab.backend, "cupy_or_none", lambda: types.ModuleType("cupy"))
    args = dict(backend="cupy", mode="resident", gemm="cublas", comm="p2p", launch="graph", pinned=False, overlap=False,
                chunks=None, parallel="data", dtype="float32", json=True, timeout=60.0, threads=None, **ONE_NET)
    assert run_spec(argparse.Namespace(**args)).comm == "p2p"
    with pytest.raises(CLIError, match=message):
        run_spec(argparse.Namespace(**{**args, "overlap": True, **changes}))


def test_threads_are_numpys_and_refused_on_the_gpu_by_name(monkeypatch):
    import argparse
    import types

    import perflab.backend
    from perflab.cli import CLIError
    from perflab.commands.options import run_spec
    monkeypatch.setattr(perflab.backend, "cupy_or_none", lambda: types.ModuleType("cupy"))
    args = dict(backend="numpy", mode="resident", gemm="cublas", comm=None, launch=None, pinned=False, overlap=False,
                chunks=None, parallel="data", dtype="float32", json=True, timeout=60.0, threads=3, **ONE_NET)
    assert run_spec(argparse.Namespace(**args)).threads == 3
    with pytest.raises(CLIError, match="--threads 3 sets NumPy's BLAS threads a rank: it needs --backend numpy"):
        run_spec(argparse.Namespace(**{**args, "backend": "cupy"}))


def test_a_gpu_run_chooses_its_exchange_by_timing_unless_told(monkeypatch):
    """--comm auto (the default on GPUs, resident) times the exchanges; --overlap alone means NCCL's; the host
    modes and the CPU take host MPI; --comm auto with --overlap names the conflict."""
    import argparse
    import types

    import perflab.backend
    from perflab.cli import CLIError
    from perflab.commands.options import run_spec
    monkeypatch.setattr(perflab.backend, "cupy_or_none", lambda: types.ModuleType("cupy"))
    args = dict(backend="cupy", mode="resident", gemm="cublas", comm=None, launch=None, pinned=False, overlap=False,
                chunks=None, parallel="data", dtype="float32", json=True, timeout=60.0, threads=None, **ONE_NET)
    comm = lambda **changes: run_spec(argparse.Namespace(**{**args, **changes})).comm
    assert comm() == "auto" and comm(overlap=True) == "nccl" and comm(mode="staged") == "mpi"
    assert comm(comm="overlap") == "nccl" and run_spec(argparse.Namespace(**{**args, "comm": "overlap"})).overlap
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


def test_bench_step_takes_the_trainers_precisions_and_names_its_file_for_one_other_than_float32(capsys, monkeypatch,
                                                                                                 tmp_path):
    """--dtype as perflab train takes it; a half or float64 step's kernels go to bench_step_<dtype>.csv, so the
    report's bench_step.csv stays FP32's."""
    import pandas as pd

    from perflab.measure import bench
    with pytest.raises(SystemExit) as info:
        main(["bench", "step", "--dtype", "int8"])
    assert info.value.code == 2 and "argument --dtype: invalid choice: 'int8'" in capsys.readouterr().err
    monkeypatch.setattr("perflab.commands.measure.require_cupy", lambda what: None)
    monkeypatch.setattr(bench, "step_breakdown", lambda H, B, dtype: [{"kernel": "update", "H": str(H), "B": B,
                                                                        "dtype": dtype, "ms": 0.5}])
    for dtype, name in (("bfloat16", "bench_step_bfloat16.csv"), ("float32", "bench_step.csv")):
        main(["bench", "step", "--configs", "8,16", "--dtype", dtype, "--out", str(tmp_path)])
        assert list(pd.read_csv(tmp_path / name).dtype) == [dtype]


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
    import types

    from perflab.measure import peers
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: types.ModuleType("cupy"))  # a GPU, as far as it asks
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


NO_CUPY = "needs CuPy and a visible NVIDIA GPU; none was found: install the CuPy this machine's NVIDIA driver takes"


@pytest.mark.parametrize("argv, what", [
    (["bench", "gemm"], "perflab bench gemm"), (["bench", "step"], "perflab bench step"),
    (["bench", "train"], "perflab bench train"), (["bench", "hold", "--seconds", "0.5"], "perflab bench hold"),
    (["compile"], "perflab compile"), (["timeline", "--dataset", "synthetic"], "perflab timeline"),
    (["train", "--backend", "cupy"], "--backend cupy"), (["check", "--backend", "cupy"], "--backend cupy"),
    (["ceilings", "--backend", "cupy"], "--backend cupy"), (["sweep", "--backend", "cupy"], "--backend cupy"),
])
def test_every_command_without_cupy_ends_with_the_one_message(capsys, monkeypatch, tmp_path, argv, what):
    """Before anything is printed (bench train's peers) or measured; the install hint works from a clone."""
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: None)
    with pytest.raises(SystemExit) as info:
        main(argv + (["--out", str(tmp_path)] if argv[0] in ("bench", "sweep", "ceilings") else []))
    captured = capsys.readouterr()
    assert info.value.code == 2 and f"perflab: error: {what}" in captured.err and NO_CUPY in captured.err
    assert "pip install -e '.[gpu]'" in captured.err and "perflab[gpu]" not in captured.err
    assert "Traceback" not in captured.err and "peer skipped" not in captured.out and len(captured.err.splitlines()) == 1


def test_a_cupy_import_deep_in_a_command_ends_with_the_one_message(capsys, monkeypatch):
    from perflab.commands import measure

    def needs_cupy(args, comm):
        import cupy  # noqa: F401
    monkeypatch.setattr(measure, "cmd_compile", needs_cupy)
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ModuleNotFoundError even where it is installed
    with pytest.raises(SystemExit) as info:
        main(["compile"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"perflab: error: perflab compile {NO_CUPY}" in err and "Traceback" not in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--mode", "staged"], "--mode staged copies each batch host -> GPU and the gradients through the host: it needs "
                           "--backend cupy"),
    (["--mode", "resident", "pipelined"], "--mode pipelined overlaps host <-> GPU copies with GPU compute: it needs "
                                          "--backend cupy"),
    (["--gemm", "wgmma"], "--gemm wgmma runs perflab's CUDA kernels: it needs --backend cupy"),
    (["--launch", "graph"], "--launch graph is a GPU setting: it needs --backend cupy"),
])
def test_a_numpy_sweep_refuses_gpu_only_settings_as_train_does(capsys, tmp_path, argv, message):
    """Once dropped from the grid without a word (or an empty grid): refused, with train's message."""
    with pytest.raises(SystemExit) as info:
        main(["sweep", "--backend", "numpy", *argv, "--hidden", "16", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and "(this sweep's --backend is numpy)" in err
    assert not list(tmp_path.iterdir())
    with pytest.raises(SystemExit):
        main(["train", "--dataset", "synthetic", argv[0], argv[-1]])
    assert message in capsys.readouterr().err


def test_compile_without_a_gpu_says_what_it_needs(capsys, monkeypatch):
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: None)
    with pytest.raises(SystemExit) as info:
        main(["compile"])
    assert info.value.code == 2 and "compile builds perflab's CUDA kernels into CuPy's cache: it needs CuPy" \
        in capsys.readouterr().err


def test_bench_hold_without_a_gpu_says_what_it_needs(capsys, monkeypatch):
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: None)
    with pytest.raises(SystemExit) as info:
        main(["bench", "hold", "--seconds", "0.5"])
    assert info.value.code == 2 and "bench hold replays GEMMs on the GPU while nvidia-smi samples it: it needs CuPy" \
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
    assert info.value.code == 2 and "perflab timeline records CUDA streams, one GPU a rank: it needs CuPy" \
        in capsys.readouterr().err


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
    (["ceilings", "--grid", "all"], "argument --grid: invalid choice: 'all' (choose from 'full', 'asked')"),
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
    from perflab.commands.options import run_spec
    monkeypatch.setattr("perflab.backend.cupy_or_none", lambda: types.ModuleType("cupy"))
    for dtype in ("bfloat16", "float16"):
        args = build_parser().parse_args(["train", "--dataset", "synthetic", "--backend", "cupy", "--gemm", "wgmma",
                                          "--dtype", dtype, "--json"])
        assert run_spec(args).gemm == "wgmma"


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


@pytest.mark.parametrize("argv", [["--hidden", "1280-1280"], ["--hidden-size", "1280", "1280"]])
def test_a_net_is_written_one_way_in_train_and_whatif(argv):
    """--hidden 1280-1280 is 784-1280-1280-10 in every command; --hidden-size 1280 1280, the old spelling, too."""
    from perflab.cli import build_parser
    from perflab.commands.options import nets, one_net
    parser = build_parser()
    assert one_net(parser.parse_args(["train", *argv])) == (1280, 1280) == one_net(parser.parse_args(["check", *argv]))
    for command in (["whatif", "--ceilings", "x.csv"], ["sweep"], ["ceilings"]):
        assert nets(parser.parse_args([*command, *argv])) == ["1280-1280"]
    assert nets(parser.parse_args(["whatif", "--ceilings", "x", "--hidden", "512", "1024-1024"])) == [512, "1024-1024"]
    assert one_net(parser.parse_args(["train"])) == (512,) and nets(parser.parse_args(["sweep"])) == [512]


@pytest.mark.parametrize("argv, message", [
    (["whatif", "--ceilings", "x.csv", "--hidden", "1280", "1280"],
     "--hidden 1280 1280 names the net 784-1280-10 more than once: a net's widths are joined by '-' (--hidden "
     "1280-1280 is one net, 784-1280-1280-10)"),
    (["sweep", "--hidden", "1024-1024", "1024-1024"], "--hidden 1024-1024 1024-1024 names the net 784-1024-1024-10 "
                                                      "more than once"),
    (["train", "--hidden", "1280", "1280"], "--hidden 1280 1280: perflab train runs one net; write 784-1280-1280-10 "
                                            "as --hidden 1280-1280"),
    (["check", "--hidden", "64", "32"], "perflab check runs one net; write 784-64-32-10 as --hidden 64-32"),
    (["train", "--hidden", "64-32", "--hidden-size", "64"], "--hidden-size is the old spelling of --hidden: give one"),
    (["whatif", "--ceilings", "x.csv", "--hidden", "512", "--hidden-size", "64", "32"],
     "--hidden-size is the old spelling of --hidden: give one of them (--hidden 64-32 for 784-64-32-10)"),
])
def test_an_ambiguous_net_is_refused_showing_the_new_spelling(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_train_takes_a_deeper_net_as_whatif_writes_it(capsys):
    main(["train", "--dataset", "synthetic", "--input-size", "12", "--hidden", "8-6", "--train-size", "40",
          "--batch-size", "10", "--test-size", "0", "--json"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["hidden_sizes"] == [8, 6]


SMALL = ["--dataset", "synthetic", "--input-size", "12", "--hidden", "8", "--train-size", "40", "--batch-size", "10",
         "--test-size", "0"]


def test_check_on_one_rank_says_nothing_parallel_was_checked(capsys):
    assert main(["check", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "PASSED on one rank: nothing parallel was checked" in out and "mpiexec -n 2" in out
    main(["check", *SMALL, "--json"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["parallel_checked"] is False


@pytest.mark.parametrize("dtype, drift, says", [("bfloat16", 0.0, True), ("bfloat16", 1e-3, False),
                                                ("float32", 0.0, False)])
def test_a_half_checks_miss_with_equal_replicas_says_what_it_means(capsys, monkeypatch, dtype, drift, says):
    """A half-precision check that misses its tolerance with the replicas equal is the emulated reference's rounding,
    not the exchange: the command says so, and what to try; with the replicas apart, or in float32, it does not.
    (On one rank, as here, it does not speak of replicas.)"""
    from perflab.train import runner
    monkeypatch.setattr(runner, "check", lambda cfg, parallel, comm, spec: {
        "dtype": dtype, "errors": {"W1": 1e-3, "b3": 5e-2}, "tolerance": 3e-2, "replica_max_abs_diff": drift,
        "passed": False})
    assert main(["check", *SMALL, "--dtype", dtype]) == 1
    out = capsys.readouterr().out
    assert "b3   5.000e-02  TOO LARGE" in out and "FAILED" in out
    assert ("emulated on the CPU" in out) == says and "The replicas agree" not in out  # one rank: no exchange
    assert ("--learning-rate" in out.split("FAILED")[1]) == says


def test_a_runs_first_line_shows_the_defaults_that_differ_between_commands(capsys, tmp_path):
    main(["train", *SMALL, "--dtype", "bfloat16"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("perflab train: 12-8-10, --learning-rate 0.0001, --dataset synthetic N=40, B=10")
    assert "bfloat16 emulated in FP32 on NumPy" in first
    for command in (["train"], ["check"], ["sweep"], ["whatif", "--ceilings", "x"], ["timeline"]):
        out = subprocess.run([sys.executable, "-m", "perflab", *command, "--help"], capture_output=True,
                             text=True).stdout
        assert "Defaults differ between commands: train, check: float64" in " ".join(out.split()), command


def test_ctrl_c_in_train_ends_with_one_line_saying_what_was_kept(capsys, monkeypatch):
    from perflab.train import loop
    calls = []

    def interrupted(trainer, test):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(loop, "precision", interrupted)
    with pytest.raises(SystemExit) as info:
        main(["train", *SMALL, "--num-epochs", "3", "--save", "unused"])
    err = capsys.readouterr().err
    assert info.value.code == 130 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("perflab train: stopped by Ctrl-C in epoch 2 of 3: 1 epoch(s) finished") and \
        "nothing was written to --save unused" in err and "run the same command again" in err


def test_a_full_disk_or_an_unwritable_folder_ends_train_with_one_line(capsys, monkeypatch, tmp_path):
    import errno

    from perflab import results

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(results, "run_dir", lambda meta=None: tmp_path)
    monkeypatch.setattr(results, "write_rows", full)
    with pytest.raises(SystemExit) as info:
        main(["train", *SMALL, "--save", "demo"])
    captured = capsys.readouterr()
    assert info.value.code == 2 and "final loss" in captured.out and "Traceback" not in captured.err
    assert captured.err == (f"perflab train: trained, but --save demo could not be written to {tmp_path}: the disk is "
                            "full; the results are in the line above: free space (or fix the folder) and run again\n")
    (tmp_path / "a_file").write_text("x")
    monkeypatch.setattr(results, "run_dir", lambda meta=None: tmp_path / "a_file" / "runs")
    with pytest.raises(SystemExit) as info:
        main(["train", *SMALL, "--save", "demo"])
    captured = capsys.readouterr()
    assert info.value.code == 2 and f"--save: cannot write into {tmp_path / 'a_file' / 'runs'}" in captured.err
    assert "nothing was run" in captured.err and "final loss" not in captured.out


def fake_points(monkeypatch, stop_at: int, error=None):
    """Points measured instantly; the `stop_at`-th raises `error` (Ctrl-C where None)."""
    from perflab.workbook import sweep
    calls = []

    def run(point, dataset, timeout):
        calls.append(point)
        if len(calls) == stop_at:
            raise error or KeyboardInterrupt
        return {**point, "status": "measured", "epoch_seconds": 1.0}
    monkeypatch.setattr(sweep, "run_point_on_world", run)


SWEEP = ["sweep", "--hidden", "8", "16", "32", "--train-size", "100", "--batch", "10"]


def test_ctrl_c_in_a_sweep_ends_with_one_line_saying_what_was_kept_and_how_to_resume(capsys, monkeypatch, tmp_path):
    fake_points(monkeypatch, stop_at=2)
    with pytest.raises(SystemExit) as info:
        main([*SWEEP, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == 130 and "Traceback" not in err and err.splitlines()[-1] == (
        f"perflab sweep: stopped by Ctrl-C; 1 of 3 point(s) are kept in {tmp_path / 'sweep.csv'}: run the same command "
        "again to measure the other 2")
    fake_points(monkeypatch, stop_at=0)
    main([*SWEEP, "--out", str(tmp_path), "--json"])  # the rerun resumes after the point kept
    import pandas as pd
    assert sorted(pd.read_csv(tmp_path / "sweep.csv").H) == [8, 16, 32]


def test_a_full_disk_ends_a_sweep_with_one_line_and_the_rerun_resumes(capsys, monkeypatch, tmp_path):
    import errno

    from perflab import results
    write_rows = results.write_rows
    writes = []

    def fills_up(path, rows, *args, **kwargs):
        writes.append(rows)
        if len(writes) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return write_rows(path, rows, *args, **kwargs)
    fake_points(monkeypatch, stop_at=0)
    monkeypatch.setattr(results, "write_rows", fills_up)
    with pytest.raises(SystemExit) as info:
        main([*SWEEP, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    csv = tmp_path / "sweep.csv"
    assert info.value.code == 2 and "Traceback" not in err and err.splitlines()[-1] == (
        f"perflab sweep: could not write {csv}: the disk is full ({csv}); 1 of 3 point(s) are kept in {csv}: free space "
        "(or fix the folder), then run the same command again to measure the other 2")
    monkeypatch.setattr(results, "write_rows", write_rows)
    main([*SWEEP, "--out", str(tmp_path), "--json"])
    import pandas as pd
    assert sorted(pd.read_csv(csv).H) == [8, 16, 32]


def test_a_sweep_into_a_folder_it_cannot_write_says_so_before_any_point_runs(capsys, monkeypatch, tmp_path):
    fake_points(monkeypatch, stop_at=1, error=AssertionError("no point may run"))
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(SystemExit) as info:
        main([*SWEEP, "--out", str(tmp_path / "a_file" / "sub")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"--out: cannot write into {tmp_path / 'a_file' / 'sub'}" in err
    assert "nothing was run" in err


def test_whatif_predicts_the_net_train_runs_and_a_cpu_file_predicts_numpy(capsys, tmp_path):
    from perflab.results import RESULTS_ROOT
    deep = "ceilings_h100x2_depth_h1280-1280_h1536-1536-1536_b1500_b2800/ceilings_p2.csv"
    main(["whatif", "--ceilings", str(RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / deep), "--hidden", "1280-1280",
          "--out", str(tmp_path), "--json"])
    (row,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert row["H"] == "1280-1280" and row["backend"] == "cupy"  # 784-1280-1280-10, as train --hidden 1280-1280
    main(["whatif", "--ceilings", str(RESULTS_ROOT / "cpu-amd-epyc" / "ceilings_p1.csv"), "--hidden", "64",
          "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.startswith("perflab whatif: --backend numpy (the ceilings file's: CPU rows), --dtype float32, "
                          "--train-size 60000")
