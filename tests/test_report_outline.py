"""The report follows the seeds' questions: every one has a section on a CPU, a one-GPU and a two-GPU run
folder (the committed main jobs), answered from the folder's numbers or by a line naming what would; its
rooflines carry every point and no roof that was not measured."""
import json

import matplotlib
import pytest

from perflab.report import pdf, questions
from perflab.report.answer import Answer, Missing
from perflab.results import RESULTS_ROOT

FOLDERS = {"cpu": "cpu-amd-epyc/mainjob", "one gpu": "nvidia-h100-80gb-hbm3/mainjob_6a9b7f3",
           "two gpus": "nvidia-h200/mainjob_877c899"}
ANSWERED_FROM_THE_RUN = ["HW6 Q2.1", "HW6 Q2.2", "FA Q2.1", "FA Q2.3", "FA Q2.4", "FA Q2.6", "FA optional"]


def load(kind, tmp_path, figures=None):
    folder = RESULTS_ROOT / FOLDERS[kind]
    return questions.Run.load(folder, pdf.report_sweeps(folder), figures or tmp_path / "figures")


def test_the_outline_is_the_seeds_questions_in_their_order():
    ids = [q.id for q in questions.QUESTIONS]
    assert ids[:3] == ["HW6 Q1.1", "HW6 Q2.1", "HW6 Q2.2"]
    assert ids[3:14] == [f"FA Q1.{i}" for i in range(1, 5)] + [f"FA Q2.{i}" for i in range(1, 7)] + ["FA optional"]
    assert [i.split()[0] for i in ids[14:]] == ["2019"] * 2 + ["HKUST"] * 4 + ["USC"] * 2
    assert len(set(ids)) == len(ids) and all(q.quote and q.title for q in questions.QUESTIONS)
    assert list(dict.fromkeys(i.split()[0] for i in ids)) == list(questions.SEEDS)


@pytest.mark.slow  # make test-all: answers every question from each committed main job, drawing its figures
@pytest.mark.parametrize("kind", FOLDERS)
def test_every_question_has_a_section_with_numbers_or_the_command_that_would_answer(kind, tmp_path, answered_once):
    run = load(kind, tmp_path, answered_once.figures if kind == "two gpus" else None)
    answers = list(questions.answer_all(run))  # once: each answer draws its figures (the two-GPU run's: once a session)
    answered = dict((q.id, a) for q, a in answers)
    assert set(answered) == {q.id for q in questions.QUESTIONS}
    for qid, a in answered.items():
        assert isinstance(a, (Answer, Missing)), qid
        if isinstance(a, Missing):
            assert a.why and a.command, qid
    for qid in ANSWERED_FROM_THE_RUN:
        a = answered[qid]
        assert isinstance(a, Answer) and any(c.isdigit() for c in a.text), (kind, qid, a)
    assert "e+" not in answered["FA Q2.4"].text  # units, not raw exponents
    if kind == "cpu":
        assert "nothing crosses PCIe" in answered["HW6 Q2.2"].text and "PCIe" not in answered["FA Q2.1"].tables[0][0].to_string()
    doc = pdf.Document()
    for q, a in answers:
        pdf.answer_section(doc, q, a)
    texts = doc.texts()
    for q in questions.QUESTIONS:
        assert any(t.startswith(f"{q.id}: ") for t in texts), q.id
        assert any(q.quote[:40] in t for t in texts), q.id


def test_hw6_q2_1_is_asked_at_b_3200_split_over_the_ranks(tmp_path):
    """On the CPU main job, B = 3200 ran on one rank (the B sweep) and on two (B/p = 1600)."""
    a = questions.hw6_q2_1(load("cpu", tmp_path))
    table = a.tables[0][0]
    at = table[table.B == 3200]
    assert list(at.p) == [1, 2] and list(at["B' = B/p"]) == [3200, 1600]
    assert (table["utilization (%)"] > 0).all() and (table["utilization (%)"] < 150).all()
    assert "resident p = 1" in a.text and "resident p = 2" in a.text and "at B = 3200 the epoch gets" in a.text
    four = a.tables[1][0]  # the committed four H100: B = 3200 on 1, 2 and 4 GPUs, as HW6 asks
    assert sorted(four[(four.B == 3200) & (four["data path"] == "staged")].p) == [1, 2, 4]


@pytest.mark.parametrize("kind", FOLDERS)
def test_the_rooflines_carry_every_point_and_only_measured_roofs(kind, tmp_path):
    run = load(kind, tmp_path)
    points = run.seeds_path
    for asked in ("hw6", "fa"):
        count = questions.count_of(run, asked)
        drawn = questions.roofline_plot(run, points, count)
        bw, label = questions.bandwidth(run, count)
        if drawn is None:
            assert bw is None  # no roof is invented
            continue
        fig, shown_bw, shown_label, ais = drawn
        assert (shown_bw, shown_label) == (bw, label)
        if count == "cpu":
            assert bw == run.rates["P_mpi"]
        elif count == "fa":
            assert bw == pytest.approx(2 / (1 / run.rates["P_pci"] + 1 / run.rates["P_mpi"]))
        else:  # every copy's bytes over their measured time, at one point of the run
            copies = ["t_copying images host -> device", "t_cudaMemcpyDeviceToHost", "t_cudaMemcpyHostToDevice"]
            rates = [(r.bytes_images + r.bytes_pcie) / sum(r[c] for c in copies if c in r and r[c] == r[c])
                     for _, r in run.seeds_path.iterrows() if r.bytes_images > 0]
            assert any(bw == pytest.approx(x) for x in rates)
        markers = [line for line in fig.axes[0].get_lines() if len(line.get_xdata()) == 1]
        assert len(markers) == len(points), (kind, count)
        labels = [t for t in fig.findobj(matplotlib.text.Annotation) if t.get_text().startswith("H=")]
        assert len(labels) == len(points)
        if count == "hw6":
            assert (ais < float("inf")).all()  # every staged point copies images: none is left in the strip
    assert questions.hw6_q2_2(run).figures, kind  # every run folder draws the HW6 roofline
    if kind == "one gpu":  # before, its modified roofline had no point and a 10 GB/s roof nobody measured
        assert questions.bandwidth(run, "hw6")[1] == "P_pci (every copy)"


@pytest.mark.slow  # make test-all: builds the whole PDF of the committed two-GPU main job
def test_the_report_opens_with_what_ran_and_a_conclusion_and_names_the_seeds(tmp_path, answered_once):
    folder = RESULTS_ROOT / FOLDERS["two gpus"]
    run = questions.Run.load(folder, pdf.report_sweeps(folder), tmp_path / "figures")
    doc = pdf.Document()
    pdf.title_page(doc, "perflab report: run", run, ["The machine was noisy."])
    texts = doc.texts()
    meta = json.loads((folder / "roofline.json").read_text())
    assert texts[1] == "<b>The machine was noisy.</b>"
    assert any(t.startswith("<b>Machine:</b>") and meta["gpu"] in t for t in texts)
    assert any(t.startswith("<b>What was run:</b>") and "float32" in t and "p = 1, 2" in t for t in texts)
    said = next(t for t in texts if t.startswith("<b>Conclusion:</b>"))
    assert "Two ranks" in said and "median" in said
    assert any("CME 213 (Stanford, 2024), Homework 6" in t for t in texts)
    assert pdf.build(out=answered_once.pdf, folder=folder).stat().st_size > 50_000  # not the committed report.pdf


def test_the_half_precision_answer_names_its_gpu_and_sets_bf16_against_its_floor_and_peers(tmp_path, monkeypatch):
    """HKUST FP16's answer: the GPU named from the bench's metadata, BF16's speedup over FP32, its epoch over the
    cuBLAS BF16 floor and over the fastest half-precision peer, from the committed file's rows."""
    import pandas as pd

    from perflab import results
    rows = [(1024, 3200, "perflab", 6.0), (1024, 3200, "perflab (bf16)", 1.2), (1024, 3200, "perflab (fp16)", 1.3),
            (1024, 3200, "cublas 5-gemm floor", 5.6), (2048, 12000, "cublas 5-gemm floor", 30.0),
            (1024, 3200, "cublas floor (bf16)", 0.8), (1024, 3200, "jax scan epoch (bf16)", 2.4),
            (1024, 3200, "pytorch cuda graph (bf16 autocast)", 3.0),
            (2048, 12000, "perflab", 40.0), (2048, 12000, "perflab (bf16)", 4.0),
            (2048, 12000, "cublas floor (bf16)", 2.5), (2048, 12000, "pytorch cuda graph (bf16 autocast)", 8.0)]
    path = tmp_path / questions.HALF_BENCH
    path.parent.mkdir(parents=True)
    pd.DataFrame(rows, columns=["H", "B", "peer", "epoch_ms"]).to_csv(path, index=False)
    path.with_suffix(".json").write_text(json.dumps({"gpu": "NVIDIA Example 99"}))
    monkeypatch.setattr(results, "RESULTS_ROOT", tmp_path)
    a = questions.fp16(None)
    table = a.tables[0][0].set_index("net")
    assert "one NVIDIA Example 99" in a.text and "5.0x to 10.0x faster than FP32" in a.text
    assert "run 7.0x to 12.0x faster in BF16" in a.text  # the FP32 floor over the BF16 one: 5.6 / 0.8, 30 / 2.5
    assert table.loc["784-1024-10", "BF16 / its GEMM floor"] == 1.5 and table.loc["784-2048-10", "BF16 / its GEMM floor"] == 1.6
    assert table.loc["784-1024-10", "BF16 / fastest half peer"] == 0.5  # JAX's 2.4, the faster of the two peers
    assert table.loc["784-2048-10", "BF16 / fastest half peer"] == 0.5 and "1.50x to 1.60x" in a.text
    assert ("jax scan epoch (bf16) at 1 of 2 rows, pytorch cuda graph (bf16 autocast) at 1 of 2 rows" in a.text)
    t = pd.DataFrame(rows, columns=["H", "B", "peer", "epoch_ms"])
    t[~t.peer.str.startswith(("jax", "pytorch"))].to_csv(path, index=False)
    assert "(no half-precision peer ran)" in questions.fp16(None).text
    path.unlink()
    assert isinstance(questions.fp16(None), questions.Missing)
