"""The final assignment's Problem 1 (perflab.workbook.problem1): each question's experiment on a few thousand MNIST
samples, what it finds, the files it resumes from, and the answers the report takes from them."""
import pandas as pd
import pytest

from perflab.train import model
from perflab.workbook import problem1 as p1

TINY = p1.Settings(N=1600, test_size=200, batch=100, check_N=400, check_hidden=16, drift_rates=(0.01, 10.0),
                   drift_hidden=(16,), drift_epochs=4, rates=(0.001, 1.0, 1000.0), rates_hidden=16, rates_epochs=5,
                   hidden=(8, 16), long_hidden=16, max_epochs=30, patience=3, validation=400)


def quiet(*_):
    pass


def run(folder, parts, log=quiet, **changes):
    return p1.run(folder, None, settings=TINY, parts=parts, progress=False, log=log, record_parts=True, **changes)


def test_bad_input_is_refused_naming_the_value_and_what_is_allowed_and_nothing_is_written(tmp_path, capsys):
    folder = tmp_path / "run"
    for changes, message in ((dict(rates=[0.1, 0.0]), r"rates must be a list of learning rates > 0.*0\.0 in \[0\.1, 0\.0\]"),
                             (dict(drift_rates=[-0.5]), r"drift_rates .*> 0.*-0\.5"),
                             (dict(hidden=[64, 0]), r"hidden must be a list of hidden sizes >= 1.*0 in \[64, 0\]"),
                             (dict(hidden=[]), r"hidden must be a non-empty list"),
                             (dict(epochs=3), r"unknown setting 'epochs'; the settings are dataset, N, ")):
        with pytest.raises(p1.Problem1Error, match=message):
            p1.run(folder, 60, progress=False, log=quiet, **changes)
    with pytest.raises(p1.Problem1Error, match=r"more than 0 minutes, got 0 min"):
        p1.run(folder, 0, progress=False, log=quiet)
    with pytest.raises(p1.Problem1Error, match=r"budget_minutes must be a number of minutes > 0, got 'soon'"):
        p1.budget_seconds("soon")
    with pytest.raises(p1.Problem1Error, match=r"unknown part 'plateau'; the parts are check, drift, rates, hidden"):
        p1.run(folder, 60, parts=["drift", "plateau"], progress=False, log=quiet)
    assert not folder.exists() and issubclass(p1.Problem1Error, ValueError)
    with pytest.raises(SystemExit) as stopped:
        p1.main(["--budget-minutes", "0", "--folder", str(folder)])
    assert stopped.value.code == 2 and "more than 0 minutes" in capsys.readouterr().err and not folder.exists()


def test_the_command_line_explains_itself(capsys):
    with pytest.raises(SystemExit) as stopped:
        p1.main(["--help"])
    said = capsys.readouterr().out
    assert stopped.value.code == 0
    assert all(w in said for w in ("--budget-minutes", "--full", "--folder", "--parts", "Q1.1", "Q1.4", "problem1_<part>.csv"))


def test_an_empty_folder_answers_each_question_with_the_command_that_would(tmp_path):
    from perflab.report.answer import Missing
    got = p1.answers(tmp_path)
    assert list(got) == ["FA Q1.1", "FA Q1.2", "FA Q1.3", "FA Q1.4"] and all(isinstance(a, Missing) for a in got.values())
    assert "--parts drift" in got["FA Q1.2"].command and "problem1_drift.csv" in got["FA Q1.2"].why


@pytest.mark.mpi
def test_the_seeds_check_passes_in_both_precisions_on_several_ranks(tmp_path):
    run(tmp_path, ["check"])
    t = pd.read_csv(tmp_path / "problem1_check.csv")
    assert list(t["dtype"]) == ["float32", "float64"] and t.passed.all() and (t.ranks >= 2).all()
    assert t.max_rel_error[0] < 1e-5 and t.max_rel_error[1] < 1e-12
    answer = p1.answers(tmp_path)["FA Q1.1"]
    assert "Both precisions pass" in answer.text and "MPI rank" in answer.text and answer.sources == ["problem1_check.csv"]
    assert list(answer.tables[0][0].columns[:3]) == ["dtype", "way", "W1"]


def test_the_cpu_stand_in_for_the_gpu_sums_the_same_gradient_in_another_order():
    for dtype, most in (("float32", 1e-5), ("float64", 1e-13)):
        cfg = p1.config(TINY, dtype=dtype, hidden_sizes=(16,))
        train = p1.sets_of(cfg)[0]
        params = model.init_params(cfg.layer_sizes, dtype, 0)
        index = slice(0, 100)
        exact = model.backward(params, model.forward(params, train.X[:, index]), train.y[index], 100)
        got = p1.VirtualRanks(cfg, params, train.X, train.y).data_gradient(index)
        assert 0 < p1.worst(got, exact)["drift"] < most


def test_the_weights_drift_apart_step_by_step_at_a_large_learning_rate_but_not_the_precision(tmp_path):
    run(tmp_path, ["drift"])
    s = p1.drift_summary(pd.read_csv(tmp_path / "problem1_drift.csv"))
    assert len(s) == 4 and set(s["dtype"]) == {"float32", "float64"}
    big = s[(s["dtype"] == "float32") & (s.learning_rate == 10)].iloc[0]
    small = s[(s["dtype"] == "float32") & (s.learning_rate == 0.01)].iloc[0]
    assert 0 < big.gradient_drift < 1e-5  # one batch's gradient, reordered: rounding
    assert big.at_end > 1000 * big.after_1_step and big.at_end > 1e-5  # grown past the check's tolerance
    assert small.at_end < 1e-5 and small.at_end < 10 * small.after_1_step
    assert (s.precision_reference - s.precision_device).abs().max() <= 0.1
    answer = p1.answers(tmp_path)["FA Q1.2"]
    assert "by step" in answer.text and "chaotic" in answer.text and answer.figures[0].exists()


def test_the_learning_rate_sweep_names_the_fastest_rate_and_the_one_that_diverges(tmp_path):
    run(tmp_path, ["rates"])
    s = p1.rates_summary(pd.read_csv(tmp_path / "problem1_rates.csv"))
    assert p1.best_rate(s) == 1.0
    assert s.set_index("learning_rate").diverged.to_dict() == {0.001: False, 1.0: False, 1000.0: True}
    answer = p1.answers(tmp_path)["FA Q1.3"]
    assert "at lr = 1, test precision" in answer.text and "lr = 1000 diverged in epoch 1" in answer.text
    assert answer.figures[0].with_suffix(".txt").read_text().startswith("Mean training loss")


def test_a_rerun_skips_the_runs_done_and_runs_only_the_new_ones(tmp_path):
    said = []
    run(tmp_path, ["rates"], log=said.append)
    path = tmp_path / "problem1_rates.csv"
    before = path.read_text()
    said.clear()
    run(tmp_path, ["rates"], log=said.append)
    assert path.read_text() == before and "problem1_rates.csv: 3 run(s) done before, 0 to go" in said
    run(tmp_path, ["rates"], log=said.append, rates=(0.001, 1.0, 1000.0, 0.1))
    assert path.read_text().startswith(before) and "problem1_rates.csv: 3 run(s) done before, 1 to go" in said
    assert set(pd.read_csv(path).learning_rate) == {0.001, 1.0, 1000.0, 0.1}
    timed = pd.read_csv(tmp_path / "mainjob_parts.csv")  # the part's time where it ran whole, not where resumed
    assert list(timed.part) == ["Problem 1 rates"] and timed.measured_s.iloc[0] > 0 and timed.estimated_s.isna().all()


def test_each_hidden_size_trains_to_its_plateau_on_a_validation_set_carved_from_the_training_set(tmp_path):
    run(tmp_path, ["hidden"])
    t = pd.read_csv(tmp_path / "problem1_hidden.csv")
    assert (t.N == 1200).all() and (t.V == 400).all() and list(t.H.unique()) == [16, 8]  # the long run first
    s = p1.hidden_summary(t)
    long = s[s.H == 16].iloc[0]
    assert long.stopped == "plateau" and long.epochs < 30 and long.epochs - long.best_epoch == 3
    assert p1.recommended(s) in (8, 16)
    answer = p1.answers(tmp_path)["FA Q1.4"]
    assert "stopped at epoch" in answer.text and f"Recommended: H = {p1.recommended(s)}" in answer.text
    assert len(answer.figures) == 2 and all(f.exists() for f in answer.figures)


def test_the_budget_takes_the_largest_version_that_fits_and_says_what_it_leaves_out():
    costs = p1.Costs(numpy=(1e-6, 1e-5), float64=2.0, device=(1e-6, 1e-5), device_float64=2.0)
    sums = {name: sum(p1.estimate(s, costs, "numpy").values()) for name, s in p1.TIERS}
    assert sums["full"] > sums["large"] > sums["medium"] > sums["small"]
    name, s, parts, lines = p1.choose((sums["medium"] + sums["large"]) / 2, costs, "numpy", p1.PARTS, {}, False)
    said = "\n".join(lines)
    assert name == "medium" and parts == p1.estimate(s, costs, "numpy") and "N 60000 -> 12000" in said
    assert sum(parts.values()) == sums["medium"]
    assert f"the full version would take about {p1.minutes(sums['full'])}" in said
    name, _, _, lines = p1.choose(1.0, costs, "numpy", p1.PARTS, {}, False)
    assert name == "small" and any("longer than the budget" in line for line in lines)
    assert p1.choose(None, costs, "numpy", p1.PARTS, {}, True)[0] == "full"
    assert p1.choose(1e9, costs, "numpy", ["rates"], {"rates": [0.5, 5]}, False)[1].rates == (0.5, 5.0)


def test_the_command_line_times_this_machine_runs_what_fits_and_prints_the_answers(tmp_path, capsys):
    assert p1.main(["--budget-minutes", "0.01", "--parts", "rates", "--rates", "0.1", "1", "--folder", str(tmp_path),
                    "--no-progress", "--backend", "numpy"]) == 0
    said = capsys.readouterr().out
    assert "Problem 1 on numpy: the small version" in said and "the full version would take about" in said
    assert "FA Q1.3: After" in said and "FA Q1.1: not run" in said
    assert (tmp_path / "problem1_rates.csv").exists() and (tmp_path / "problem1_rates.json").exists()
    assert not (tmp_path / "mainjob_parts.csv").exists()  # Problem 1 alone: no main job's parts to time
    planned = p1.plan(0.6, backend="numpy", parts=["rates", "check"], rates=[0.1, 1])
    assert p1.estimate_left(planned, tmp_path) == pytest.approx(planned["estimates"]["check"])  # rates: begun here
