import re
import subprocess

import pytest

from perflab.cli import main


def test_emit_sbatch_writes_a_valid_script(tmp_path, capsys):
    out = tmp_path / "job.sh"
    main(["sweep", "--name", "big", "--hidden", "512", "2048", "--ranks", "8", "16", "--backend", "cupy",
          "--emit-sbatch", str(out), "--nodes", "2", "--gpus-per-node", "8", "--nsys"])
    text = out.read_text()
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", text, re.M))
    assert directives["nodes"] == "2" and directives["ntasks-per-node"] == "8" and directives["gpus-per-node"] == "8"
    run = [line for line in text.splitlines() if line.startswith("srun")][0]
    assert "nsys profile" in run and "perflab sweep --name big --hidden 512 2048 --ranks 8 16 --backend cupy" in run
    assert "--emit-sbatch" not in run and "--nodes" not in run
    assert "NCCL_NVLS_ENABLE=0" in text


def test_emit_sbatch_rejects_zero_nodes(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["sweep", "--emit-sbatch", str(tmp_path / "x.sh"), "--nodes", "0"])
    assert info.value.code == 2 and "--nodes must be at least 1, got 0" in capsys.readouterr().err
