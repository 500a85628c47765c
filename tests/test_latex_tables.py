"""The ``.tex`` tables a report writes compile with ``pdflatex`` in a one-column and a two-column article at
10 pt: no overfull box, no text set below 8 pt, no scaling, captions of at most two lines, display names."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.report import analyses
from ndebench.platform.report.render.latex import Grid, TexCell, display, printed_names, render, width
from ndebench.platform.report.report import build_report
from ndebench.platform.report.statistics.rows import ROW

# A hook on every font selection reports text set below 8 pt; \caption reports how many lines its text takes at
# the float's width (\prevgraf after setting it as LaTeX's \@makecaption does, "Table N: " first).
PREAMBLE = r"""\documentclass[10pt%s]{article}
\usepackage{booktabs}
\makeatletter
\AddToHook{selectfont}{\ifdim\f@size pt<7.99pt\typeout{NDB-SMALL-FONT \f@size}\fi}
\let\ndb@caption\caption
\renewcommand\caption[1]{\setbox0\vbox{\hsize\linewidth\noindent Table 99: #1\par
  \xdef\ndb@lines{\the\prevgraf}}\typeout{NDB-CAPTION-LINES \ndb@lines}\ndb@caption{#1}}
\makeatother
\begin{document}
"""


def crafted() -> pd.DataFrame:
    """3 methods (none, continuum_dropout, naive_dropout_drift) x 2 sets x 5 seeds on neural_cde; one diverged
    run so that a cell carries a note."""
    rng = np.random.default_rng(0)
    rows = []
    for dataset, base in (("uea/BasicMotions", 0.7), ("uea/ArrowHead", 0.6)):
        for regularizer, shift in (("none", 0.0), ("continuum_dropout", 0.06), ("naive_dropout_drift", 0.01)):
            for seed in range(5):
                acc = base + shift + rng.normal(0, 0.02)
                status = "diverged" if (regularizer, dataset, seed) == ("naive_dropout_drift", "uea/ArrowHead", 4) \
                    else "ok"
                rows.append({"run_id": f"{dataset}-{regularizer}-{seed}", "study": "crafted", "model": "neural_cde",
                             "dataset": dataset, "regularizer": regularizer, "label": regularizer, "variant": "",
                             "seed": seed, "status": status, "metric": "accuracy",
                             "test_accuracy": acc if status == "ok" else np.nan,
                             "test_nll": 1 - acc + rng.normal(0, 0.01), "test_ece": 0.1 + rng.normal(0, 0.01),
                             "n_mc": 0, "p": np.nan, "m": np.nan, "train_time_s": 10.0, "epoch_time_s": 1.0})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    runs = crafted()
    files = build_report(runs, tmp_path_factory.mktemp("reports"), "crafted", test="paired", figures="none")
    analyses.write_analyses(runs, files, "crafted", alpha=0.05)
    return files.directory


def pdflatex() -> str:
    """pdflatex's path; under CI (``CI`` set, or ``NDEBENCH_REQUIRE_TEX`` as ``.ci/run`` sets it, where ``make
    test`` installs TeX Live) its absence fails the test."""
    found = shutil.which("pdflatex")
    if found is None:
        message = ("pdflatex not found: apt-get install -y --no-install-recommends texlive-latex-recommended "
                   "(make tex does it as root)")
        if os.environ.get("CI") or os.environ.get("NDEBENCH_REQUIRE_TEX"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def compile_tables(directory: Path, names: list[str], twocolumn: bool) -> str:
    """Compile ``names`` (``\\input``) in an article; the log."""
    body = "".join(rf"\input{{{name}}}\clearpage" + "\n" for name in names)
    tex = directory / f"paper-{'two' if twocolumn else 'one'}.tex"
    tex.write_text(PREAMBLE % (",twocolumn" if twocolumn else "") + body + "\\end{document}\n")
    done = subprocess.run([pdflatex(), "-interaction=nonstopmode", "-halt-on-error", tex.name], cwd=directory,
                          capture_output=True, text=True, timeout=120)
    log = tex.with_suffix(".log").read_text(errors="replace")
    assert done.returncode == 0, log[-3000:]
    return log


@pytest.mark.parametrize("twocolumn", [False, True], ids=["onecolumn", "twocolumn"])
def test_tables_compile_at_readable_size(report_dir, twocolumn):
    names = ["table.tex", "summary_extended.tex", "table_full.tex", "timing.tex"]
    log = compile_tables(report_dir, names, twocolumn)
    assert "Overfull \\hbox" not in log, re.findall(r"Overfull \\hbox.*", log)
    assert "NDB-SMALL-FONT" not in log, re.findall(r"NDB-SMALL-FONT.*", log)
    lines = [int(n) for n in re.findall(r"NDB-CAPTION-LINES (\d+)", log)]
    assert len(lines) >= 6 and max(lines) <= 2, lines
    for name in names:
        text = (report_dir / name).read_text()
        assert not re.search(r"\\(resizebox|scalebox|tiny|scriptsize)\b", text), name


def test_display_names_throughout(report_dir):
    for name in ("table.tex", "summary_extended.tex"):
        text = (report_dir / name).read_text()
        assert "Continuum Dropout" in text and "Naive Dropout (drift)" in text and "Neural CDE" in text, name
        assert not re.search(r"continuum\\_dropout|neural\\_cde|uea/|naive\\_dropout", text), name
    table = (report_dir / "table.tex").read_text()
    assert "BasicMotions" in table and "ArrowHead" in table
    # The paper's style: mean (std), the significant cell marked and bold, the one diverged run a lettered note.
    assert r"\textbf{0.764 (0.020)}$^{**}$" in table, table
    assert r"$^{\mathrm{a}}$ n=4; 1 diverged." in table


def test_display_names_from_the_registries():
    assert display("continuum_dropout") == "Continuum Dropout"
    assert display("continuum_dropout[p=0.1]") == "continuum_dropout[p=0.1]"  # a row's name is never taken apart
    assert display("neural_cde") == "Neural CDE" and display("uea/BasicMotions") == "BasicMotions"
    assert display("sepsis") == "PhysioNet Sepsis" and display("0.700 (0.075)") == "0.700 (0.075)"


def test_a_row_is_printed_from_the_columns_its_name_was_made_from():
    runs = pd.DataFrame({
        ROW: ["continuum_dropout", "continuum_dropout[p=0.1]", "continuum_dropout[scope=time]",
              "none[model.hidden_size=16]", "continuum_dropout[p=0.1]"],
        "regularizer": ["continuum_dropout"] * 3 + ["none", "continuum_dropout"],
        "fixed": [{}, {"p": 0.1}, {}, {"model.hidden_size": 16}, {"p": 0.1}],
        "params.regularizer.scope": [None, None, "time", None, None]})
    assert printed_names(runs) == {"continuum_dropout": "Continuum Dropout",
                                   "continuum_dropout[p=0.1]": "Continuum Dropout [p=0.1]",
                                   "continuum_dropout[scope=time]": "Continuum Dropout [scope=time]",
                                   "none[model.hidden_size=16]": "None [model.hidden_size=16]"}
    assert printed_names(runs.drop(columns="fixed")) == {}
    assert printed_names(runs.assign(fixed=runs["fixed"].astype(str))) == {}  # as results.csv holds it


def test_a_plugin_without_display_gets_its_words(tmp_path):
    from ndebench.regularizers.registry import REGISTRY, register_regularizer

    @register_regularizer("ndebench_test_drift_noise", summary="test")
    class DriftNoise:  # registered only to be named
        pass

    try:
        assert display("ndebench_test_drift_noise") == "Ndebench Test Drift Noise"
    finally:
        REGISTRY._factories.pop("ndebench_test_drift_noise")
        REGISTRY._info.pop("ndebench_test_drift_noise")


def test_layout_picks_column_then_page_then_smaller_then_splits():
    def grid(columns: int, text: str) -> Grid:
        cell = TexCell(text, width(text))
        return Grid([cell] * columns, [[cell] * columns], "l" * columns, "c")

    # Each cell 56.67 pt of text plus 12 pt of gaps; the space is 97% of 229.5 pt (a column) or 345 pt (the page).
    assert grid(2, "0.700 (0.075)").fits() == ("table", "", 6.0)  # 137 pt
    assert grid(4, "0.700 (0.075)").fits() == ("table*", "", 6.0)  # 275 pt
    assert grid(5, "0.700 (0.075)").fits() == ("table*", "\\small", 6.0)  # 343 pt, 315 pt at 9 pt
    assert grid(6, "0.700 (0.075)").fits() == ("table*", "\\footnotesize", 3.0)  # 344 pt at 8 pt, 308 with 3 pt gaps
    assert grid(8, "0.700 (0.075)").fits() is None  # 411 pt at 8 pt with 3 pt gaps
    split = render(grid(8, "0.700 (0.075)"))
    assert split.count("\\begin{table") == 2 and "(1/2)" in split and "(2/2)" in split, split
