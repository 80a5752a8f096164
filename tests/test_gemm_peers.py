"""perflab.measure.gemm_peers without a GPU: the operands go over as stored, and a peer that cannot run
is skipped with its reason (test_gpu.py runs them on a GPU)."""
import json
import subprocess
import sys

import numpy as np

from perflab.measure import gemm_peers
from perflab.measure.gemm_inputs import gemm_operands, gemm_shapes, input_sets


def test_operands_go_over_as_memory_holds_them():
    for name, M, K, N, ta, tb in gemm_shapes((37,), (101,)):
        a, b = gemm_operands(np, np.random.default_rng(0), M, K, N, ta, tb)
        for x, transposed in ((a, ta), (b, tb)):
            base, flipped = gemm_peers.stored(x)
            assert flipped == transposed and base.flags.c_contiguous, name
            assert np.array_equal(base.T if flipped else base, x)


def test_peers_draw_the_benchs_inputs():
    inputs, reference = gemm_peers.shape_inputs(37, 784, 101, False, True)
    rng = np.random.default_rng(0)
    assert len(inputs) == input_sets(37, 784, 101) >= 2
    for a, b in inputs:
        a2, b2 = gemm_operands(np, rng, 37, 784, 101, False, True)
        assert np.array_equal(a, a2) and np.array_equal(b, b2)
    assert np.allclose(reference, inputs[0][0].astype(np.float64) @ inputs[0][1].astype(np.float64))


def test_a_peer_without_a_gpu_is_skipped_with_its_reason(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # whatever is installed, no GPU is visible
    said = []
    assert gemm_peers.run_gemm_peers(gemm_peers.GEMM_PEERS, [7], [9], 1, log=said.append, timeout=120) == {}
    assert [m.split(" (")[0] for m in said] == [f"peer skipped: {p}" for p in gemm_peers.GEMM_PEERS]
    assert all(m.endswith(")") and len(m) > len("peer skipped: jax ()") for m in said)


def test_an_unknown_peer_is_named_with_the_peers_there_are():
    proc = subprocess.run([sys.executable, "-m", "perflab.measure.gemm_peers", json.dumps(["torch", [7], [9], 1])],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and f"unknown GEMM peer 'torch': the peers are {gemm_peers.GEMM_PEERS}" in proc.stderr


def test_a_crashing_peer_process_gives_its_last_error_line():
    from perflab.measure.peers import run_peer_process
    result, why = run_peer_process("perflab.no_such_peer", [1], timeout=60)
    assert result is None and "No module named perflab.no_such_peer" in why
