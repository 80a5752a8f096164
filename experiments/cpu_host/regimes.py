"""Does this CPU host keep one speed for minutes? For about 200 s, over and over: the ceilings' step kernels of the
CPU sweep's H = 512, B = 1600 point (forward + backward + update, ms a batch), three training epochs of that point
(ms a batch) and the steadiness probe's one-thread GEMM (ms). Usage: python regimes.py OUT.jsonl"""
import sys, time, json
from perflab.measure import ceilings
from perflab.config import Config
from perflab.analysis import perfmodel
from perflab.train.runner import train_on_ranks
from perflab.train.spec import RunSpec
from perflab.train.comm import Serial
from perflab.measure import steadiness
out = open(sys.argv[1], "w")
t0 = time.time()
H, B = 512, 1600
point = dict(H=H, B=B, p=1, parallel="data", backend="numpy", mode="resident", gemm="cublas", launch="eager", dtype="float32", N=38400, epochs=2, comm="mpi")
cfg = Config(dataset="synthetic", hidden_sizes=perfmodel.widths(H), batch_size=B, train_size=38400, num_epochs=3, dtype="float32", test_size=0, learning_rate=0.1)
device = RunSpec.from_point(point).validate()  # at a17791e: .device(60), the runner then took a Device
while time.time() - t0 < 200:
    rows = ceilings.cpu_step_kernels(Serial(), hidden=[H], batches=[B], repeats=5)
    k = sum(r["seconds"] for r in rows if "two" not in r["impl"]) * 1e3
    h, _ = train_on_ranks(cfg, "data", Serial(), device, log=None)
    ep = [e["seconds"] / 24 * 1e3 for e in h.epochs]
    pr = steadiness.probe(0.5, threads=1)
    rec = dict(t=round(time.time()-t0,1), kernels_ms=round(k,2), epochs_ms=[round(x,2) for x in ep], gemm1=round(pr.get("gemm_ms", float('nan')),2))
    print(rec, flush=True); out.write(json.dumps(rec)+"\n"); out.flush()
