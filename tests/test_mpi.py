"""MPI trainers under the venv's mpiexec (oversubscribed on 2 cores), each run with a timeout."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perflab.train.comm import share
from perflab.train.parallel import local_part

pytestmark = pytest.mark.mpi
SLOW = pytest.mark.slow  # make test-all; make test keeps one case of each check (3 ranks: uneven shares)
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
SMALL = ["--dataset", "synthetic", "--input-size", "30", "--hidden-size", "7", "--num-classes", "4",
         "--train-size", "103", "--batch-size", "21", "--num-epochs", "2", "--learning-rate", "0.5", "--test-size", "20"]


def mpirun(n, *args, env=None, timeout=120, mpmd=None):
    if MPIEXEC is None:
        pytest.fail("mpiexec not found: install the package's MPI (pip install mpich) into this environment")
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "perflab", *args]
    for extra_env, extra_args in mpmd or []:
        cmd += [":", "-n", "1", *[x for k, v in extra_env.items() for x in ("-env", k, v)],
                sys.executable, "-m", "perflab", *extra_args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def last_json(proc):
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_share_sizes_differ_by_at_most_one():
    for n in (1, 7, 21, 3200):
        for p in range(1, min(n, 5) + 1):
            parts = [share(n, p, r) for r in range(p)]
            sizes = [b - a for a, b in parts]
            assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
            assert parts[0][0] == 0 and all(parts[r][1] == parts[r + 1][0] for r in range(p - 1))
    assert local_part(slice(10, 31), 2, 3) == slice(24, 31)


@pytest.mark.parametrize("dtype", ["float64", pytest.param("float32", marks=SLOW)])
@pytest.mark.parametrize("parallel", ["data", "model"])
@pytest.mark.parametrize("ranks", [pytest.param(1, marks=SLOW), pytest.param(2, marks=SLOW), 3,
                                   pytest.param(4, marks=SLOW)])
def test_check_matches_sequential(ranks, parallel, dtype):
    result = last_json(mpirun(ranks, "check", "--parallel", parallel, "--dtype", dtype, "--json", *SMALL))
    assert result["passed"] and result["ranks"] == ranks
    assert result["max_rel_error"] <= {"float64": 1e-12, "float32": 1e-5}[dtype]
    assert set(result["errors"]) == {"W1", "b1", "W2", "b2"}
    assert result["replica_max_abs_diff"] == 0.0
    assert result["machine"]["cpu_count"] > 0 and result["machine"]["git_commit"]  # where it ran, at which commit


@SLOW  # the seeds' full size on MNIST, 4 ranks
@pytest.mark.parametrize("parallel", ["data", "model"])
def test_check_seeds_hyperparameters_on_mnist(parallel):
    """The seeds' {784, 512, 10, 1e-4, 1e-4, 38400, 1, 3200} (the perflab defaults) on MNIST, 4 ranks."""
    result = last_json(mpirun(4, "check", "--parallel", parallel, "--json", "--test-size", "0", timeout=300))
    assert result["passed"] and result["max_rel_error"] <= 1e-12
    assert (result["hidden_sizes"], result["batch_size"], result["train_size"]) == ([512], 3200, 38400)


def test_train_prints_once_from_rank_0():
    proc = mpirun(3, "train", "--parallel", "data", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("final loss") == 1 and "data, 3 rank(s)" in proc.stdout


def test_more_ranks_than_batch_samples():
    proc = mpirun(3, "train", "--parallel", "data", "--dataset", "synthetic", "--input-size", "5",
                  "--hidden-size", "4", "--train-size", "10", "--batch-size", "4", "--test-size", "0")
    assert proc.returncode != 0
    assert "3 ranks but a mini-batch of only 2 samples" in proc.stderr
    assert proc.stderr.count("perflab: error") == 1


def test_model_parallel_limits():
    proc = mpirun(3, "train", "--parallel", "model", *SMALL[:4], "--hidden-size", "2", *SMALL[6:])
    assert proc.returncode != 0 and "needs at least 3 units in each layer it splits by rows" in proc.stderr
    assert "got hidden sizes [2]" in proc.stderr
    proc = mpirun(3, "train", "--parallel", "model", *SMALL[:4], "--hidden-size", "6", "2", "1", *SMALL[6:])
    assert proc.returncode != 0 and "got hidden sizes [6, 2, 1]" in proc.stderr  # the third splits by rows: 1 < 3


@pytest.mark.parametrize("hidden", [pytest.param(("7", "5"), marks=SLOW), ("7", "5", "4")])  # depth 3 turns twice
@pytest.mark.parametrize("parallel", ["data", "model"])
@pytest.mark.parametrize("ranks", [pytest.param(1, marks=SLOW), pytest.param(2, marks=SLOW), 3,
                                   pytest.param(4, marks=SLOW)])
def test_deeper_nets_check_against_the_reference(ranks, parallel, hidden):
    """Depths 2 and 3 (model parallel: layers split by rows and by columns in turn, the output layer
    split or replicated), float64, as the seeds' grading modes check one hidden layer."""
    result = last_json(mpirun(ranks, "check", "--parallel", parallel, "--json", *SMALL, "--hidden-size", *hidden))
    assert result["passed"] and result["ranks"] == ranks and result["max_rel_error"] <= 1e-12
    assert set(result["errors"]) == {f"{kind}{l}" for l in range(1, len(hidden) + 2) for kind in "Wb"}


@pytest.mark.parametrize("dtype", ["bfloat16", pytest.param("float16", marks=SLOW)])
def test_mixed_precision_data_parallel_checks_against_its_own_precision_on_one_rank(dtype):
    """--dtype bfloat16 | float16 on 3 ranks against the same emulated step on one: each rank's products are
    rounded apart from the whole batch's, so they agree to the half format's precision, not bit for bit."""
    proc = mpirun(3, "check", "--parallel", "data", "--dtype", dtype, *SMALL, "--hidden-size", "7", "5", "--json")
    result = last_json(proc)
    assert result["passed"] and result["dtype"] == dtype and 0 < result["max_rel_error"] <= result["tolerance"]
    assert result["replica_max_abs_diff"] == 0.0  # every rank applied the same summed gradient


def test_ranks_disagreeing_on_hyperparameters_are_reported():
    proc = mpirun(1, "train", "--parallel", "data", *SMALL, mpmd=[({}, ["train", "--parallel", "data", *SMALL, "--seed", "5"])])
    assert proc.returncode != 0
    assert "ranks [1] have other hyperparameters than rank 0" in proc.stderr


def test_bad_option_on_one_rank_ends_all_ranks():
    proc = mpirun(1, "train", "--parallel", "data", *SMALL, mpmd=[({}, ["train", "--no-such-option"])], timeout=60)
    assert proc.returncode != 0 and "unrecognized arguments: --no-such-option" in proc.stderr


def test_failure_on_one_rank_ends_all_ranks(tmp_path):
    """Rank 1 cannot find its data while rank 0 waits in a collective: the job must end, not hang."""
    args = ["train", "--parallel", "data", "--train-size", "3200", "--batch-size", "320", "--test-size", "0"]
    proc = mpirun(1, *args, mpmd=[({"PERFLAB_DATA": str(tmp_path)}, args)], timeout=60)
    assert proc.returncode != 0
    assert "rank 1:" in proc.stderr and "missing" in proc.stderr


@SLOW  # each waits out its --timeout 4 after the freeze
@pytest.mark.parametrize("ranks, comm, parallel, exchange", [
    (3, "mpi", "data", "the host MPI all-reduce"),
    (2, "shm", "data", "the shared-memory all-reduce"),
    (2, "hierarchical", "model", "the hierarchical all-reduce"),
])
def test_a_frozen_rank_ends_the_job_with_a_line_from_every_other_rank(ranks, comm, parallel, exchange):
    """Rank 1 stopped (SIGSTOP) mid-training: within the timeout and a little, the job ends with exit
    status 3, and every other rank names rank 1, the exchange, the epoch and the batch."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from freeze_rank import freeze
    train = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "perflab", "train", "--dataset", "synthetic",
             "--hidden-size", "32", "--train-size", "1000", "--batch-size", "100", "--num-epochs", "1000000",
             "--test-size", "0", "--print-every", "0", "--comm", comm, "--parallel", parallel, "--timeout", "4"]
    report = freeze(train, rank=1, after=1.5, limit=90)
    assert report["frozen"] and report["ended"], report
    assert report["exit_status"] != 0 and report["seconds_after_freeze"] < 4 + 15, report
    lines = [line for line in report["stderr"] if "no answer for" in line]
    assert sorted(int(line.split("rank ")[1].split(":")[0]) for line in lines) == [r for r in range(ranks) if r != 1]
    for line in lines:
        assert f"s in {exchange} at epoch " in line and ", batch " in line and "rank 1 silent" in line, line
        assert line.endswith("ending the job (--timeout 4)"), line


@pytest.mark.parametrize("parallel", ["data", pytest.param("model", marks=SLOW)])
@pytest.mark.parametrize("ranks, per_node", [(3, 2), pytest.param(4, 2, marks=SLOW), pytest.param(4, 1, marks=SLOW)])
def test_hierarchical_allreduce_on_pretend_nodes(ranks, per_node, parallel):
    result = last_json(mpirun(ranks, "check", "--comm", "hierarchical", "--parallel", parallel, "--json", *SMALL,
                              env={"PERFLAB_RANKS_PER_NODE": str(per_node)}))
    assert result["passed"] and result["comm"] == "hierarchical" and result["max_rel_error"] <= 1e-12


@pytest.mark.parametrize("ranks, parallel", [pytest.param(2, "data", marks=SLOW), (3, "data"),
                                             pytest.param(3, "model", marks=SLOW)])
def test_shared_memory_allreduce_matches_the_reference(ranks, parallel):
    result = last_json(mpirun(ranks, "check", "--comm", "shm", "--parallel", parallel, "--dtype", "float64", "--json",
                              *SMALL))
    assert result["passed"] and result["comm"] == "shm" and result["max_rel_error"] <= 1e-12


def test_shared_memory_allreduce_on_several_nodes_is_refused_by_name():
    proc = mpirun(2, "check", "--comm", "shm", *SMALL, env={"PERFLAB_RANKS_PER_NODE": "1"})
    assert proc.returncode == 2 and "--comm shm sums through memory the ranks share" in proc.stderr
    assert "this node holds 1 of 2 ranks" in proc.stderr


def test_shared_memory_allreduce_sums_odd_sizes_to_the_same_bits_everywhere(tmp_path):
    script = tmp_path / "shm.py"
    script.write_text(
        "import numpy as np\n"
        "from perflab.train.comm import MPIComm, SharedMemoryComm\n"
        "c = SharedMemoryComm(MPIComm())\n"
        "out = []\n"
        "for n in (1, 2, 7, 1001, 40000, 3):  # the window grows, then is reused for a smaller buffer\n"
        "    x = np.random.default_rng([c.rank, n]).random(n)\n"
        "    expected = sum(np.random.default_rng([r, n]).random(n) for r in range(c.size))\n"
        "    c.reduce_host(x)\n"
        "    out.append(bool(np.allclose(x, expected, rtol=1e-14)))\n"
        "    every = c.comm.allgather(x.tobytes())\n"
        "    out.append(all(e == every[0] for e in every))\n"
        "ok = c.comm.allgather(all(out))\n"
        "print(ok) if c.rank == 0 else None\n")
    proc = subprocess.run([MPIEXEC, "-n", "3", sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[True, True, True]"


def test_nccl_on_the_cpu_is_refused(capsys):
    from perflab.cli import main
    with pytest.raises(SystemExit) as info:
        main(["train", "--comm", "nccl", "--dataset", "synthetic"])
    assert info.value.code == 2 and "--comm nccl needs --backend cupy" in capsys.readouterr().err


def test_cuda_aware_mpi_is_detected_from_the_library_itself():
    from perflab.train import comm
    ok, name = comm.cuda_aware_mpi()
    assert isinstance(ok, bool) and name.startswith(("MPICH", "Open MPI", "Intel", "MVAPICH")), name


def test_cuda_mpi_refused_where_the_library_is_not_cuda_aware(monkeypatch):
    from perflab.train import comm
    monkeypatch.setattr(comm, "cuda_aware_mpi", lambda: (False, "Some MPI 9.1"))
    with pytest.raises(ValueError, match=r"needs a CUDA-aware MPI, and this one \(Some MPI 9.1\) says it is not"):
        comm.require_cuda_aware_mpi()
    monkeypatch.setattr(comm, "cuda_aware_mpi", lambda: (True, "Some MPI 9.1"))
    comm.require_cuda_aware_mpi()  # no error
    with pytest.raises(ValueError, match="needs --backend cupy"):
        comm.with_strategy(comm.Serial(), "cuda-mpi")


def test_bench_allreduce_needs_gpus_named():
    proc = mpirun(2, "bench", "allreduce", timeout=60)
    assert proc.returncode == 2 and "bench allreduce times GPU buffers: it needs CuPy" in proc.stderr


def test_scaling_harness_names_and_flags():
    from perflab.measure import peers_multi
    assert peers_multi.perflab_name(()) == "perflab resident"
    assert peers_multi.perflab_name(("overlap",)) == "perflab resident, overlap"
    assert peers_multi.perflab_name(("staged", "no-graphs")) == "perflab staged, no graphs"
    assert peers_multi.perflab_name(("model",)) == "perflab resident, model parallel"
    assert peers_multi.perflab_name(("pipelined",)) == "perflab pipelined"
    assert peers_multi.perflab_name(("step-graphs",)) == "perflab resident, a graph a step"
    assert peers_multi.perflab_name(("p2p",)) == "perflab resident, p2p"
    assert peers_multi.perflab_name(("bf16", "nccl-half")) == "perflab resident, bf16, nccl-half"
    with pytest.raises(SystemExit, match=r"unknown perflab flag\(s\) \['fast'\]"):
        peers_multi.perflab_on_gpus(8, 4, 16, "fast")
    for clash in (("staged", "pipelined"), ("model", "staged"), ("model", "overlap"), ("step-graphs", "pipelined"),
                  ("p2p", "staged"), ("model", "p2p"), ("overlap", "p2p")):
        with pytest.raises(SystemExit, match="do not go together"):
            peers_multi.perflab_on_gpus(8, 4, 16, *clash)
    proc = subprocess.run([sys.executable, "-m", "perflab.measure.peers_multi", "tensorflow", "8", "4", "16"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "unknown peer 'tensorflow': perflab, ddp or jax" in proc.stderr
    with pytest.raises(SystemExit, match="jax sharded scan runs fp32 or bf16, got 'fp8'"):
        peers_multi.jax_sharded(8, 4, 16, 1, "fp8")


@SLOW  # waits out its --timeout 4 after the freeze
def test_a_sweep_ended_by_a_frozen_rank_keeps_the_points_it_wrote(tmp_path):
    """Rank 1 stopped while the sweep's second point trains: the job ends with rank 0's line, and the first
    point's row stays in the CSV, where a rerun resumes after it."""
    import pandas as pd
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from freeze_rank import freeze
    sweep = [MPIEXEC, "-n", "2", sys.executable, "-m", "perflab", "sweep", "--name", "frozen", "--out", str(tmp_path),
             "--hidden", "16", "2048", "--ranks", "2", "--per-rank-batch", "100", "--train-size", "2000",
             "--num-epochs", "200", "--timeout", "4", "--json"]
    report = freeze(sweep, rank=1, after=1.5, limit=90, when_file=str(tmp_path / "frozen.csv"))
    assert report["frozen"] and report["ended"] and report["exit_status"] != 0, report
    assert any(line.startswith("perflab: error: rank 0: no answer for") and "rank 1 silent" in line
               for line in report["stderr"]), report["stderr"]
    rows = pd.read_csv(tmp_path / "frozen.csv")
    assert list(rows.H) == [16] and (rows.status == "measured").all()


def test_the_committed_gpu_runs_ended_on_a_frozen_rank():
    """On two H100 (scripts/gpu_multi.sh watchdog): rank 1 stopped mid-training under NCCL (graphed and eager),
    p2p (both), host MPI (staged, pipelined), model parallel and a deeper net; each job ended within the
    timeout and a little, exit status 3, rank 0 naming rank 1, the exchange and where."""
    from perflab.results import RESULTS_ROOT
    runs = [json.loads(line) for line in
            (RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "watchdog" / "frozen_rank_h100x2.jsonl").read_text().splitlines()]
    exchanges = {"nccl": "the NCCL all-reduce", "p2p": "the p2p exchange", "mpi": "the host MPI all-reduce"}
    seen = set()
    for run in runs:
        command = run["command"]
        timeout = float(command[command.index("--timeout") + 1])
        comm = command[len(command) - 1 - command[::-1].index("--comm") + 1]
        seen.add(comm)
        assert run["machine"]["gpu_count"] == 2 and run["frozen"] and run["ended"], command
        assert run["exit_status"] == 3 and run["seconds_after_freeze"] < timeout + 5, (command, run["seconds_after_freeze"])
        said = [line for line in run["stderr"] if line.startswith("perflab: error: rank 0: no answer for")]
        assert len(said) == 1 and f"in {exchanges[comm]} at epoch " in said[0] and "rank 1 silent" in said[0], said
    assert seen == set(exchanges)


@pytest.mark.mpi
def test_work_on_the_first_ranks_that_raises_leaves_no_rank_waiting():
    """on_first_ranks (the engines' entry points: a sweep point, a correctness check, the ceilings): where the
    work raises on the ranks that run it, the ranks that wait still return, and the error is raised where it
    happened. Before, an engine's exception left the others at the closing barrier forever."""
    if MPIEXEC is None:
        pytest.fail("mpiexec not found: install the package's MPI (pip install mpich) into this environment")
    script = ("from perflab.train.comm import on_first_ranks, world\n"
              "from perflab.train.watchdog import say_line\n"  # a line in one write: the two ranks' never interleave
              "def work(comm):\n"
              "    raise ValueError('bad on purpose')\n"
              "rank = world().rank\n"
              "try:\n"
              "    say_line(f'rank {rank} returned {on_first_ranks(1, work)}')\n"
              "except ValueError as exc:\n"
              "    say_line(f'rank {rank} raised {exc}')\n"
              "say_line(f'rank {rank} then {on_first_ranks(2, lambda comm: comm.size * 10 + comm.rank)}')\n")
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    lines = sorted(proc.stderr.splitlines())
    assert proc.returncode == 0 and lines == ["rank 0 raised bad on purpose", "rank 0 then 20", "rank 1 returned None",
                                              "rank 1 then None"], (proc.stdout, proc.stderr[-2000:])


@SLOW  # waits out its --timeout 4 after the freeze
def test_a_rank_stopped_while_it_waits_out_a_point_ends_the_sweep(tmp_path):
    """Points on one rank of two: rank 1 waits each out (no exchange, no training watchdog of its own). Stopped
    there, it is seen by the sweep's watchdog (patient: a wait as long as the point takes is no fault, a rank
    without a heartbeat for the timeout is): rank 0 names it and the point, the job ends, the rows written stay."""
    import pandas as pd
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from freeze_rank import freeze
    sweep = [MPIEXEC, "-n", "2", sys.executable, "-m", "perflab", "sweep", "--name", "waiting", "--out", str(tmp_path),
             "--hidden", "16", "24", "32", "40", "--ranks", "1", "--batch", "100", "--train-size", "2000",
             "--num-epochs", "100", "--timeout", "4", "--json"]
    report = freeze(sweep, rank=1, after=0.5, limit=120, when_file=str(tmp_path / "waiting.csv"))
    assert report["frozen"] and report["ended"] and report["exit_status"] != 0, report
    said = [line for line in report["stderr"] if line.startswith("perflab: error: rank 0: rank 1 silent")]
    assert said and "in the sweep at point " in said[0] and "(H=" in said[0], report["stderr"]
    assert report["seconds_after_freeze"] < 4 + 15, report
    rows = pd.read_csv(tmp_path / "waiting.csv")
    assert len(rows) >= 1 and (rows.status == "measured").all() and len(rows) < 4


@SLOW  # waits out its timeout after the freeze
def test_an_engine_stopped_while_it_waits_out_a_point_ends_the_engines_with_a_line(tmp_path):
    """What each MPI engine runs for a notebook sweep's point (run_point_watched) has the sweep's patient
    watchdog: points on one rank of two, rank 1 stopped while it waits one out, rank 0 names it and the point
    and the job ends (before, the engines waited forever)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from freeze_rank import freeze
    script = tmp_path / "engine_points.py"
    script.write_text(
        "from perflab.workbook import sweep\n"
        "points = sweep.grid(hidden=(16, 24, 32, 40), batch=(100,), N=2000, epochs=100)\n"
        "for i, point in enumerate(points):\n"
        "    sweep.run_point_watched(point, 'synthetic', 4, sweep.point_where(i, len(points), point))\n"
        "    print('point done', flush=True)\n")
    report = freeze([MPIEXEC, "-n", "2", sys.executable, str(script)], rank=1, after=0.5, limit=120, when="point done")
    assert report["frozen"] and report["ended"] and report["exit_status"] != 0, report
    said = [line for line in report["stderr"] if line.startswith("perflab: error: rank 0: rank 1 silent")]
    assert said and "in the sweep at point " in said[0] and "(H=" in said[0], report["stderr"]
    assert report["seconds_after_freeze"] < 4 + 15, report


def test_an_error_line_reaches_stderr_in_one_write(monkeypatch):
    """Written apart from its newline, two ranks' error lines reached the launcher joined into one, and the
    frozen-rank test saw one rank speak (a flake on a loaded host)."""
    from perflab.train import watchdog
    writes = []

    class Recorder:
        def write(self, text):
            writes.append(text)

        def flush(self):
            writes.append("<flush>")
    monkeypatch.setattr(watchdog.sys, "stderr", Recorder())
    watchdog.say_line("perflab: error: rank 2: x")
    assert writes == ["perflab: error: rank 2: x\n", "<flush>"]


def test_the_p2p_early_exchange_starts_at_the_first_whole_vector_past_the_first_layer_and_only_where_it_can():
    """exchange_early moves the BF16 copy from a whole 8-value vector on: rounded up, since the values before
    early_from (b_1's) are written after it; none at two-shot ranks, without a split point, or past the last vector."""
    from perflab.kernels import p2p
    from perflab.train.comm import P2PComm
    exchange = P2PComm.__new__(P2PComm)
    exchange.kernels, exchange.size = p2p, 2
    assert exchange.early_split(1000, 97) == 13 and exchange.early_split(1000, 96) == 12
    assert exchange.early_split(1000, None) == -1
    assert exchange.early_split(100, 97) == -1  # 12 whole vectors: nothing of them past the split
    exchange.size = 3
    assert exchange.early_split(1000, 97) == -1
