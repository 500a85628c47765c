"""`ndebench report` reports a study with the test, alpha, correction and figures of the sweep YAML it recorded
(and that YAML's `--set` overrides), unless a flag says otherwise."""
import pytest
from ndebench.platform.cli.main import main
from ndebench.platform.common.choices import default_test
from ndebench.platform.record import synthetic, tracking
from ndebench.platform.report.study import PAIRED_BY_DESIGN
from ndebench.platform.spec.config import ConfigError, ReportConfig
from ndebench.platform.spec.recorded import recorded_report, report_settings

DESIGN = "design (paired under the paper protocol, else student)"
RECORDED = "study: syn\nreport: {correction: holm, figures: none}\n# --set report.alpha=0.01\n"


def test_the_recorded_report_section_with_its_overrides_and_the_defaults_elsewhere():
    assert recorded_report(RECORDED) == ReportConfig(test=None, alpha=0.01, correction="holm", figures="none")
    assert recorded_report(None) == recorded_report("study: syn\n") == ReportConfig()
    assert report_settings(recorded_report(RECORDED), test="welch", alpha=None) == {
        "test": "welch", "alpha": 0.01, "correction": "holm", "figures": "none"}
    with pytest.raises(ConfigError, match="bonferroni"):
        recorded_report("report: {correction: bonferroni}\n")


def _study(uri: str, yaml_text: str | None) -> None:
    tracking.study_run(uri, "syn", description="d", params={"evaluate.seeds": "[0, 1, 2, 3, 4]"},
                       yaml_text=yaml_text)
    synthetic.write_study(uri, "syn", 10)  # reuses the study run above


def test_report_uses_the_studys_recorded_settings_and_flags_override_them(tmp_path, uri, capsys):
    _study(uri, RECORDED)
    assert main(["report", "--study", "syn", "--tracking-uri", uri, "--out", str(tmp_path / "a")]) == 0
    assert f"report settings: test={DESIGN} alpha=0.01 correction=holm figures=none" in capsys.readouterr().out
    table = (tmp_path / "a" / "syn" / "table.md").read_text()
    assert "with p < 0.01" in table and "Holm" in table
    assert not list((tmp_path / "a" / "syn").glob("*.png"))

    assert main(["report", "--study", "syn", "--tracking-uri", uri, "--out", str(tmp_path / "b"),
                 "--correction", "none", "--alpha", "0.05"]) == 0
    assert f"report settings: test={DESIGN} alpha=0.05 correction=none figures=none" in capsys.readouterr().out
    table = (tmp_path / "b" / "syn" / "table.md").read_text()
    assert "with p < 0.05" in table and "Holm" not in table.split("## Across datasets")[0]


def test_a_study_without_a_recorded_yaml_gets_the_defaults(tmp_path, uri, capsys):
    _study(uri, None)
    assert main(["report", "--study", "syn", "--tracking-uri", uri, "--out", str(tmp_path / "a"),
                 "--figures", "none"]) == 0
    out = capsys.readouterr().out
    assert f"report settings: test={DESIGN} alpha=0.05" in out
    # the synthetic study run records no protocol: the paper's, whose seeds pair the cells
    assert "paired t-test over the seeds both cells share (scipy.stats.ttest_rel) against none" in out
    assert PAIRED_BY_DESIGN in (tmp_path / "a" / "syn" / "table.md").read_text()
    assert main(["report", "--study", "syn", "--tracking-uri", uri, "--out", str(tmp_path / "b"),
                 "--figures", "none", "--test", "student"]) == 0
    assert "Student's two-sample t-test (scipy.stats.ttest_ind, pooled variance) against none" in \
        capsys.readouterr().out


def test_the_default_test_follows_the_design():
    assert default_test("paper") == "paired" and default_test("joint") == "student"


@pytest.mark.parametrize(("given", "protocol", "expected"), [(None, "paper", "paired"), (None, "joint", "student"),
                                                             ("welch", "paper", "welch")])
def test_the_sweeps_cell_runs_use_the_reports_test(monkeypatch, given, protocol, expected):
    import dataclasses
    from types import SimpleNamespace

    import pandas as pd
    from ndebench.platform.engine import evaluatestage

    monkeypatch.setattr(evaluatestage, "evaluate_runs", lambda *a, **k: pd.DataFrame())
    used = []
    spec = SimpleNamespace(study="s", protocol=protocol,
                           report=dataclasses.replace(ReportConfig(), test=given))
    ctx = SimpleNamespace(tracking_uri="sqlite://", spec=spec,
                          cell_statistics=lambda runs, cells, test: used.append(test) or {})
    evaluatestage._aggregate(ctx, {}, {}, {})
    assert used == [expected]
