"""The paper's further analyses on a crafted study: p x m sensitivity, per-rate tables, compute time, the
extended summary, significance markers with corrections, the Friedman gate and report.html. Every number is
recomputed here with numpy / scipy from the crafted frame."""
import base64
import re
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from fakes import CHANNELS, DATASETS, GRID, MODELS, RATES, log_study_frame, study_frame
from ndebench.platform.cli.main import main
from ndebench.platform.record import tracking
from ndebench.platform.report.render.trajectories import sample_trajectories
from ndebench.platform.report.statistics.significance import friedman_gate, mark
from ndebench.platform.report.timing import time_sections
from scipy import stats as sps

PNG, PDF = b"\x89PNG\r\n\x1a\n", b"%PDF"


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    root = tmp_path_factory.mktemp("crafted")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    frame = study_frame()
    log_study_frame(uri, "crafted", frame)
    assert main(["report", "--study", "crafted", "--tracking-uri", uri, "--out", str(root / "out"),
                 "--correction", "holm"]) == 0
    return frame, root / "out" / "crafted", uri


def _md_table(text: str, title: str) -> dict[str, list[str]]:
    block = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in block.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def _cell(frame, model, dataset, **where):
    part = frame[(frame["model"] == model) & (frame["dataset"] == dataset)]
    for key, value in where.items():
        part = part[part[key] == value]
    return part


def test_p_by_m_table_means_stds_and_red_cells(crafted):
    frame, out, _ = crafted
    text = (out / "sensitivity.md").read_text()
    for model in MODELS:
        for dataset in DATASETS:
            rows = _md_table(text, f"continuum_dropout: p x m on {model} / {dataset}")
            base = _cell(frame, model, dataset, regularizer="none")["test_accuracy"].to_numpy()
            for (p, m) in GRID:
                values = _cell(frame, model, dataset, p=p, m=m)["test_accuracy"].to_numpy()
                cell = rows[f"{p:g}"][[5.0, 50.0].index(m)]
                assert f"{np.mean(values):.3f} ({np.std(values, ddof=1):.3f})" in cell
                red = np.mean(values) < np.mean(base) - np.std(base, ddof=1)
                assert cell.endswith("▼") == red
            assert rows["0.5"][0].endswith("▼")  # the crafted (0.5, 5) variant is 0.1 below none
            png = out / f"sensitivity_continuum-dropout_{model.replace('_', '-')}_{dataset}.png"
            assert png.read_bytes()[:8] == PNG and png.with_suffix(".pdf").read_bytes()[:4] == PDF
    # In LaTeX the cell carries the down arrow (the paper's red), not its row label.
    row = next(line for line in (out / "sensitivity.tex").read_text().splitlines() if line.startswith("0.5 & "))
    assert "\\downarrow" in row.split(" & ")[1] and "\\downarrow" not in row.split(" & ")[0]


def test_jump_diffusion_per_rate_table(crafted):
    frame, out, _ = crafted
    rows = _md_table((out / "sensitivity.md").read_text(), "jump_diffusion: rate on GunPoint")
    assert list(rows) == ["none", *[f"{r:g}" for r in RATES]]
    for j, model in enumerate(MODELS):
        for rate in RATES:
            values = _cell(frame, model, "GunPoint", rate=rate)["test_accuracy"].to_numpy()
            assert rows[f"{rate:g}"][j].strip("*").startswith(f"{np.mean(values):.3f} ({np.std(values, ddof=1):.3f})")


def test_compute_time_table_and_ratio(crafted):
    frame, out, _ = crafted
    rows = _md_table((out / "timing.md").read_text(), "Compute time on BasicMotions")
    for j, model in enumerate(MODELS):
        base = _cell(frame, model, "BasicMotions", regularizer="none")["train_time_s"].to_numpy()
        assert rows["none"][2 + j] == f"{np.mean(base):.3f} ({np.std(base, ddof=1):.3f})"
        cd = _cell(frame, model, "BasicMotions", p=0.5, m=50.0)["train_time_s"].to_numpy()
        assert rows["continuum_dropout[p=0.5,m=50]"][:2] == ["0.5", "50"]
        assert rows["continuum_dropout[p=0.5,m=50]"][2 + j] == (
            f"{np.mean(cd):.3f} ({np.std(cd, ddof=1):.3f}) x{np.mean(cd) / np.mean(base):.3f}")
    assert "from train_time_s: the training pass of each epoch only" in (out / "timing.md").read_text()


def test_compute_time_names_each_models_own_p_and_m_for_the_validation_selected_cell():
    """The tuned ``continuum_dropout`` cell picked (0.1, 50) for one model and (0.5, 5) for the other on A, and
    (0.1, 5) for both on B: A's row says "per model" and names each cell's own point, B's row gives (0.1, 5)."""
    points = {("ode", "A"): (0.1, 50.0), ("cde", "A"): (0.5, 5.0), ("ode", "B"): (0.1, 5.0), ("cde", "B"): (0.1, 5.0)}
    rows = []
    for (model, dataset), (p, m) in points.items():
        for seed, seconds in enumerate((1.0, 2.0, 3.0)):
            common = {"model": model, "dataset": dataset, "seed": seed, "status": "ok", "variant": ""}
            rows.append({**common, "regularizer": "none", "label": "none", "p": np.nan, "m": np.nan,
                         "train_time_s": seconds})
            rows.append({**common, "regularizer": "continuum_dropout", "label": "continuum_dropout", "p": p, "m": m,
                         "train_time_s": 2 * seconds})
    sections = {s.title: s for s in time_sections(pd.DataFrame(rows))}
    tuned = {section: next(r for r in sections[f"Compute time on {section}"].rows if r[0].text == "continuum_dropout")
             for section in ("A", "B")}
    assert sections["Compute time on A"].header == ["regularizer", "p", "m", "cde", "ode"]
    assert [c.text for c in tuned["A"]] == ["continuum_dropout", "per model", "per model",
                                            "4.000 (2.000) x2.000 at p=0.5, m=5", "4.000 (2.000) x2.000 at p=0.1, m=50"]
    assert [c.text for c in tuned["B"]] == ["continuum_dropout", "0.1", "5", "4.000 (2.000) x2.000",
                                            "4.000 (2.000) x2.000"]


def _summary_expectation(frame, model, label, datasets):
    base = np.array([_cell(frame, model, d, label="none")["test_accuracy"].mean() for d in datasets])
    reg = np.array([_cell(frame, model, d, label=label)["test_accuracy"].mean() for d in datasets])
    base_std = np.mean([_cell(frame, model, d, label="none")["test_accuracy"].std(ddof=1) for d in datasets])
    d = reg - base
    pct = 100 * d / np.abs(base)
    return [f"{base.mean():.3f} ({base_std:.3f})", f"{reg.mean():.3f}",
            f"{d.mean():+.3f} ± {sps.sem(d):.3f}", f"{pct.mean():+.2f} ± {sps.sem(pct):.2f}"]


def test_extended_summary_and_univariate_split(crafted, tmp_path):
    frame, out, _ = crafted
    text = (out / "summary_extended.md").read_text()
    label = "continuum_dropout[p=0.1,m=50]"
    for title, datasets in (("all (3 datasets)", DATASETS), ("univariate (2 datasets)", ["ArrowHead", "GunPoint"])):
        block = text.split(f"## Extended summary: {title}\n", 1)[1].split("\n## ", 1)[0]
        line = next(ln for ln in block.splitlines() if ln.startswith(f"| neural_cde | {label} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        base, reg, improvement, pct = _summary_expectation(frame, "neural_cde", label, datasets)
        assert cells[2] == str(len(datasets)) and cells[3] == base and cells[4].startswith(reg)
        assert cells[5] == improvement and cells[6] == pct
    # ArrowHead and GunPoint are univariate in the UEA table, BasicMotions has 6 channels.
    assert CHANNELS == {"ArrowHead": 1, "BasicMotions": 6, "GunPoint": 1}
    assert "## Extended summary: multivariate (1 datasets)" in text


def test_markers_use_the_corrected_p_values_and_daggers_for_worse(crafted):
    frame, out, _ = crafted
    text = (out / "table.md").read_text()
    rows = _md_table(text, "Primary metric")
    labels = [lab for lab in sorted(set(frame["label"])) if lab != "none"]
    for j, model in enumerate(MODELS):
        dataset = "ArrowHead"
        base = _cell(frame, model, dataset, label="none")["test_accuracy"]
        p = np.array([sps.ttest_ind(_cell(frame, model, dataset, label=lab)["test_accuracy"], base).pvalue
                      for lab in labels])
        # Holm over the table's family: all (model, dataset, regularizer) comparisons.
        family = np.array([sps.ttest_ind(_cell(frame, m, d, label=lab)["test_accuracy"],
                                         _cell(frame, m, d, label="none")["test_accuracy"]).pvalue
                           for m in MODELS for d in DATASETS for lab in labels])
        order = np.argsort(family)
        holm = np.minimum(1, np.maximum.accumulate((len(family) - np.arange(len(family))) * family[order]))
        adjusted = dict(zip(map(float, family[order]), holm, strict=True))
        column = 3 * j + DATASETS.index(dataset)
        for lab, raw in zip(labels, p, strict=True):
            q = adjusted[float(raw)]
            worse = _cell(frame, model, dataset, label=lab)["test_accuracy"].mean() < base.mean()
            symbol = ("†" if worse else "\\*") * int((q < 0.05) + (q < 0.01))
            cell = rows[lab][column].split(" [")[0]
            assert cell.endswith(symbol)
            assert not re.search(r"(\\\*|†)$", cell.removesuffix(symbol) if symbol else cell)
    assert "Holm-adjusted p-values (family-wise error over the 36 comparisons of this table)" in text


@pytest.mark.parametrize("correction,adjusted", [
    ("none", [0.001, 0.02, 0.04, 0.5]),
    ("holm", [0.004, 0.06, 0.08, 0.5]),  # sorted p times (k - i), running maximum
    ("bh", [0.004, 0.04, 0.05333333, 0.5]),  # sorted p times k / rank, running minimum from the top
])
def test_corrections_and_direction_markers(correction, adjusted):
    comparisons = pd.DataFrame({"p": [0.001, 0.02, 0.04, 0.5], "direction": ["worse", "better", "better", "worse"]})
    marked = mark(comparisons, 0.05, correction)
    assert np.allclose(marked["p_adjusted"], adjusted)
    expected = [("†" if d == "worse" else "*") * int((q < 0.05) + (q < 0.01))
                for q, d in zip(adjusted, comparisons["direction"], strict=True)]
    assert list(marked["marker"]) == expected
    assert marked["marker"][0] == "††"


def test_friedman_gate_matches_scipy_and_needs_six_datasets():
    rng = np.random.default_rng(1)
    means = pd.DataFrame(rng.normal(0, 0.01, (3, 6)) + np.array([[0.0], [0.05], [0.1]]),
                         index=["a", "b", "c"], columns=[f"d{i}" for i in range(6)])
    draw, sentence = friedman_gate(means, 0.05)
    expected = sps.friedmanchisquare(*means.to_numpy())
    assert draw and f"p = {expected.pvalue:.4g}" in sentence and f"chi2 = {expected.statistic:.3f}" in sentence
    draw, sentence = friedman_gate(means.iloc[:, :5], 0.05)
    assert not draw and "5 dataset(s)" in sentence
    assert not friedman_gate(means.iloc[:2], 0.05)[0]


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables, self.images, self.cells, self.links, self._in_cell = 0, [], [], [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tables += tag == "table"
        if tag == "img":
            self.images.append(attrs["src"])
        if tag == "a":
            self.links.append(attrs["href"])
        if tag == "td":
            self._in_cell = True
            self.cells.append("")

    def handle_endtag(self, tag):
        self._in_cell = self._in_cell and tag != "td"

    def handle_data(self, data):
        if self._in_cell:
            self.cells[-1] += data


def test_report_html_is_self_contained(crafted):
    frame, out, uri = crafted
    text = (out / "report.html").read_text()
    page = _Page()
    page.feed(text)
    sections = text.count("<section>")
    # Sections: 2 main tables, the tests against none of each, the across-dataset comparison (as in table.md),
    # 6 p x m, 3 per-rate, 3 time, 3 summaries, the runs, and the figures (no table).
    assert page.tables == sections - 1 == 2 + 2 + 1 + 6 + 3 + 3 + 3 + 1
    assert not re.search(r'src="(?!data:)', text) and "<link" not in text  # nothing loaded from elsewhere
    assert len(page.images) >= 6 + 3 + 6
    for src in page.images:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG
    values = _cell(frame, "neural_ode", "GunPoint", p=0.1, m=5.0)["test_accuracy"].to_numpy()
    assert f"{np.mean(values):.3f} ({np.std(values, ddof=1):.3f})" in page.cells
    run_ids = {r.info.run_id for r in tracking.search(uri, "crafted", "tags.`ndebench.phase` = 'evaluate'")}
    linked = {href.rsplit("/", 1)[1].removesuffix("?workflowType=machine_learning") for href in page.links}
    assert run_ids == linked and f"{len(frame)} evaluate-phase runs: {len(frame)} ok" in text
    # Logged beside the other report files as artifacts of the study's report run.
    report_run = tracking.search(uri, "crafted", "tags.`ndebench.phase` = 'report'")[0].info.run_id
    names = {a.path for a in tracking.client(uri).list_artifacts(report_run, "report")}
    assert {"report/report.html", "report/sensitivity.md", "report/timing.md", "report/summary_extended.md"} <= names
    assert any(n.endswith(".pdf") for n in names)
    if shutil.which("chromium"):  # Debian's package, where installed: the page also renders in a real browser
        dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--dump-dom", (out / "report.html").as_uri()],
                             capture_output=True, text=True, timeout=120).stdout
        assert dom.count("<table") == page.tables and dom.count("<img") == len(page.images)


def test_trajectories_indicator_has_the_dropout_rate_and_the_latent_pauses():
    n = 4000
    tr = sample_trajectories(0.3, 10.0, 1.0, n_paths=n, seed=0, points=21)
    inactive = 1.0 - tr.indicator[:, -1].mean()
    assert abs(inactive - 0.3) < 4 * np.sqrt(0.3 * 0.7 / n)  # P(I(T) = 0) = p, four binomial SEs
    # The latent is frozen exactly where the indicator is 0 on a whole grid step.
    small = sample_trajectories(0.5, 5.0, 1.0, n_paths=2, seed=3, points=2001)
    both_off = (small.indicator[:, :-1] == 0) & (small.indicator[:, 1:] == 0)
    assert both_off.any()
    assert np.allclose(np.diff(small.latent, axis=1)[both_off], 0.0)
    assert not np.allclose(np.diff(small.latent, axis=1)[~both_off & (small.indicator[:, :-1] == 1)], 0.0)


def test_rates_plot_command_writes_png_and_pdf(tmp_path, capsys):
    assert main(["rates", "--p", "0.1", "--m", "5", "--plot", str(tmp_path / "paths.png"), "--plot-m", "5,50"]) == 0
    assert (tmp_path / "paths.png").read_bytes()[:8] == PNG and (tmp_path / "paths.pdf").read_bytes()[:4] == PDF
    assert main(["rates", "--p", "0.1", "--m", "5", "--plot", str(tmp_path / "x.png"), "--plot-m", "5,y"]) == 2
    assert "--plot-m '5,y' must be comma-separated numbers" in capsys.readouterr().err


def test_a_rates_plot_written_as_pdf_embeds_truetype_fonts_like_the_reports(tmp_path):
    assert main(["rates", "--p", "0.1", "--m", "5", "--plot", str(tmp_path / "paths.pdf"), "--plot-m", "5"]) == 0
    written = (tmp_path / "paths.pdf").read_bytes()
    assert written[:4] == PDF and b"/FontFile2" in written and b"/Subtype /Type3" not in written  # Type 42


def test_the_extended_summary_of_one_dataset_and_one_seed_shows_no_nan():
    from ndebench.platform.report.render.sections import to_html, to_markdown
    from ndebench.platform.report.summary import summary_sections

    runs = pd.DataFrame([{"model": "m", "dataset": "d", "regularizer": r, "seed": 0, "status": "ok",
                          "test_accuracy": a} for r, a in (("none", 0.5), ("continuum_dropout", 0.6))])
    [section] = summary_sections(runs, {"d": "test_accuracy"}, channels={"d": 1})
    # One seed: no std; one dataset: no standard error over datasets. Each is left out, not written as nan.
    assert [c.text for c in section.rows[0][3:7]] == ["0.500", "0.600", "+0.100", "+20.00"]
    assert "nan" not in to_markdown(section) + to_html(section, {})
