"""The GPU's SM clock and power over time, sampled by nvidia-smi beside a benchmark. Under a
power cap (the H100 SXM's 700 W) the clock, not the FMA peak, sets what a large GEMM reaches,
and it follows the energy a kernel spends a cycle: two kernels of equal FLOPs can run at
different clocks (docs/DECISIONS.md, D12)."""
from __future__ import annotations

import datetime
import shutil
import statistics
import subprocess

QUERY = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
# NVML's clock event reasons (nvml.h, nvmlClocksEventReason*): why the clock is below the boost clock
REASONS = {0x1: "idle", 0x2: "application clocks", 0x4: "software power cap", 0x8: "hardware slowdown",
           0x10: "sync boost", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
           0x80: "hardware power brake", 0x100: "display clock"}


class SamplingError(RuntimeError):
    """nvidia-smi is missing, or gave no samples (its first line says why)."""


def reason_names(mask: int) -> list[str]:
    """The named reasons in a bit mask, then any bits NVML had no name for here, in hex."""
    unknown = mask & ~sum(REASONS)
    return [name for bit, name in REASONS.items() if mask & bit] + ([f"0x{unknown:x}"] if unknown else [])


def parse_samples(lines) -> list[dict]:
    """nvidia-smi's CSV lines (QUERY, noheader, nounits) as dicts: t (seconds since the epoch, as
    time.time() counts), clock_mhz, power_w, temp_c, reasons (the bit mask). A line it cannot read
    (a [N/A] field, a warning) is left out."""
    samples = []
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        try:
            t = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append({"t": t, "clock_mhz": float(fields[1]), "power_w": float(fields[2]),
                            "temp_c": float(fields[3]), "reasons": int(fields[4], 16)})
        except (ValueError, IndexError):
            continue
    return samples


def summarize(samples: list[dict], t0: float, t1: float, settle: float = 0.2) -> dict:
    """Clock and power over [t0 + settle, t1]: medians, the lowest clock, the highest power and
    temperature, and every clock event reason seen; only {"samples": 0} where none falls inside."""
    inside = [s for s in samples if t0 + settle <= s["t"] <= t1]
    if not inside:
        return {"samples": 0}
    mask = 0
    for s in inside:
        mask |= s["reasons"]
    return {"samples": len(inside), "clock_mhz": statistics.median(s["clock_mhz"] for s in inside),
            "clock_mhz_min": min(s["clock_mhz"] for s in inside),
            "power_w": statistics.median(s["power_w"] for s in inside),
            "power_w_max": max(s["power_w"] for s in inside), "temp_c_max": max(s["temp_c"] for s in inside),
            "reasons": ", ".join(reason_names(mask))}


class Sampler:
    """nvidia-smi sampling one GPU (its PCI bus id, as CuPy's Device.pci_bus_id gives it: CUDA's
    numbering need not be nvidia-smi's) every interval_ms while the block runs; .samples after."""

    def __init__(self, path, gpu: str, interval_ms: int = 50, smi: str = "nvidia-smi"):
        if shutil.which(smi) is None:
            raise SamplingError(f"{smi!r} is not on PATH: sampling the GPU's clock and power needs NVIDIA's driver tools")
        self.path, self.command = path, [smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                         "-lms", str(interval_ms), "-i", gpu]
        self.samples: list[dict] = []

    def __enter__(self):
        self.file = open(self.path, "w")
        self.process = subprocess.Popen(self.command, stdout=self.file, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        self.process.wait(timeout=10)
        self.file.close()
        with open(self.path) as f:
            lines = f.readlines()
        self.samples = parse_samples(lines)
        if not self.samples and exc[0] is None:
            said = lines[0].strip() if lines else "nothing"
            raise SamplingError(f"nvidia-smi gave no samples of {QUERY} (an older driver may lack a field); it said: {said}")
        return False
