"""MLflow's compare page of a study's evaluate cells, rendered by headless Chromium as a new user would open it.

Nothing is installed: the test runs where ``/usr/bin/chromium`` exists and is skipped elsewhere."""
import html
import re
import signal
import subprocess
from pathlib import Path

import pytest
from fakes import cell_study, start_server, wait_healthy
from ndebench.platform import api

pytestmark = pytest.mark.system
CHROMIUM = Path("/usr/bin/chromium")


def _rendered_text(url: str, profile: Path) -> str:
    """The page's DOM after its scripts ran (``--dump-dom``), as text."""
    dom = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=30000", "--dump-dom", url],
        capture_output=True, text=True, timeout=180, check=True).stdout
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<(style|script)\b.*?</\1>", " ", dom, flags=re.S))
    return re.sub(r"\s+", " ", html.unescape(text))


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium to render the MLflow UI (not installed)")
def test_the_compare_page_plots_and_lists_the_primary_metrics_mean(tmp_path):
    cells = cell_study(f"sqlite:///{tmp_path / 'mlflow.db'}", "cmp")  # the database `ndebench server` serves
    port, server = start_server(tmp_path)
    try:
        wait_healthy(port, server)
        base = f"http://127.0.0.1:{port}"
        links = api.study_links("cmp", base, base)
        assert sorted(links.cell_run_ids) == sorted(c["run_id"] for c in cells.values())
        text = _rendered_text(links.compare, tmp_path / "chromium")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    assert "Comparing 2 Runs from 1 Experiment" in text, text[:2000]
    # The default parallel-coordinates plot takes the first metric the runs share: the primary metric's mean.
    assert "Metrics: mean_test_accuracy" in text
    for cell in cells.values():
        assert f"{cell['metrics']['mean_test_accuracy']:.5f}" in text  # the plot's axis labels
    assert "diff_vs_none" in text and "p_value_vs_none" in text
