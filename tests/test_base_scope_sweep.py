"""``base.scope: per_regularizer`` end to end on a local Ray: each regularizer's base search runs with it on at its
grid's middle point, each row is evaluated on its own base values, a ``model.hidden_size`` variant keeps its size,
the report says which protocol produced the rows, and ``report --paper`` prints the comparison with the paper."""
import contextlib
import io
import json

import pytest
import yaml
from fakes import local_ray_arguments
from ndebench.platform.cli.main import main
from ndebench.platform.record.tracking import TAG, search

pytestmark = pytest.mark.system
SPEC = {
    "study": "scoped", "protocol": "paper", "models": ["neural_cde"], "datasets": ["synthetic"],
    "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3, 0.5], "m": [5]}},
    "variants": {"none": {"model.hidden_size": [4]}},
    "model": {"hidden_size": [6, 8]},
    "training": {"epochs": 2, "min_epochs": 1, "patience": 1, "lr": 0.01},
    "base": {"scope": "per_regularizer", "sampler": "grid"},
    "tune": {"sampler": "grid", "seed": 0},
    "evaluate": {"seeds": [0, 1]},
    "resources": {"cpu": 1},
    "report": {"figures": "none"},
}


def test_each_row_is_evaluated_on_its_own_base(tmp_path, uri):
    import ray

    config = tmp_path / "scoped.yaml"
    config.write_text(yaml.safe_dump(SPEC))
    ray.init(**local_ray_arguments(1))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["run", str(config), "--tracking-uri", uri, "--storage-path", (tmp_path / "ray").as_uri(),
                         "--out", str(tmp_path / "reports")])
    finally:
        ray.shutdown()
    assert code == 0
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["report", "--study", "scoped", "--tracking-uri", uri, "--out", str(tmp_path / "paper"),
                     "--paper", "--figures", "none"]) == 0
    # `report --paper` prints the comparison: no paper cell for the synthetic set, Table 9's Neural CDE row beside it
    assert "Not reported by the paper: neural_cde / synthetic: the paper reports no accuracy for" \
        in printed.getvalue()
    assert "| neural_cde | all (Table 9, 30 sets) | 0.709 -> 0.781 | +0.072 ± 0.012 |" in printed.getvalue()
    assert "paper_comparison" in json.loads((tmp_path / "paper" / "scoped" / "summary.json").read_text())
    assert "The paper&#x27;s cells beside the study" in (tmp_path / "paper" / "scoped" / "report.html").read_text()
    trials = [r for r in search(uri, "scoped") if r.data.tags.get(f"{TAG}kind") == "trial"]

    def of(phase, regularizer):
        return [r for r in trials if r.data.tags[f"{TAG}phase"] == phase
                and r.data.tags[f"{TAG}regularizer"] == regularizer]

    cd_base = of("base", "continuum_dropout")
    assert len(cd_base) == 2 and {r.data.params["regularizer.p"] for r in cd_base} == {"0.3"}
    assert len(of("base", "none")) == 2
    for regularizer in ("none", "continuum_dropout"):
        best = min(of("base", regularizer), key=lambda r: r.data.metrics["val_loss"])
        rows = [r for r in of("evaluate", regularizer) if not r.data.tags.get(f"{TAG}variant")]
        assert len(rows) == 2
        assert {r.data.params["model.hidden_size"] for r in rows} == {best.data.params["model.hidden_size"]}
    variant = [r for r in of("evaluate", "none") if r.data.tags.get(f"{TAG}variant")]
    assert {r.data.params["model.hidden_size"] for r in variant} == {"4"} and len(variant) == 2
    summary = json.loads((tmp_path / "reports" / "scoped" / "summary.json").read_text())
    assert summary["protocol"]["base_scope"] == "per_regularizer"
    assert "base.scope per_regularizer" in (tmp_path / "reports" / "scoped" / "table.md").read_text()
