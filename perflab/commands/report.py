"""`perflab report`: the report PDF of a run, and the committed Markdown report and the README's headline with the
results root's README.md."""
from __future__ import annotations

from perflab.commands.options import (
    CLIError,
    outputs,
)


def cmd_report(args, comm) -> dict:
    from pathlib import Path

    from perflab import results
    from perflab.data import PROJECT_ROOT
    from perflab.report import markdown
    from perflab.results import relative
    if (args.markdown or args.readme) and (args.folder or args.out or args.sweeps):
        raise CLIError(f"--{'markdown' if args.markdown else 'readme'} regenerates the committed reports from results/; "
                       "--folder, --out and --sweeps are for a run's report PDF: leave them out, or leave it out")
    if args.markdown:
        paths = markdown.write_reports()
        if not args.json:
            print("wrote " + ", ".join(relative(p) for p in paths))
        return {"report": str(paths[0]), "campaigns": str(paths[1])}
    if args.readme:
        changed = markdown.update_readme(PROJECT_ROOT / "README.md")
        if not args.json:
            print("README headline and results/README.md " + ("updated" if changed else "already up to date"))
        return {"readme_changed": changed}
    from perflab.analysis import validation
    from perflab.report import pdf
    from perflab.results import ResultFileError
    folder = Path(args.folder or results.run_dir())
    check_run_folder(folder, given=bool(args.folder))
    if not args.out and committed(folder / "report.pdf"):
        raise CLIError(f"{relative(folder)} is in the committed tree: its report would be written to "
                       f"{relative(folder / 'report.pdf')}, which git tracks or would show; pass --out PDF to say where "
                       "it goes (nothing written)")
    also = tuple(args.sweeps or ())
    try:
        validation.named_sweeps(folder, also)  # an unknown name refused before anything is drawn
        path = pdf.build(args.out, folder, also=also)
    except (FileNotFoundError, ResultFileError, validation.SweepNameError) as exc:
        raise CLIError(str(exc)) from None
    if not args.json:
        print(f"wrote {relative(path)}")
    return {"report": str(path)}


def check_run_folder(folder, given: bool = True) -> None:
    """Refuse a folder that holds no run: no sweep (validation.sweep_files: roofline.csv, or a CSV whose .json
    says it is a sweep) and no figures/*.png; a folder whose subfolders hold runs (--folder results: one level
    too high) names them. A folder of figures alone (a run of other notebooks) is a run."""
    from perflab.analysis import validation
    from perflab.results import relative
    where = f"--folder {folder}" if given else f"this machine's run folder {relative(folder)}"
    if not folder.is_dir():
        raise CLIError(f"--folder {folder}: no such folder (a run folder holds roofline.csv and figures/)" if given else
                       f"{where} does not exist yet: `make roofline` (perflab notebook roofline) makes it")
    if validation.sweep_files(folder):
        return
    runs = sorted(d for d in folder.iterdir() if d.is_dir() and validation.sweep_files(d))
    if runs:
        raise CLIError(f"{where} holds no run itself (no sweep CSV such as roofline.csv with its .json); its subfolders "
                       f"{', '.join(relative(d) for d in runs)} do: pass one, e.g. --folder {relative(runs[0])}")
    if not any((folder / "figures").glob("*.png")):
        raise CLIError(f"{where} holds no run: no sweep CSV (roofline.csv, or another `perflab sweep` CSV with its "
                       ".json) and no figures/*.png; `perflab notebook roofline` writes a run folder (runs/<machine key>/)")


def committed(path) -> bool:
    """Whether writing `path` would land in the committed tree: under the results root (perflab.results.RESULTS_ROOT),
    or inside this checkout where git does not ignore it (tracked, or it would show in `git status`)."""
    import subprocess
    from pathlib import Path

    from perflab.data import PROJECT_ROOT
    from perflab.results import RESULTS_ROOT
    path = Path(path).resolve()
    if path.is_relative_to(RESULTS_ROOT.resolve()):
        return True
    if not path.is_relative_to(PROJECT_ROOT.resolve()):
        return False
    try:  # exit 0: ignored; 1: not ignored (or tracked); 128: no git here
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=PROJECT_ROOT, capture_output=True,
                                 timeout=10).returncode
    except (OSError, subprocess.SubprocessError):
        return False
    return ignored == 1


def register(sub) -> None:
    p = sub.add_parser("report", help="the report PDF of a run: the seeds' questions answered from its results, its figures",
                       description="Writes <run folder>/report.pdf: FLOPs and bytes, effective rates, rooflines with "
                                   "their points, predicted against measured, scaling, convergence, correctness, each "
                                   "with tables and a text generated from the numbers.")
    p.add_argument("--out", metavar="PDF", help="default <run folder>/report.pdf; needed for a folder of the "
                                                 "committed tree (results/), which is never written unasked")
    p.add_argument("--readme", action="store_true", help="instead: regenerate the README's headline and the tables of "
                                                          "results/README.md from the result files")
    p.add_argument("--markdown", action="store_true", help="instead: write results/REPORT.md (the seeds' questions, in the report's outline, answered from the committed two-GPU main job) and results/CAMPAIGNS.md (its appendix: every committed campaign) "
                                                           "answered from the committed GPU results)")
    p.add_argument("--folder", metavar="DIR", help="the run folder to report on (default: this machine's, "
                                                    "runs/<machine key>/; a committed one, with --out: "
                                                    "results/nvidia-h200)")
    sweeps_option(p)
    outputs(p, folder=False)
    p.set_defaults(run=cmd_report)


def sweeps_option(parser) -> None:
    """--sweeps, which `perflab report` and `perflab validate` share."""
    parser.add_argument("--sweeps", nargs="+", metavar="NAME",
                        help="take in these sweeps of the run folder too (`perflab sweep --name NAME` wrote NAME.csv); "
                             "by default only the main job's sweeps are read, so scratch sweeps displace nothing")
