
import numpy as np
import pytest

from perflab import data
from perflab.config import Config
from perflab.train import loop, model
from perflab.train.spec import RunSpec


def run(cfg, test=True):
    tr, te, _ = data.load(cfg)
    params = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed)
    return loop.fit(cfg, loop.Sequential(cfg, params, tr.X, tr.y), te if test else None, progress=False)


def test_mnist_end_to_end_reaches_090_in_one_epoch():
    """The whole MNIST training set once, the test set scored (how long it takes is no test's business: a two-core
    machine three times slower must pass it too)."""
    cfg = Config(hidden_sizes=(64,), batch_size=50, learning_rate=1.0, reg=1e-6, train_size=60000,
                 num_epochs=1, dtype="float32", test_size=10000)
    history = run(cfg)
    assert history.test_precision >= 0.90


def test_last_partial_batch_is_trained_on():
    cfg = Config(dataset="synthetic", input_size=6, hidden_sizes=(5,), num_classes=3, train_size=10,
                 batch_size=4, test_size=0, learning_rate=0.1, print_every=1)
    history = run(cfg, test=False)
    assert [row["batch"] for row in history.losses] == [0, 1, 2]
    # the last step (2 samples) moved the weights: repeating it by hand from before gives the same
    assert loop.batch_indices(cfg, 0)[-1] == slice(8, 10)


def test_shuffle_is_a_seeded_permutation():
    cfg = Config(dataset="synthetic", input_size=4, hidden_sizes=(3,), num_classes=2, train_size=11,
                 batch_size=4, shuffle=True, test_size=0)
    a, b = loop.batch_indices(cfg, 0), loop.batch_indices(cfg, 0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert sorted(np.concatenate(a).tolist()) == list(range(11))
    assert not all(np.array_equal(x, y) for x, y in zip(a, loop.batch_indices(cfg, 1)))


def test_loss_decreases_on_synthetic():
    cfg = Config(dataset="synthetic", input_size=30, hidden_sizes=(16, 8), num_classes=4, train_size=800,
                 batch_size=40, num_epochs=20, learning_rate=2.0, test_size=200, reg=1e-4)
    history = run(cfg)
    losses = [row["loss"] for row in history.epochs]
    assert losses[-1] < losses[0]
    assert history.test_precision > 0.8


def test_a_gpu_trainer_frees_its_graphs_before_its_comm():
    """Destroying an NCCL communicator while CUDA graphs hold its all-reduces hangs
    (results/nvidia-h200/nccl_graph_capture.log); a trainer's attributes go in the order they were set,
    the comm first, so the trainer frees its graphs itself. Checked without a GPU, on stand-ins."""
    from perflab.train.gpu import FusedGPU
    freed = []

    class Noted:
        def __init__(self, name):
            self.name = name

        def __del__(self):
            freed.append(self.name)
    trainer = FusedGPU.__new__(FusedGPU)
    trainer.comm = Noted("communicator")
    trainer.cache = {(0, 100, False): Noted("graph")}
    del trainer
    assert freed == ["graph", "communicator"]


def test_overlap_exchanges_every_gradient_once_the_rest_of_g_with_the_last_chunk():
    from perflab.train.overlap import overlap_pieces
    H, D, total = 10, 7, 10 * 7 + 10 + 3 * 10 + 3 + 1  # dW1, then b1, W2, b2 and the CE slot
    chunks = [(0, 3), (3, 6), (6, 9), (9, 10)]
    pieces = overlap_pieces(chunks, D, total)
    assert [lo for lo, _ in pieces] == [0, 21, 42, 63] and pieces[-1] == (63, total)
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))  # contiguous: each element exchanged once
    assert overlap_pieces([(0, H)], D, total) == [(0, total)]  # one chunk: one exchange of all of G
    from perflab.train.overlap import row_chunks
    assert row_chunks(10, 4) == [(0, 3), (3, 6), (6, 9), (9, 10)] and row_chunks(2048, 2) == [(0, 1024), (1024, 2048)]


def test_an_epoch_is_one_graph_wherever_the_exchange_can_sit_in_it():
    """One rank or NCCL: the whole epoch one CUDA graph (resident, batches in order, steps graphed);
    a host MPI exchange, shuffled batches, staged data or recorded phases: a batch at a time."""
    import types

    from perflab.train import profile
    from perflab.train.comm import MPIComm, NCCLComm, Serial
    from perflab.train.gpu import FusedGPU
    nccl, mpi = NCCLComm.__new__(NCCLComm), MPIComm.__new__(MPIComm)
    nccl.size = mpi.size = 2
    assert Serial().capturable and nccl.capturable and not mpi.capturable
    trainer = types.SimpleNamespace(epoch_graphs=True, graphs=True, capturable=True, mode="resident")
    in_order = [slice(0, 10), slice(10, 20)]
    assert FusedGPU.graphs_an_epoch(trainer, in_order)
    assert not FusedGPU.graphs_an_epoch(trainer, [np.arange(10)])
    for off in ({"capturable": False}, {"mode": "staged"}, {"graphs": False}, {"epoch_graphs": False}):
        assert not FusedGPU.graphs_an_epoch(types.SimpleNamespace(**{**vars(trainer), **off}), in_order), off
    with profile.profiling():
        assert not FusedGPU.graphs_an_epoch(trainer, in_order)


def test_the_pipelined_host_waits_for_a_pieces_flag_and_names_one_that_never_lands():
    """A graphed step records no event the host can wait on: each piece's copy down is followed by a
    flag the host polls; a flag that never comes raises (after asking the down stream for its CUDA
    error) instead of hanging."""
    import types

    from perflab.train.gpu import GPUError
    from perflab.train.pipelined import Pipelined
    asked = []
    trainer = types.SimpleNamespace(landed=np.array([1, 0], np.int32),
                                    down=types.SimpleNamespace(synchronize=lambda: asked.append("down")))
    Pipelined.wait_landed(trainer, 0, limit_s=0.01)
    assert asked == []
    with pytest.raises(GPUError, match="gradient piece 1 did not reach the host in 0.01 s"):
        Pipelined.wait_landed(trainer, 1, limit_s=0.01)
    assert asked == ["down"]


class WholeEpochs(loop.Sequential):
    """The reference, offering fit the whole-epoch path a one-GPU trainer takes (FusedGPU.epoch)."""

    calls = 0

    def graphs_an_epoch(self, batches) -> bool:
        return True

    def epoch(self, batches, want_loss: bool):
        self.calls += 1
        for k, index in enumerate(batches):
            self.want_loss = want_loss and k + 1 == len(batches)
            loss = self.batch(index)
        return loss


def test_fit_runs_whole_epochs_where_the_trainer_can_and_only_with_the_loss_at_their_end():
    cfg = Config(dataset="synthetic", input_size=13, hidden_sizes=(7,), num_classes=3, train_size=517, batch_size=100,
                 num_epochs=3, learning_rate=0.5, test_size=0)
    train = data.load(cfg)[0]
    runs = {}
    for every in (0, 2):
        trainer = WholeEpochs(cfg.replace(print_every=every), model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed),
                              train.X, train.y)
        runs[every] = loop.fit(cfg.replace(print_every=every), trainer, progress=False), trainer.calls
    (whole, calls), (each, none) = runs[0], runs[2]
    assert calls == 3 and none == 0  # the loss every 2 batches: batch by batch
    assert [(r["epoch"], r["batch"], r["step"]) for r in whole.losses] == [(0, 5, 5), (1, 5, 11), (2, 5, 17)]
    assert [r["loss"] for r in whole.losses] == [r["loss"] for r in each.losses if r["batch"] == 5]
    for a, b in zip(whole.params, each.params):
        assert np.array_equal(a, b)


class Timed:
    """A trainer whose epoch costs what its exchange is given to cost (no GPU): what fastest_exchange sees."""

    def __init__(self, device, cost: float, closed: list):
        import contextlib
        self.device, self.cost, self.closed = device, cost, closed
        self.P, self.stream, self.epochs_graphed = np.arange(5.0), contextlib.nullcontext(), 0
        self.state = [self.P]  # what a trial epoch changes and fastest_exchange puts back

    def sync(self):
        pass

    def close(self):
        self.closed.append(self.device.exchange)


@pytest.mark.parametrize("refused", [False, True])
def test_comm_auto_keeps_the_exchange_whose_epoch_was_fastest_on_the_slowest_rank(monkeypatch, refused):
    import types

    from perflab.config import ConfigError
    from perflab.train import runner
    costs, closed = {"nccl": 3e-3, "overlap": 4e-3, "p2p": 2e-3}, []

    def make(cfg, parallel, comm, spec, train_set):
        if refused and spec.exchange == "p2p":
            raise ConfigError("--comm p2p reads the gradients of the GPUs of one node")
        return Timed(spec, costs[spec.exchange], closed)

    def epoch(cfg, trainer):
        trainer.P += 1  # training moved the parameters; the kept trainer must start from its initial ones
        trainer.epochs_graphed += 1
        return trainer.cost
    monkeypatch.setattr(runner, "make_gpu_trainer", make)
    monkeypatch.setattr(runner, "epoch_seconds", epoch)
    monkeypatch.setattr(runner, "on_this_gpu", lambda comm, split: split)
    comm = types.SimpleNamespace(size=2, allgather=lambda x: [x, 1.5 * x])  # the other rank slower: its time counts
    cfg = Config(hidden_sizes=(64,))
    trainer = runner.fastest_exchange(cfg, "data", comm, RunSpec(backend="cupy", parallel="data", exchange="auto"), None)
    kept = "nccl" if refused else "p2p"
    assert trainer.chosen.exchange == kept and np.array_equal(trainer.P, np.arange(5.0))
    assert trainer.epochs_graphed == 0 and closed == (["overlap"] if refused else ["overlap", "nccl"])
    summary = runner.exchange_summary(trainer)
    assert summary["comm"] == kept and summary["exchange_trial_s"]["overlap"] == pytest.approx(6e-3)
    text = runner.trial_text(summary)
    assert text.startswith(f"--comm auto kept {kept},") and "nccl 4.50 ms" in text
    assert ("p2p refused (--comm p2p reads the gradients of the GPUs of one node)" in text) == refused


def test_comm_auto_times_nothing_where_a_run_takes_one_exchange():
    from perflab.train import runner
    gpu, one_layer = RunSpec(backend="cupy", exchange="auto"), Config(hidden_sizes=(64,))
    for hidden in ((64,), (64, 32), (64, 32, 16)):  # every depth: the fused trainer exchanges one gradient buffer
        exchanges = runner.exchanges(Config(hidden_sizes=hidden), "data", 2, gpu)
        assert [s.exchange for s in exchanges] == ["nccl", "overlap", "p2p"]
    for cfg, parallel, ranks, spec, only in [(one_layer, "data", 1, gpu, "nccl"), (one_layer, "model", 2, gpu, "nccl"),
                                             (one_layer, "data", 2, RunSpec(backend="cupy", mode="staged"), "mpi")]:
        assert [s.exchange for s in runner.exchanges(cfg, parallel, ranks, spec)] == [only]


def test_comm_auto_tries_the_half_precision_exchange_in_half_precision_runs_only():
    from perflab.train import runner
    spec = RunSpec(backend="cupy", exchange="auto")
    names = lambda dtype: [s.exchange for s in runner.exchanges(Config(dtype=dtype), "data", 2, spec)]  # noqa: E731
    assert names("float32") == ["nccl", "overlap", "p2p"]
    assert names("bfloat16") == ["nccl", "overlap", "p2p", "nccl-half"]
    assert names("float16")[-1] == "nccl-half" and names("bfloat16")[:1] == ["nccl"]


def test_the_committed_deep_model_parallel_runs_passed_every_check_and_time_both_partitions():
    """Two H100: the fused model-parallel trainer checked at depths 1-4 (float64 and float32, graphed and eager)
    against the reference, every one passed at its precision; each deeper net timed both ways in one run."""
    import json

    from perflab.results import RESULTS_ROOT
    folder = RESULTS_ROOT / "nvidia-h100-80gb-hbm3"
    lines = (folder / "deep_model_check_h100x2.log").read_text().splitlines()
    checks = [line.split() for line in lines if line.startswith("p=2 model")]
    assert len(checks) == 16 and all(c[-1] == "True" for c in checks)
    assert {len(c) - 6 for c in checks} == {1, 2, 3, 4}  # the depths: p=2 model dtype <widths> launch error passed
    assert all(float(c[-2]) < (1e-12 if c[2] == "float64" else 1e-5) for c in checks)
    rows = [json.loads(line) for line in (folder / "deep_model_h100x2.jsonl").read_text().splitlines()]
    nets = {tuple(r["hidden_sizes"]) for r in rows}
    assert len(nets) == 3 and all(len(n) > 1 for n in nets)
    assert {(tuple(r["hidden_sizes"]), r["parallel"]) for r in rows} == {(n, p) for n in nets for p in ("model", "data")}
    assert all(r["ranks"] == 2 and r["machine"]["git_commit"] != "WORKTREE" for r in rows)
