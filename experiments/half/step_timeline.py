"""The kernels of one step in the last epoch of an Nsight Systems trace (nsys stats --report cuda_gpu_trace, CSV):
each kernel's median duration over the epoch's steps and the median gap before it, and the step's span.

    python experiments/half/step_timeline.py trace.csv "label"
"""
import statistics
import sys

import pandas as pd

t = pd.read_csv(sys.argv[1])
start, dur, name = (next(c for c in t.columns if c.startswith(p)) for p in ("Start", "Duration", "Name"))
k = t[~t[name].str.startswith(("[CUDA memcpy", "[CUDA memset"))].sort_values(start).reset_index(drop=True)
k["gap"] = (k[start] - (k[start] + k[dur]).shift()).fillna(0)
# the step begins with the first GEMM of the forward pass: the kernel that follows the update
update = k.index[k[name].str.contains("sgd_update|exchange_update")]
steps = [k.loc[a + 1:b] for a, b in zip(update[:-1], update[1:])]
usual = statistics.mode(len(s) for s in steps)  # a step's kernels (an epoch's end adds the loss' passes)
steps = [s for s in steps if len(s) == usual][-15:]
rows = []
for i in range(len(steps[-1])):
    rows.append((steps[-1][name].iloc[i][:70], statistics.median(s[dur].iloc[i] for s in steps) / 1e3,
                 statistics.median(s["gap"].iloc[i] for s in steps) / 1e3))
span = statistics.median((s[start].iloc[-1] + s[dur].iloc[-1] - s[start].iloc[0] + s["gap"].iloc[0]) / 1e3 for s in steps)
print(f"== {sys.argv[2]}: {len(steps)} steps, a step {span:.1f} us: kernels {sum(r[1] for r in rows):.1f} us, "
      f"gaps {sum(r[2] for r in rows):.1f} us")
for kernel, us, gap in rows:
    print(f"  {us:7.2f} us  (gap before {gap:5.2f})  {kernel}")
