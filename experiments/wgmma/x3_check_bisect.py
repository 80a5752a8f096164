"""Which change broke x3tf32 training at H=2048 B=12000 (weights after two epochs 1.2 off float64,
against 1.9e-5 at b4fc68c)? The check, with the cluster configs left out (noc2) and/or the operand
copies and splits made as before (CuPy's elementwise copy and tf32_split_kernel: oldcopy), and the
tuned choices it ran. python3 experiments/wgmma/x3_check_bisect.py MODE..."""
import json
import sys

sys.path.insert(0, ".")
from perflab.cli import main  # noqa: E402
from perflab.kernels import dispatch, wgmma  # noqa: E402
from perflab.kernels.cublas import tf32_split_kernel  # noqa: E402

modes = sys.argv[1:]
if "noc2" in modes:
    for x3 in (False, True):
        wgmma.CONFIGS[x3] = tuple(c for c in wgmma.CONFIGS[x3] if c[3] == 1)
if "oldcopy" in modes:
    def old_copy(x, big, small=None):
        if small is None:
            big[...] = x
        else:
            tf32_split_kernel()(x, big, small)
    wgmma.copy_k_major = old_copy
if "nosplitk" in modes:
    wgmma.SPLITS = (1,)
    dispatch.wgmma_choices = lambda M, N, K, x3: [(wgmma.config_name(c), 1) for c in wgmma.CONFIGS[x3]]
main(["check", "--backend", "cupy", "--dtype", "float32", "--gemm", "x3tf32", "--hidden-size", "2048", "--batch-size",
      "12000", "--learning-rate", "0.1", "--num-epochs", "2", "--test-size", "0", "--json"])
print(json.dumps({"modes": modes, "tuned": {str(k): v for k, v in dispatch.TUNED.items()}}))
