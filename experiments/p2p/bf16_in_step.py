"""What the p2p exchange costs inside a BF16 step (D64's follow-up): peers_multi's perflab run (b = 3000 a GPU, 60000
samples, BF16, p2p) with the trainer's exchange_and_update patched. `none`: each rank updates alone (the step with no
exchange at all); `as-is`; `twice`: the exchange run twice a step (its marginal cost in the step; the second round
races the first on the gradient's copy, which changes the bits, not the time). Prints peers_multi's JSON line with the
variant added; run with PYTHONPATH at the tree to measure.

    mpirun -n 2 python experiments/p2p/bf16_in_step.py VARIANT H
"""
import json
import sys

from perflab.measure import peers_multi
from perflab.train import gpu

variant, net = sys.argv[1], sys.argv[2]
exchange = gpu.FusedGPU.exchange_and_update
if variant == "none":
    gpu.FusedGPU.exchange_and_update = lambda self: self.update()
elif variant == "twice":
    def twice(self):
        exchange(self)
        exchange(self)
    gpu.FusedGPU.exchange_and_update = twice
elif variant != "as-is":
    raise SystemExit(f"variant: none, as-is or twice; got {variant!r}")
ms, launched = peers_multi.perflab_on_gpus(peers_multi.net_width(net), 3000, 60000, "bf16", "p2p")
if ms is not None:
    print(json.dumps({"variant": variant, "H": net, "epoch_ms": ms, **launched, **peers_multi.machine_stamp()}))
