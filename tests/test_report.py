import json
import re

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.common.metrics import calibration_bins
from ndebench.platform.report.render.sections import latex_escape
from ndebench.platform.report.report import build_report, format_console_table, primary_metrics
from scipy import stats as sps

BASE = np.array([0.80, 0.81, 0.82, 0.83, 0.84])
# Against BASE (sample std 0.0158, so the standard error of the difference is 0.01) with Student's test:
# +0.10 gives t = 10 (p < 0.01, "**"), +0.025 gives t = 2.5 on 8 df (0.01 < p < 0.05, "*").
SHIFT = {"none": 0.0, "continuum_dropout": 0.10, "naive_dropout": 0.025}
PNG = b"\x89PNG\r\n\x1a\n"


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for regularizer, shift in SHIFT.items():
        for seed, value in enumerate(BASE + shift):
            probs = rng.dirichlet(np.ones(4), size=20)
            rows.append({"run_id": f"{regularizer}-{seed}", "study": "demo", "model": "neural_cde",
                         "dataset": "BasicMotions", "regularizer": regularizer, "seed": seed, "status": "ok",
                         "test_accuracy": value, "test_nll": 0.5 + shift, "test_ece": 0.1 - shift / 10 + 0.001 * seed,
                         "test_protocol": "mc5" if regularizer == "continuum_dropout" else "deterministic",
                         "calibration": calibration_bins(probs, rng.integers(0, 4, 20))})
    # Failed runs must be counted and shown, never enter the statistics.
    rows.append({**rows[-1], "run_id": "naive-5", "seed": 5, "status": "diverged", "test_accuracy": np.nan,
                 "test_nll": np.nan, "test_ece": np.nan, "calibration": None})
    rows.append({**rows[-2], "run_id": "naive-6", "seed": 6, "status": "error", "test_accuracy": 0.1,
                 "calibration": None})
    rows.append({**rows[0], "study": "another", "run_id": "x"})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    runs = _frame()
    return runs, build_report(runs, tmp_path_factory.mktemp("reports"), "demo", planned_seeds=[0, 1, 2, 3, 4])


def _md_rows(text: str, section: str) -> dict[str, list[str]]:
    block = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in block.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_the_synthetic_answer_is_what_the_docstring_claims():
    assert sps.ttest_ind(BASE + 0.10, BASE).pvalue < 0.01
    assert 0.01 < sps.ttest_ind(BASE + 0.025, BASE).pvalue < 0.05


def test_files_are_written_under_the_study(report):
    runs, files = report
    assert files.directory.name == "demo"
    for path in files.paths:
        assert path.exists() and path.parent == files.directory
    names = {p.name for p in files.figures}
    assert names == {"reliability_neural-cde_BasicMotions.png", "seeds_neural-cde_BasicMotions.png",
                     "forest_primary.png", "forest_nll.png", "forest_ece.png"}
    for path in files.figures:
        assert path.read_bytes()[:8] == PNG
    results = pd.read_csv(files.results_csv)
    assert len(results) == 17 and set(results["study"]) == {"demo"}
    assert "calibration" not in results.columns
    assert sorted(results["status"].value_counts().items()) == [("diverged", 1), ("error", 1), ("ok", 15)]


def test_markdown_primary_table_bold_and_markers(report):
    text = report[1].table_md.read_text()
    rows = _md_rows(text, "Primary metric")
    assert list(rows) == ["none", "continuum_dropout", "naive_dropout"]
    assert rows["none"] == ["0.820 (0.016)"]
    assert rows["continuum_dropout"] == ["**0.920 (0.016)**\\*\\*"]
    assert rows["naive_dropout"] == ["0.845 (0.016)\\* [1 diverged; 1 error]"]
    assert "n = 5 seeds per cell" in text and "Student's two-sample t-test" in text
    assert "\\*/† significantly better/worse with p < 0.05, \\*\\*/†† with p < 0.01, on unadjusted p-values" in text
    assert "continuum_dropout: mc5" in text and "none: deterministic" in text
    assert "15 ok, 1 diverged, 1 error" in text


def test_markdown_lower_is_better_tables(report):
    text = report[1].table_md.read_text()
    nll = _md_rows(text, "NLL")
    assert nll["none"] == ["**0.500 (0.000)**"]
    assert nll["continuum_dropout"] == ["0.600 (0.000)†† [zero variance]"]  # worse: a dagger, not a star
    ece = _md_rows(text, "ECE")
    assert ece["continuum_dropout"][0].startswith("**0.092 (0.002)**")


def test_across_dataset_section_of_one_dataset_says_why_it_has_no_table(report):
    across = report[1].table_md.read_text().split("## Across datasets")[1]
    assert "No table: a (model, regularizer) that shares a single dataset with none" in across
    assert "Wilcoxon p" not in across and "Wilcoxon p" not in report[1].table_tex.read_text()


def test_summary_json_holds_the_statistics(report):
    summary = json.loads(report[1].summary_json.read_text())
    assert summary["test"] == "student" and summary["alpha"] == 0.05
    assert summary["runs"] == {"ok": 15, "diverged": 1, "error": 1}
    assert summary["primary_metric"] == {"BasicMotions": "test_accuracy"}
    comparisons = {c["regularizer"]: c for c in summary["tables"][0]["comparisons"]}
    assert comparisons["naive_dropout"]["p"] == pytest.approx(sps.ttest_ind(BASE + 0.025, BASE).pvalue)
    assert comparisons["naive_dropout"]["marker"] == "*" and comparisons["continuum_dropout"]["marker"] == "**"
    cells = {c["regularizer"]: c for c in summary["tables"][0]["cells"]}
    assert (cells["naive_dropout"]["n"], cells["naive_dropout"]["n_diverged"]) == (5, 1)
    assert summary["across_datasets"]["correction"] == "holm"
    pooled = {c["regularizer"]: c for c in summary["calibration"]}
    assert pooled["naive_dropout"]["n_runs"] == 5 and sum(pooled["none"]["bins"]["count"]) == 100


def test_latex_escaping_and_structure(report):
    assert latex_escape("continuum_dropout") == r"continuum\_dropout"
    assert latex_escape("a&b%c$d#e{f}~^\\") == (r"a\&b\%c\$d\#e\{f\}\textasciitilde{}\textasciicircum{}"
                                               r"\textbackslash{}")
    tex = report[1].table_tex.read_text()
    full = (report[1].directory / "table_full.tex").read_text()
    assert r"\textbf{0.920 (0.016)}$^{**" in tex and r"0.845 (0.016)$^{*" in tex
    # The registries' display names; a name no registry knows (naive_dropout) as it is, escaped.
    assert "Continuum Dropout" in tex and "Neural CDE" in tex and r"naive\_dropout" in tex
    assert r"continuum\_dropout" not in tex + full and r"neural\_cde" not in tex + full
    for text in (tex, full):
        body = "\n".join(line for line in text.splitlines() if not line.startswith("%"))  # the comment names files
        assert not re.search(r"(?<!\\)_", body.replace(r"\_", "")), "unescaped underscore"
        depth = 0
        for ch in re.sub(r"\\[{}]", "", text):
            depth += {"{": 1, "}": -1}.get(ch, 0)
            assert depth >= 0
        assert depth == 0
        assert r"\resizebox" not in text
    # table.tex: primary, NLL and ECE in the paper's style; table_full.tex adds the tests against none of each
    # (no across-dataset table over one dataset).
    assert tex.count(r"\begin{table") == tex.count(r"\end{table") == 3
    assert full.count(r"\begin{table") == full.count(r"\end{table") >= 6 and "Hedges' g" in full
    for command in (r"\toprule", r"\midrule", r"\bottomrule"):
        assert tex.count(command) == 3
    for line in tex.splitlines():
        if line.startswith(("None &", "Continuum Dropout &", r"naive\_dropout &")):
            assert len(re.findall(r"(?<!\\)&", line)) == 1 and line.endswith(r"\\")


def test_paired_and_welch_are_named(tmp_path):
    runs = _frame()
    for test, words in (("paired", "paired t-test"), ("welch", "Welch's")):
        files = build_report(runs, tmp_path, "demo", test=test)
        assert words in files.table_md.read_text() and words in files.table_tex.read_text()
        assert json.loads(files.summary_json.read_text())["test"] == test


def test_primary_metric_per_dataset():
    runs = pd.DataFrame({"dataset": ["bin", "bin", "c100", "plain"], "test_accuracy": [0.9, 0.8, 0.5, 0.7],
                         "test_auroc": [0.95, np.nan, np.nan, np.nan],
                         "test_top5_accuracy": [np.nan, np.nan, 0.8, np.nan]})
    assert primary_metrics(runs) == {"bin": "test_auroc", "c100": "test_top5_accuracy", "plain": "test_accuracy"}


def test_primary_metric_is_the_registered_one_where_runs_carry_the_tag():
    # "bin" reports AUROC but its registration names accuracy, and "c100" logged no top-5 value: the tag wins
    # both ways. "old" was recorded before the tag existed, so its metric is still inferred from the columns.
    runs = pd.DataFrame({"dataset": ["bin", "bin", "c100", "old"],
                         "metric": ["accuracy", "accuracy", "top5_accuracy", ""],
                         "test_accuracy": [0.9, 0.8, 0.5, 0.7], "test_auroc": [0.95, 0.9, np.nan, 0.8],
                         "test_top5_accuracy": [np.nan, np.nan, np.nan, np.nan]})
    assert primary_metrics(runs) == {"bin": "test_accuracy", "c100": "test_top5_accuracy", "old": "test_auroc"}
    with pytest.raises(ValueError, match=r"dataset 'bin' are tagged with different primary metrics "
                                         r"\['accuracy', 'auroc'\]"):
        primary_metrics(runs.assign(metric=["accuracy", "auroc", "top5_accuracy", ""]))
    with pytest.raises(ValueError, match="unknown metric 'f1'"):
        primary_metrics(runs.assign(metric=["f1", "f1", "top5_accuracy", ""]))


def test_a_tagged_metric_no_run_recorded_heads_its_column_with_the_failures(tmp_path):
    # Every Sepsis run diverged, so no run logged test_auroc: the column still says AUROC and shows why it is empty.
    runs = _frame().query("study == 'demo'").assign(metric="accuracy")
    sepsis = runs[runs["status"] == "ok"].assign(dataset="Sepsis", metric="auroc", status="diverged",
                                                 test_accuracy=np.nan, test_nll=np.nan, test_ece=np.nan)
    files = build_report(pd.concat([runs, sepsis]), tmp_path, "demo", planned_seeds=[0, 1, 2, 3, 4])
    rows = _md_rows(files.table_md.read_text(), "Primary metric")
    assert json.loads(files.summary_json.read_text())["primary_metric"] == {"BasicMotions": "test_accuracy",
                                                                            "Sepsis": "test_auroc"}
    assert "neural_cde / Sepsis (AUROC)" in files.table_md.read_text()
    assert rows["none"] == ["0.820 (0.016)", "– [n=0; 5 diverged]"]


def test_explicit_metric_and_bad_arguments(tmp_path):
    runs = _frame()
    files = build_report(runs, tmp_path, "demo", metric="test_nll")
    assert "Test NLL" in files.table_md.read_text().split("## ", 2)[1]
    with pytest.raises(ValueError, match="metric 'test_auroc' is not among the runs' metrics: test_accuracy"):
        build_report(runs, tmp_path, "demo", metric="test_auroc")
    with pytest.raises(ValueError, match="unknown test 'ttest'"):
        build_report(runs, tmp_path, "demo", test="ttest")
    with pytest.raises(ValueError,
                       match=r"no evaluate-phase runs of study 'nope'; studies in the runs: \['another', 'demo'\]"):
        build_report(runs, tmp_path, "nope")
    with pytest.raises(ValueError, match=r"lack the columns \['seed'\]"):
        build_report(runs.drop(columns="seed"), tmp_path, "demo")


def test_console_table_has_a_p_value_for_every_regularizer():
    text = format_console_table(_frame().query("study == 'demo'"))
    lines = {line.split()[2]: line for line in text.splitlines()[1:] if line.startswith("neural_cde")}
    assert set(lines) == {"none", "continuum_dropout", "naive_dropout"}
    assert "baseline" in lines["none"]
    p = sps.ttest_ind(BASE + 0.025, BASE).pvalue
    assert f"{p:.4f}*" in lines["naive_dropout"] and "1 diverged, 1 error" in lines["naive_dropout"]
    assert "**" in lines["continuum_dropout"] and "better" in lines["continuum_dropout"]
    assert "Student's two-sample t-test" in text


def test_the_console_says_better_or_worse_only_where_the_test_found_it():
    runs = _frame().query("study == 'demo'")
    text = format_console_table(runs, alpha=1e-6)  # no marker at this alpha: each difference is only a sign
    lines = {line.split()[2]: line for line in text.splitlines()[1:] if line.startswith("neural_cde")}
    assert lines["continuum_dropout"].rstrip().endswith("higher (n.s.)")
    assert not any("better" in line or "worse" in line for line in lines.values())
    lower = runs.assign(test_accuracy=runs["test_accuracy"].where(runs["regularizer"] == "none",
                                                                  1 - runs["test_accuracy"]))
    lines = {line.split()[2]: line for line in format_console_table(lower).splitlines()[1:]
             if line.startswith("neural_cde")}
    assert lines["continuum_dropout"].rstrip().endswith("worse") and "††" in lines["continuum_dropout"]


def test_model_column_groups_and_critical_difference_figure(tmp_path):
    rows = []
    for model in ("neural_cde", "neural_ode"):
        for i, dataset in enumerate(("ArrowHead", "BasicMotions", "GunPoint")):
            for regularizer, shift in SHIFT.items():
                for seed, value in enumerate(BASE + shift + 0.01 * i):
                    rows.append({"model": model, "dataset": dataset, "regularizer": regularizer, "seed": seed,
                                 "status": "ok", "test_accuracy": value})
    files = build_report(pd.DataFrame(rows), tmp_path, "grid")
    tex = files.table_tex.read_text()
    # Six datasets are wider than a page at 8 pt: one table per model, each grouped under its display name.
    assert r"& \multicolumn{3}{c}{Neural CDE} \\" in tex and r"& \multicolumn{3}{c}{Neural ODE} \\" in tex
    assert tex.count(r"\cmidrule(lr){2-4}") == 2 and "(1/2)" in tex and "(2/2)" in tex
    assert not any(p.name.startswith("cd_") for p in files.figures)
    assert ("neural_cde: no critical-difference diagram: 3 dataset(s) with every method, fewer than the 6"
            in files.table_md.read_text())
    pct = np.mean([100 * 0.10 / (BASE.mean() + 0.01 * i) for i in range(3)])
    assert (f"| neural_cde | continuum_dropout | 3 | +0.100 (0.000) | {pct:+.2f} | 3/3 | 0.2500 |"
            in files.table_md.read_text())


# Partial failures (issue 14): running, stopped, diverged and errored runs never break a report.

def _partial_frame() -> pd.DataFrame:
    rows = []
    for regularizer, shift in SHIFT.items():
        for seed, value in enumerate(BASE + shift):
            rows.append({"run_id": f"{regularizer}-{seed}", "study": "live", "model": "neural_cde",
                         "dataset": "BasicMotions", "regularizer": regularizer, "seed": seed, "status": "ok",
                         "message": "", "test_accuracy": value})
    frame = pd.DataFrame(rows)
    frame.loc[frame["run_id"] == "continuum_dropout-4", ["status", "test_accuracy"]] = ["running", np.nan]
    frame.loc[frame["run_id"] == "naive_dropout-3", ["status", "test_accuracy"]] = ["stopped", np.nan]
    return frame[frame["run_id"] != "none-4"].reset_index(drop=True)


def test_report_during_a_sweep_tables_what_finished_and_names_the_gaps(tmp_path):
    runs = _partial_frame()
    files = build_report(runs, tmp_path, "live", planned_seeds=[0, 1, 2, 3, 4])
    text = files.table_md.read_text()
    assert "14 evaluate-phase runs: 12 ok, 0 diverged, 0 error, 1 running, 1 stopped." in text
    rows = _md_rows(text, "Primary metric")
    assert rows["none"] == ["0.815 (0.013) [no run for seed 4]"]
    assert rows["continuum_dropout"][0].endswith("[1 running (seed 4)]")
    assert rows["naive_dropout"][0].endswith("[1 stopped (seed 3)]")
    summary = json.loads(files.summary_json.read_text())
    assert summary["runs"] == {"ok": 12, "diverged": 0, "error": 0, "running": 1, "stopped": 1}
    gaps = {c["regularizer"]: c for c in summary["incomplete_cells"]}
    assert gaps["none"]["missing_seeds"] == [4] and gaps["continuum_dropout"]["running_seeds"] == [4]
    assert len(pd.read_csv(files.results_csv)) == 14
    console = format_console_table(runs)
    assert "1 running" in console and "neural_cde" in console


def test_planned_seeds_default_to_the_seeds_recorded_in_the_study(tmp_path):
    files = build_report(_partial_frame(), tmp_path, "live")
    assert "[no run for seed 4]" in _md_rows(files.table_md.read_text(), "Primary metric")["none"][0]


def test_a_study_whose_runs_all_failed_gets_a_report_with_counts_and_messages(tmp_path):
    runs = pd.DataFrame([
        {"run_id": f"r{seed}-{reg}", "study": "dead", "model": "neural_cde", "dataset": "synthetic",
         "regularizer": reg, "seed": seed, "status": "diverged" if reg == "none" else "error",
         "message": "loss is nan at epoch 2" if reg == "none" else "WorkerCrashedError: the worker died"}
        for seed in range(3) for reg in ("none", "continuum_dropout")
    ] + [{"run_id": "r", "study": "dead", "model": "neural_cde", "dataset": "synthetic",
          "regularizer": "none", "seed": 3, "status": "running", "message": ""}])
    files = build_report(runs, tmp_path, "dead", planned_seeds=[0, 1, 2, 3, 4])
    text = files.table_md.read_text()
    assert "7 evaluate-phase runs: 0 ok, 3 diverged, 3 error, 1 running." in text
    assert "No evaluate-phase run finished ok with a test metric" in text
    assert "neural_cde / synthetic / none, seed 0: diverged: loss is nan at epoch 2" in text
    assert "seed 2: error: WorkerCrashedError: the worker died" in text
    assert "neural_cde / synthetic / continuum_dropout: no run for seed 3, 4" in text
    summary = json.loads(files.summary_json.read_text())
    assert summary["results"] is False and summary["runs"] == {"diverged": 3, "error": 3, "running": 1}
    assert len(summary["failed"]) == 7 and files.figures == ()
    console = format_console_table(runs)
    assert console.splitlines()[1] == "No evaluate-phase run finished ok with a test metric:"
    assert "seed 0: error: WorkerCrashedError: the worker died" in console
