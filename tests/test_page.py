"""`ndebench page`: a page rendered from its Jinja2 template, every figure read from the file it quotes."""
import json

import pytest
from ndebench.platform.cli.main import main
from ndebench.platform.report.render.page import PageError, one, render_page, where

ROWS = [{"model": "neural_cde", "split": "all", "p": 0.00127}, {"model": "neural_ode", "split": "all", "p": 0.0333},
        {"model": "neural_ode", "split": "univariate", "p": None}]


def _folder(tmp_path, template: str):
    (tmp_path / "report" / "s").mkdir(parents=True)
    (tmp_path / "report" / "s" / "summary.json").write_text(json.dumps({"rows": ROWS, "n": 9}))
    (tmp_path / "report" / "s" / "methods.json").write_text(json.dumps({"focus": "continuum_dropout"}))
    (tmp_path / "study.yaml").write_text("evaluate: {seeds: [0, 1, 2, 3, 4]}\n")
    (tmp_path / "report" / "s" / "tests.md").write_text(
        "# Tests\n\nintro\n\n## Against none\n\n| dataset | p |\n|---|---|\n| ArrowHead | 0.0413 |\n"
        "| Car | 0.25 |\n\nafter\n")
    (tmp_path / "page.md.j2").write_text(template)
    return tmp_path / "page.md.j2"


def test_one_and_where_select_rows_and_one_refuses_none_or_several():
    assert one(ROWS, model="neural_cde")["p"] == 0.00127
    assert [r["split"] for r in where(ROWS, model="neural_ode")] == ["all", "univariate"]
    with pytest.raises(PageError, match=r"2 rows match \{'model': 'neural_ode'\}, expected exactly one"):
        one(ROWS, model="neural_ode")
    with pytest.raises(PageError, match="0 rows match"):
        one(ROWS, model="ancde")


def test_a_page_quotes_its_sources_through_filters(tmp_path):
    template = _folder(tmp_path, "{% set s = report('report/s') %}p = {{ (s.rows | one(model='neural_cde')).p | g3 }}"
                                 ", {{ s.n }} sets, {{ config('study.yaml').evaluate.seeds | length }} seeds, "
                                 "{{ 0.0123 | s3 }} {{ -0.5 | d3 }} {{ 1234.5 | f(',.0f') }}; Table "
                                 "{{ (paper.summary | one(model='neural_cde', split='all')).table }}; Car "
                                 "{{ (table('report/s/tests.md', 'Against none') | one(dataset='Car')).p }}; "
                                 "{{ report('report/s', 'methods.json').focus }}\n")
    assert render_page(template) == ("p = 0.00127, 9 sets, 5 seeds, +0.012 -0.500 1,234; Table 9; Car 0.25; "
                                     "continuum_dropout\n")


@pytest.mark.parametrize(("template", "message"), [
    ("{{ report('report/s').missing }}", "'dict object' has no attribute 'missing'"),
    ("{{ (report('report/s').rows | one(split='univariate')).p | d3 }}", "missing (null in its source)"),
    ("{{ report('report/absent') }}", "FileNotFoundError"),
    ("{% if %}", "line 1"),
    ("{{ table('report/s/tests.md', 'Against all') }}", "no heading 'Against all'"),
    ("{{ table('report/s/tests.md', 'Tests') }}", "no table under the heading 'Tests'"),
])
def test_a_template_that_cannot_render_says_why(tmp_path, template, message):
    with pytest.raises(PageError, match="page.md.j2") as info:
        render_page(_folder(tmp_path, template))
    assert message in str(info.value)


def test_the_command_writes_the_page_and_check_fails_on_any_changed_figure(tmp_path, capsys):
    template = _folder(tmp_path, "{{ report('report/s').rows[1].p }} and {{ report('report/s').n }}\n")
    assert main(["page", str(template)]) == 0
    page = tmp_path / "page.md"
    assert page.read_text() == "0.0333 and 9\n"
    assert main(["page", str(template), "--check"]) == 0
    page.write_text("0.0334 and 9\n")
    capsys.readouterr()
    assert main(["page", str(template), "--check"]) == 1
    out = capsys.readouterr().out
    assert "-0.0334 and 9" in out and "+0.0333 and 9" in out
    assert main(["page", str(tmp_path / "nothing.j2")]) == 2
    assert "nothing.j2: no such template" in capsys.readouterr().err
