"""The device campaigns (scripts/*.sh) run where CI cannot: check here that they parse and name
only peers that exist, so a renamed peer fails CI instead of a device call."""
import shlex
import subprocess
import sys

import pytest

from perflab.data import PROJECT_ROOT
from perflab.peers import PEERS

SCRIPTS = sorted((PROJECT_ROOT / "scripts").glob("*.sh"))


def peer_lists(text: str):
    """The names after each --peers, up to the next option or shell operator."""
    for line in text.replace("\\\n", " ").splitlines():
        if "--peers" not in line:
            continue
        names = []
        for token in shlex.split(line.split("--peers", 1)[1], comments=True):
            if token.startswith("-") or any(c in token for c in "|>;&"):
                break
            names.append(token)
        yield names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_device_script_parses_and_names_existing_peers(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    for names in peer_lists(script.read_text()):
        assert names and not set(names) - set(PEERS), f"{script.name}: unknown peers {set(names) - set(PEERS)}"


def test_peer_lists_are_read_across_continuations():
    text = 'bench train --peers perflab "jax scan epoch" \\\n  "cublas 5-gemm floor" --out "$OUT" 2>&1 | tail'
    assert list(peer_lists(text)) == [["perflab", "jax scan epoch", "cublas 5-gemm floor"]]


@pytest.mark.parametrize("script", sorted((PROJECT_ROOT / "scripts").glob("*.py")), ids=lambda p: p.name)
def test_device_python_script_compiles(script):
    compile(script.read_text(), str(script), "exec")


@pytest.mark.parametrize("arg", ["(128, 64)", "not a tuple", "(1, 2, 3, 4, 5, 6, 7, 8, 9, -1)"])
def test_gemm_sweep_names_a_bad_config_before_it_needs_a_gpu(arg):
    proc = subprocess.run([sys.executable, str(PROJECT_ROOT / "scripts" / "gemm_sweep.py"), arg],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"a config is 10 non-negative integers (BM, BN, BK, WM, WN, TM, TN, STAGES, KV, MINB), got {arg!r}" in proc.stderr


def test_ncu_gemm_names_an_unknown_shape_before_it_needs_a_gpu():
    proc = subprocess.run([sys.executable, str(PROJECT_ROOT / "scripts" / "ncu_gemm.py"), "fwd1 H=500 B=800"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "unknown shape(s) ['fwd1 H=500 B=800']: the shapes are ['fwd1 H=512 B=800', 'bwd3 H=512 B=800'" in proc.stderr
