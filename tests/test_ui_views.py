"""What ``ndebench ui --study`` prints, rendered by headless Chromium as a new user would open it: the study's
evaluate cells, named by their regularizer first, with the primary metric, its difference to ``none`` and the
interval at 3 significant digits in the first screen, and charts that plot only params that differ between cells.

Nothing is installed: the test runs where ``/usr/bin/chromium`` exists (Debian's ``chromium`` package) and is
skipped elsewhere."""
import html
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import cell_study, free_port, wait_healthy

pytestmark = pytest.mark.system
CHROMIUM = Path("/usr/bin/chromium")


def _rendered_text(url: str, profile: Path, screenshot: Path | None = None) -> str:
    """The page's DOM after its scripts ran (``--dump-dom``) in a 1280x800 window, as text; ``screenshot`` also
    saves that first screen as PNG. The runs table renders only the columns in view (AG Grid's column
    virtualisation), so what it shows is what fits the first screen."""
    flags = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=60000", "--run-all-compositor-stages-before-draw",
             "--window-size=1280,800"]
    if screenshot:
        subprocess.run([*flags, f"--screenshot={screenshot}", url], capture_output=True, timeout=180, check=True)
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=180, check=True).stdout
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<(style|script)\b.*?</\1>", " ", dom, flags=re.S))
    return re.sub(r"\s+", " ", html.unescape(text))


def _printed_links(process: subprocess.Popen) -> dict[str, str]:
    """The URLs ``ndebench ui --study`` prints: ``runs`` and ``compare``."""
    links: dict[str, str] = {}
    for line in process.stdout:
        if "evaluate runs: " in line:
            links["runs"] = line.split("evaluate runs: ")[1].strip()
        elif "evaluate cells: " in line:
            links["compare"] = line.split("evaluate cells: ")[1].strip()
        if len(links) == 2:
            return links
    raise AssertionError(f"ndebench ui exited ({process.wait()}) before printing the study's links")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium to render the MLflow UI (not installed)")
def test_ui_study_opens_on_named_cells_rounded_metrics_and_charts_of_params_that_differ(tmp_path, uri):
    cells = cell_study(uri, "cmp", lrs=(0.01, 0.005))
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "ui", "--study", "cmp", "--tracking-uri",
                           uri, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True, cwd=tmp_path)
    try:
        links = _printed_links(ui)
        wait_healthy(port, ui)
        # The first screens, kept in pytest's temp dir for a person to look at (described in docs/mlflow.md).
        table = _rendered_text(links["runs"], tmp_path / "chromium", tmp_path / "ui-runs.png")
        charts = _rendered_text(links["compare"], tmp_path / "chromium", tmp_path / "ui-charts.png")
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(timeout=60)
    # The runs view: exactly the two evaluate cell runs, not the study run or the trial runs, each named by its
    # regularizer first (what a name cut short at this width still shows), then model and dataset.
    assert "2 matching runs" in table, table[:3000]
    cd_name, none_name = "continuum_dropout · neural_lsde · synthetic", "none · neural_lsde · synthetic"
    assert cd_name in table and none_name in table
    # Sorted by the primary mean, best first: continuum_dropout (0.875) above none (0.8125).
    assert table.index(cd_name) < table.index(none_name)
    # The display copies at 3 significant digits, in the first screen's columns (the table renders the name
    # column's rows, then the other columns' rows): the mean, the difference to none, its p-value and interval;
    # none's row has "-" for the comparison.
    assert "accuracy vs none p vs none CI low CI high" in table
    cd = cells["neural_lsde__synthetic__continuum_dropout"]["metrics"]
    assert (cd["mean_test_accuracy"], cd["diff_ci_high"], cd["p_value_vs_none"]) == (0.875, 0.109375, 0.0234375)
    assert "0.875 +0.0625 0.0234 0.0156 0.109 0.812 - - - -" in table, table[:3000]
    # Columns past the first screen are not rendered: the param columns at the far right are not in the DOM.
    assert "training.lr" not in table
    # The charts: the primary mean, the difference, and the parallel-coordinates plot, whose axes are the param
    # every cell has and which differs (training.lr) and the primary mean; none has no p or m, so no axis for them.
    assert "mean_test_accuracy" in charts and "diff_vs_none" in charts and "training.lr" in charts, charts[:3000]
    assert "Parallel" in charts and "regularizer.p" not in charts and "regularizer.m" not in charts


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium to render the MLflow UI (not installed)")
def test_ui_without_a_study_opens_the_study_list_in_the_model_training_view(tmp_path, uri):
    cell_study(uri, "cmp")
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "ui", "--tracking-uri", uri, "--port",
                           str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True, cwd=tmp_path)
    try:
        url = next(line.split("studies: ")[1].strip() for line in ui.stdout if line.startswith("studies: "))
        wait_healthy(port, ui)
        page = _rendered_text(url, tmp_path / "chromium", tmp_path / "ui-studies.png")
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(timeout=60)
    # The experiment list, not the GenAI welcome page, with the side bar on model training (its "Model registry";
    # the GenAI side bar has "Prompts" instead).
    assert "Experiments - MLflow" in page and "cmp" in page, page[:3000]
    assert "Model registry" in page and "Prompts" not in page
