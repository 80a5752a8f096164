"""One rank's p = 2 step as the GPU ran it, from step_trace_torch.py's CSV: every kernel and copy between two exchange
kernels, each one's median start (from the step's first) and duration over the last 15 steps, and the step's span.
Copies (the copy engine's push) run beside the kernels, so the events are listed by their start.

    python experiments/p2p/step_events.py trace.csv "label"
"""
import statistics
import sys

import pandas as pd

t = pd.read_csv(sys.argv[1]).sort_values("Start (ns)").reset_index(drop=True)
ends = t.index[t["Name"].str.contains("exchange_update")]
steps = [t.loc[a + 1:b] for a, b in zip(ends[:-1], ends[1:])]
usual = statistics.mode(len(s) for s in steps)  # an epoch's end adds the loss' passes
steps = [s for s in steps if len(s) == usual][-15:]


def median(values):
    return statistics.median(values) / 1e3


span = median([s["Start (ns)"].iloc[-1] + s["Duration (ns)"].iloc[-1] - s["Start (ns)"].iloc[0] for s in steps])
print(f"== {sys.argv[2]}: {len(steps)} steps of {usual} events, a step {span:.1f} us (first start to the exchange's end)")
for i in range(usual):
    start = median([s["Start (ns)"].iloc[i] - s["Start (ns)"].iloc[0] for s in steps])
    print(f"  at {start:7.2f} us  {median([s['Duration (ns)'].iloc[i] for s in steps]):7.2f} us  "
          f"{steps[-1]['Name'].iloc[i][:80]}")
