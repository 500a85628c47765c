"""The reproduction config (docs/reproduction/) validates, and its trial counts are the ones its header states."""
from pathlib import Path

from ndebench.platform import api
from ndebench.platform.spec.plan import plan_stages, sweep_cells

CONFIG = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "reproduction.yaml"


def test_the_reproduction_config_plans_what_its_header_says():
    spec = api.load(CONFIG)
    assert set(spec.datasets) == {"uea/ArrowHead", "uea/GunPoint", "uea/BasicMotions", "uea/JapaneseVowels"}
    assert set(spec.models) == {"neural_cde", "neural_ode", "neural_lnsde"}
    base, tune = plan_stages(spec)
    cells = sweep_cells(spec)
    assert (base.trials, tune.trials, len(cells) * len(spec.evaluate.seeds)) == (48, 48, 380)
    assert {c.variant for c in cells if c.regularizer == "none" and c.variant} == {"none[n_mc=5]"}
    header = CONFIG.read_text()
    assert "base 12 pairs x (2 hidden sizes x 2 lr) = 48" in header and "= 48" in header and "= 380 runs" in header
