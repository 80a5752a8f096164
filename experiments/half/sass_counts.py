"""The half wgmma GEMM's machine code counted without a GPU: the kernels the half step picks, compiled by nvcc
for sm_90a from a tree's perflab/kernels, disassembled by cuobjdump, and counted (instructions, R2UR moves from
vector to uniform registers, registers a thread, bytes spilled, and the main loop's instructions and R2UR moves, from the stage
wait before its first HGMMA to its back branch; then the F2F and MUFU instructions, which share the slow pipe, and
the instructions that are not NOPs).

  python sass_counts.py [KERNELS_DIR ...]         one table a tree (default: this tree's perflab/kernels)
  python sass_counts.py --all [KERNELS_DIR ...]   every instantiation perflab compiles (wgmma_names), compiled alone:
                                                  which spill, and registers against the first tree's

nvcc must be on PATH; cuobjdump on PATH or in $CUOBJDUMP (the CUDA toolkit's, or the registry's
nvidia-cuda-cuobjdump wheel: pip download --no-deps nvidia-cuda-cuobjdump, its nvidia/cu13/bin/cuobjdump).
Session 55 wrote it to see where the kernel's instructions go with no device time left (README.md)."""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SIGNATURE = "(int, int, int, int, float, const void*, const void*, const void*, const void*, float, {out}*, int, const float*, int)"
KERNELS = {  # name: (element type, output type, template arguments after them)
    "fwd n256 (bias, sigmoid)": ("bf16", "bf16", "2,256,4,false,1,false,false,1,1"),
    "fwd n128": ("bf16", "bf16", "2,128,6,false,1,false,false,1,1"),
    "dW_1 n112 two ways": ("bf16", "float", "2,112,8,false,1,false,false,1,2"),
    "dW_1 n64 two ways": ("bf16", "float", "2,64,12,false,1,false,false,1,2"),
    "fwd n256, FP16": ("fp16", "fp16", "2,256,4,false,1,false,false,1,1"),
}


def cuobjdump() -> str:
    return os.environ.get("CUOBJDUMP", "cuobjdump")


def build(kernels_dir: Path, names: list, source: Path) -> str:
    """The instantiations `names` (as wgmma_names gives them) compiled from kernels_dir into source's .cubin;
    ptxas's report of their registers and spills."""
    lines = [f"template __global__ void {n}{SIGNATURE.format(out=n.split('<')[1].split(',')[1])};" for n in names]
    source.write_text('#include "gemm_wgmma.cu"\n' + "\n".join(lines) + "\n")
    return subprocess.run(["nvcc", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-O3",
                           f"-I{kernels_dir}", "-Xptxas", "-v", str(source), "-o", str(source.with_suffix(".cubin"))],
                          capture_output=True, text=True, check=True).stderr


def functions(sass: str) -> dict:
    """Each function's instructions (the opcode text of each line), by mangled name."""
    found, name = {}, None
    for line in sass.splitlines():
        header = re.search(r"Function : (\S+)", line)
        if header:
            name = header.group(1)
            found[name] = []
        elif name and re.match(r"\s+/\*[0-9a-f]{4}\*/", line):
            found[name].append(line.split("*/", 1)[1].split(";")[0].strip())
    return found


def main_loop(code: list) -> list:
    """The instructions from the stage wait before the first HGMMA to the branch back over it."""
    first = next(i for i, op in enumerate(code) if "HGMMA" in op)
    wait = max(i for i in range(first) if "SYNCS.PHASECHK" in code[i])
    back = next(i for i in range(first, len(code))
                if (branch := re.search(r"BRA 0x([0-9a-f]+)", code[i])) and int(branch.group(1), 16) <= 16 * wait)
    return code[wait:back + 1]


def table(kernels_dir: Path) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "instances.cu"
        report = build(kernels_dir, [f"gemm_wgmma<{e},{out},{args}>" for e, out, args in KERNELS.values()], source)
        sass = subprocess.run([cuobjdump(), "-sass", str(source.with_suffix(".cubin"))], capture_output=True,
                              text=True, check=True).stdout
    code = functions(sass)
    registers = dict(re.findall(r"Compiling entry function '(\S+)'.*?Used (\d+) registers", report, re.S))
    spills = dict(re.findall(r"Compiling entry function '(\S+)'.*?(\d+) bytes spill stores", report, re.S))
    rows = []
    for label, (element, out, args) in KERNELS.items():
        digits = "".join(f"Li{a}E" for a in args.split(",")[:3])
        name = next(n for n in code if f"gemm_wgmmaI4{element}" in n and digits in n
                    and ("fLi" if out == "float" else "S0_Li") in n)
        ops = code[name]
        loop = main_loop(ops)
        opcode = [op.split()[1 if op.startswith("@") else 0].split(".")[0] for op in ops]
        rows.append((label, len(ops), sum("R2UR" in op for op in ops), int(registers.get(name, -1)),
                     int(spills.get(name, -1)), len(loop), sum("R2UR" in op for op in loop), opcode.count("F2F"),
                     opcode.count("MUFU"), len(ops) - opcode.count("NOP")))
    return rows


def registers_and_spills(kernels_dir: Path, name: str, source: Path) -> tuple[int, int]:
    """ptxas's registers a thread and bytes spilled for one instantiation, compiled alone."""
    report = build(kernels_dir, [name], source)
    return (int(re.search(r"Used (\d+) registers", report).group(1)),
            int(re.search(r"(\d+) bytes spill stores", report).group(1)))


def every_instantiation(dirs: list) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from perflab.kernels.wgmma import wgmma_names
    names, first = wgmma_names(), None
    for d in dirs:
        with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
            found = dict(zip(names, pool.map(lambda i: registers_and_spills(Path(d), names[i], Path(tmp) / f"{i}.cu"),
                                             range(len(names)))))
        spilling = [f"{n} ({b} bytes)" for n, (_, b) in found.items() if b]
        print(f"# {d}: {len(found)} instantiations, {len(spilling)} spill" + "".join(f"\n  {s}" for s in spilling))
        if first:
            more = sum(found[n][0] > first[n][0] for n in names)
            fewer = sum(found[n][0] < first[n][0] for n in names)
            print(f"  registers against the first tree: more in {more}, fewer in {fewer}, as many in {len(names) - more - fewer}")
        first = first or found


def main(dirs: list) -> None:
    for d in dirs:
        print(f"# {d}")
        print(f"{'kernel':28} {'instructions':>12} {'R2UR':>6} {'registers':>9} {'spilled':>7} {'loop':>6} {'loop R2UR':>9}"
              f" {'F2F':>5} {'MUFU':>5} {'not NOP':>7}")
        for label, n, r2ur, regs, spilled, loop, loop_r2ur, f2f, mufu, real in table(Path(d)):
            print(f"{label:28} {n:12} {r2ur:6} {regs:9} {spilled:7} {loop:6} {loop_r2ur:9} {f2f:5} {mufu:5} {real:7}")


if __name__ == "__main__":
    every = sys.argv[1:2] == ["--all"]
    dirs = sys.argv[1 + every:] or [str(Path(__file__).resolve().parents[2] / "perflab" / "kernels")]
    for d in dirs:  # an option misspelt, or a folder that is not a tree's perflab/kernels
        if not (Path(d) / "gemm_wgmma.cu").is_file():
            sys.exit(f"sass_counts.py: {d!r} is not a folder holding gemm_wgmma.cu (a tree's perflab/kernels); "
                     "options: --all, first")
    (every_instantiation if every else main)(dirs)
