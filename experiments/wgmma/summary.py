"""Best time per kernel family and shape from a check.py run: python3 summary.py DIR/wgmma.jsonl"""
import json
import sys
from collections import defaultdict

rows = [json.loads(line) for line in open(sys.argv[1])]
for r in rows:
    if r["kind"] == "odd":
        bad = {k: v for k, v in r.items() if k.startswith(("v2", "ws", "tma")) and not v < (3e-6 if "x3" in k else 2e-3)}
        print(f"odd {r['M']}x{r['N']}x{r['K']}: sgemm {r['sgemm']:.1e}; x3 worst "
              f"{max(v for k, v in r.items() if 'x3' in k):.1e}; failing: {bad or 'none'}")
best = defaultdict(dict)
for r in rows:
    if "kernel" not in r:
        continue
    k = r["kernel"]
    family = "-".join(k.split("-")[:2]) if k.startswith(("v2", "ws", "tma")) else k
    key = (r["kind"], r["M"], r["N"], r["K"])
    if family not in best[key] or r["ms"] < best[key][family]["ms"]:
        best[key][family] = r
for key, fams in best.items():
    sgemm = fams["cublas-sgemm"]["ms"]
    print(key)
    for fam, r in sorted(fams.items(), key=lambda t: t[1]["ms"]):
        print(f"   {fam:14s} {r['ms']:.4f} ms {r['tflops']:6.1f} TFLOP/s  x{sgemm / r['ms']:.2f} sgemm  err {r['err']:.1e}  {r['kernel']}")
