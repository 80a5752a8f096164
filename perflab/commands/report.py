"""`perflab report`: the report PDF of a run, and the committed Markdown report and the README's headline with results/README.md."""
from __future__ import annotations

from perflab.commands.options import (
    CLIError,
    outputs,
)


def cmd_report(args, comm) -> dict:
    from perflab.data import PROJECT_ROOT
    from perflab.report import markdown, predictions
    from perflab.results import relative
    if (args.markdown or args.readme) and (args.folder or args.out):
        raise CLIError(f"--{'markdown' if args.markdown else 'readme'} regenerates the committed reports from results/; "
                       "--folder and --out are for a run's report PDF: leave them out, or leave it out")
    if args.markdown:
        from perflab.results import RESULTS_ROOT
        path = RESULTS_ROOT / "REPORT.md"
        predictions.validation_figure()
        predictions.checks_figure()
        markdown.tensor_core_figures()
        markdown.graphs_figures()
        markdown.usc_figures()
        path.write_text(markdown.analysis_markdown())
        if not args.json:
            print(f"wrote {relative(path)}")
        return {"report": str(path)}
    if args.readme:
        changed = markdown.update_readme(PROJECT_ROOT / "README.md")
        if not args.json:
            print("README headline and results/README.md " + ("updated" if changed else "already up to date"))
        return {"readme_changed": changed}
    if args.folder and not __import__("pathlib").Path(args.folder).is_dir():
        raise CLIError(f"--folder {args.folder}: no such folder (a run folder holds roofline.csv and figures/)")
    from perflab.results import ResultFileError
    try:
        path = markdown.build(args.out, args.folder)
    except (FileNotFoundError, ResultFileError) as exc:
        raise CLIError(str(exc)) from None
    if not args.json:
        print(f"wrote {relative(path)}")
    return {"report": str(path)}


def register(sub) -> None:
    p = sub.add_parser("report", help="the report PDF of a run: the seeds' questions answered from its results, its figures",
                       description="Writes <run folder>/report.pdf: FLOPs and bytes, effective rates, rooflines with "
                                   "their points, predicted against measured, scaling, convergence, correctness, each "
                                   "with tables and a text generated from the numbers.")
    p.add_argument("--out", metavar="PDF", help="default <run folder>/report.pdf")
    p.add_argument("--readme", action="store_true", help="instead: regenerate the README's headline and the tables of "
                                                          "results/README.md from the result files")
    p.add_argument("--markdown", action="store_true", help="instead: write results/REPORT.md (the seeds' questions "
                                                           "answered from the committed GPU results)")
    p.add_argument("--folder", metavar="DIR", help="the run folder to report on (default: this machine's, "
                                                    "runs/<machine key>/; a committed one: results/nvidia-h200)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_report)
