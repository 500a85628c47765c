"""The claims page (docs/reproduction/README.md) and the README's claims section say only what committed files show.

Every decimal number they quote must be written, at the same precision, in a committed report file of the larger
reproduction (``report/reproduction_large``: ``table.md``, ``summary.json``, ``paper_comparison.md``,
``selection_audit.md``), of the hidden-size run (``report/reproduction_hidden_sizes``: ``table.md``,
``architectures.md``, ``summary.json``) or of the regularizer benchmark (``report/benchmark_regularizers``:
``methods.md``, ``table.md``), or, for the design and the measured wall time, in a committed config of
docs/reproduction/; every "N of M" count must be written as such in one of them. Numbers in the pages' code blocks
and links are not quotes. The configs validate and plan the trials their headers state, the runs' reports are
committed whole (every evaluate run ``ok``), and the verdicts the page gives are the ones paper_comparison.md
computes. The page is what its template renders, and the template's prose quotes no figure.
"""
import json
import re
from pathlib import Path

import pytest
from ndebench.platform import api
from ndebench.platform.cli.main import main
from ndebench.platform.report.render.page import render_page
from ndebench.platform.report.statistics.agreement import ALPHA, at_most
from ndebench.platform.spec.plan import plan_stages, sweep_cells

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "docs" / "reproduction"
REPORT = FOLDER / "report" / "reproduction_large"
REPORT_FILES = ["table.md", "summary.json", "paper_comparison.md", "selection_audit.md"]
HIDDEN = FOLDER / "report" / "reproduction_hidden_sizes"
HIDDEN_FILES = ["table.md", "architectures.md"]
BENCHMARK = FOLDER / "report" / "benchmark_regularizers"
BENCHMARK_FILES = ["methods.md", "table.md"]
LNSDE = FOLDER / "report" / "reproduction_lnsde"
LNSDE_FILES = ["table.md", "paper_comparison.md"]
CONFIGS = ["reproduction.yaml", "hidden_sizes.yaml", "reproduction_large.yaml", "benchmark.yaml",
           "reproduction_lnsde.yaml"]
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)")
COUNT = re.compile(r"\b(\d+) of (\d+)\b")
CODE = re.compile(r"```.*?```|`[^`]*`|\]\([^)]*\)", re.S)


def _sources() -> tuple[str, list[float]]:
    """The committed files' text, and the per-cell t-test p-values that only ``summary.json`` writes out."""
    text = "\n".join((REPORT / name).read_text() for name in REPORT_FILES if name.endswith(".md"))
    text += "\n".join((HIDDEN / name).read_text() for name in HIDDEN_FILES)
    text += "\n".join((BENCHMARK / name).read_text() for name in BENCHMARK_FILES)
    text += "\n".join((LNSDE / name).read_text() for name in LNSDE_FILES)
    text += "\n".join((FOLDER / name).read_text() for name in CONFIGS)
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (REPORT, HIDDEN, LNSDE)]
    controls = [c["p"] for c in (summaries[-1]["mc_control"] or {}).get("comparisons", [])]
    return text, [float(p) for p in [c["p"] for summary in summaries for table in summary["tables"]
                                     for c in table["comparisons"]] + controls if p is not None]


def _written(number: str, text: str, p_values: list[float]) -> bool:
    """Whether ``number`` (unsigned, d decimals) is written in ``text`` at d or more decimals rounding to it, or
    is a per-cell p-value of ``summary.json`` printed at d decimals."""
    digits = len(number.partition(".")[2])
    for found in re.findall(r"\d+\.\d+", text):
        if found == number or (len(found.partition(".")[2]) > digits and f"{float(found):.{digits}f}" == number):
            return True
    return any(f"{p:.{digits}f}" == number for p in p_values)


def _claims_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## The paper's claims, tested", 1)[1].split("\n## ", 1)[0]


def _quoted(page: str) -> str:
    return CODE.sub(" ", page)


@pytest.mark.parametrize("page", ["docs/reproduction/README.md", "README.md"])
def test_every_decimal_and_count_on_the_page_is_in_a_committed_file(page):
    text = (ROOT / page).read_text() if page != "README.md" else _claims_section()
    quoted = _quoted(text)
    sources, values = _sources()
    decimals = DECIMAL.findall(quoted)
    if page != "README.md":
        assert len(decimals) > 80  # the page quotes the report; the check must see its numbers
    assert [n for n in decimals if not _written(n, sources, values)] == []
    counts = [m.group(0) for m in COUNT.finditer(quoted)]
    assert counts and [c for c in counts if c not in sources] == []


def test_the_check_catches_a_number_no_file_holds():
    sources, values = _sources()
    assert _written("0.037", sources, values)  # the oracle's largest gap 0.0375 is written +0.037 in selection_audit.md
    # the old page's wall time no file holds, and numbers no file has at 4 decimals
    assert not any(_written(n, sources, values) for n in ("4687.0", "0.8123", "0.9137"))
    assert _written("12.706", sources, values) and _written("0.835", sources, values)
    assert _written("0.064", sources, values)  # 0.0641 in selection_audit.md
    assert DECIMAL.findall(_quoted("p 0.15-0.72, [-1.059, +0.942], `1.5` (see [x](a/1.2.md)) 0.1.")) == [
        "0.15", "0.72", "1.059", "0.942", "0.1"]


def _verdict_cells(page: str) -> dict[int, str]:
    rows = [line for line in page.splitlines() if re.match(r"\| [1-7] \|", line)]
    assert len(rows) == 7
    return {int(line.split("|")[1]): line.rstrip(" |").rsplit("|", 1)[1].strip() for line in rows}


def test_the_pages_verdicts_are_the_ones_the_comparison_computes():
    """Rows 1-3 give each split's verdict as summary.json has it, row 4 the count rule's reading of the chance of
    so few significant sets over those not near ceiling, and the page quotes the comparison's verdict count."""
    page = (FOLDER / "README.md").read_text()
    comparison = json.loads((REPORT / "summary.json").read_text())["paper_comparison"]
    across = comparison["agreement_across_datasets"]
    assert len(across) == 6  # the Neural CDE and ODE, each over all sets, univariate and multivariate
    assert comparison["verdict_counts"] in page and comparison["verdict_counts"] in (
        REPORT / "paper_comparison.md").read_text()
    verdict = _verdict_cells(page)
    for row, model in ((1, "neural_cde"), (2, "neural_ode")):
        for r in (r for r in across if r["model"] == model):
            assert f"{r['split']}: {r['verdict']}" in verdict[row], (row, r["split"])
    lnsde = json.loads((LNSDE / "summary.json").read_text())["paper_comparison"]["agreement_across_datasets"]
    assert {r["model"] for r in lnsde} == {"neural_lnsde"} and len(lnsde) == 3
    for r in lnsde:
        assert f"{r['split']}: {r['verdict']}" in verdict[3], r["split"]
    sets = [(r["power"], d in r["ceiling_sets"], d in r["significant_sets"])
            for r in comparison["per_set_power"] if r["split"] != "all" for d in r["sets"]]
    free = [power for power, ceiling, _ in sets if not ceiling]
    chance = at_most(sum(hit for _, ceiling, hit in sets if not ceiling), free)
    assert chance == comparison["per_set_count"]["free_chance"]
    assert verdict[4].startswith("differs" if chance < ALPHA else "inconclusive")
    assert f"{chance:.3f}" in verdict[4]
    assert "not supported" not in page and "That claim is withdrawn" in page
    gaps = json.loads((REPORT / "summary.json").read_text())["selection_audit"]
    assert f"0 to +{max(r['gap'] for r in gaps):.3f}" in page
    # the rule the verdicts follow is stated on the page in the words of the output
    assert "Verdict rule: 'differs' when the 95% Welch interval" in (REPORT / "paper_comparison.md").read_text()
    assert "**differs**" in page and "**agrees**" in page and "**inconclusive**" in page


@pytest.mark.parametrize(("name", "trials"), [("hidden_sizes.yaml", (8, 16, 440)),
                                              ("reproduction_large.yaml", (72, 72, 540)),
                                              ("reproduction_lnsde.yaml", (36, 36, 135))])
def test_the_configs_plan_what_their_headers_say(name, trials):
    config = FOLDER / name
    spec = api.load(config)
    base, tune = plan_stages(spec)
    cells = sweep_cells(spec)
    assert (base.trials, tune.trials, len(cells) * len(spec.evaluate.seeds)) == trials
    assert spec.resources.stack == (8 if name == "reproduction_lnsde.yaml" else 5)
    header = config.read_text()
    assert f"= {trials[0]}" in header and f"= {trials[1]}" in header and f"= {trials[2]} runs" in header
    if name == "hidden_sizes.yaml":
        sizes = {c.variant for c in cells if c.regularizer == "none" and c.variant}
        assert sizes == {f"none[model.hidden_size={h}]" for h in (16, 32, 64, 128)}
        assert list(spec.models) == ["neural_cde"]
    else:
        assert {"uea/ItalyPowerDemand", "uea/OSULeaf"} <= set(spec.datasets)
    assert "Pending" not in header and f"{trials[2]} of {trials[2]} evaluate runs ok" in header
    results = (FOLDER / "report" / spec.study / "results.csv").read_text().splitlines()
    assert len(results) == trials[2] + 1 and all(",ok," in line for line in results[1:])


def test_the_page_quotes_the_hidden_size_reports_architecture_tests():
    """Every Continuum Dropout cell of the run was tested against none of its own hidden size, and the page's
    counts are those of architectures.md's caption."""
    table = (HIDDEN / "architectures.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| neural_cde |")]
    sizes = [line.split("|")[3].strip() for line in rows]
    assert len(rows) == 64 and {s: sizes.count(s) for s in set(sizes)} == {
        f"model.hidden_size={h}": 16 for h in (16, 32, 64, 128)}
    caption = re.search(r"(\d+) of 64 better, (\d+) of 64 worse; (\d+) of 64 below 0.05 after Holm", table)
    page = (FOLDER / "README.md").read_text()
    better, worse, holm = caption.groups()
    assert f"{better} of 64 better,\n  {worse} of 64 worse" in page and f"{holm} of 64 below 0.05 after Holm" in page


def _fields() -> dict[str, float]:
    """The key figures of the claims, each by the name of its summary.json field."""
    comparison = json.loads((REPORT / "summary.json").read_text())["paper_comparison"]
    across = {(r["model"], r["split"]): r for r in comparison["agreement_across_datasets"]}
    sets = {(r["model"], r["dataset"]): r for r in comparison["per_set_tests"]}
    count = comparison["per_set_count"]
    cde, arrow = across[("neural_cde", "all")], sets[("neural_cde", "uea/ArrowHead")]
    return {"cde all study_improvement": cde["study_improvement"],
            "cde all paper_improvement": cde["paper_improvement"],
            "cde all p_difference_holm": cde["p_difference_holm"],
            "cde all p_difference_holm_table": cde["p_difference_holm_table"],
            "cde ArrowHead p_paired": arrow["p_paired"], "cde ArrowHead p_paired_holm": arrow["p_paired_holm"],
            "cde ArrowHead p_unpaired": arrow["p_unpaired"], "cde ArrowHead difference": arrow["difference"],
            "per_set_count free_chance": count["free_chance"],
            "per_set_count free_chance_independent": count["free_chance_independent"],
            "per_set_count expected": count["expected"], "per_set_count r": count["r"],
            "per_set_count student free_chance": count["student"]["free_chance"]}


# (page or README, the text around the figure with {} where it stands, the field, the printed format)
PINNED = [
    ("page", "study minus paper -0.144 [-0.217, -0.071], p = 0.00127, {} after Holm over the 4 rows",
     "cde all p_difference_holm", ".3g"),
    ("page", "({} over Table 9's 2 rows)", "cde all p_difference_holm_table", ".3g"),
    ("page", "Over all 9 sets **{}** [-0.143, -0.001] against", "cde all study_improvement", "+.3f"),
    ("page", "against {} [+0.047, +0.097]: study minus", "cde all paper_improvement", "+.3f"),
    ("page", "ArrowHead {} (0.606 vs 0.744", "cde ArrowHead difference", "+.3f"),
    ("page", "worse on every seed: paired p = {}, ", "cde ArrowHead p_paired", ".2g"),
    ("page", "paired p = 0.00099, {} after Holm over the 17 testable sets", "cde ArrowHead p_paired_holm", ".2g"),
    ("page", "testable sets; the paper's unpaired t {})", "cde ArrowHead p_unpaired", ".2g"),
    ("page", "over the 13 others the chance of none is {} (", "per_set_count free_chance", ".3f"),
    ("page", "the chance of none is 0.001 ({} with", "per_set_count free_chance_independent", ".3f"),
    ("page", "none of the 13 is significant either, a chance of {}:", "per_set_count student free_chance", ".3f"),
    ("page", "would give {} significant sets of these 18", "per_set_count expected", ".2f"),
    ("page", "correlate over seeds at a median r = {};", "per_set_count r", ".2f"),
    ("README", "(-0.072 against the paper's {}, Holm p", "cde all paper_improvement", "+.3f"),
    ("README", "Holm p {} over the 4 rows", "cde all p_difference_holm", ".3g"),
    ("README", "with a test, {} over Table 9's 2)", "cde all p_difference_holm_table", ".3g"),
    ("README", "every seed (paired p {}, ", "cde ArrowHead p_paired", ".2g"),
    ("README", "0 of 18 sets are significantly better, a chance of {} at", "per_set_count free_chance", ".3f"),
    ("README", "observed correlation ({} under the paper's Student t)", "per_set_count student free_chance", ".3f"),
]


def _pinned_text(where: str) -> str:
    return " ".join(((FOLDER / "README.md").read_text() if where == "page" else _claims_section()).split())


@pytest.mark.parametrize(("where", "around", "field", "fmt"), PINNED)
def test_each_key_figure_is_its_summary_json_field(where, around, field, fmt):
    """The figure printed at its place on the page (value and sign) is the named summary.json field in the page's
    format: a changed digit, a changed sign or a number from another field fails here."""
    value = _fields()[field]
    assert around.format(format(value, fmt)) in _pinned_text(where), (field, format(value, fmt))


# --- the page is rendered from its template (docs/reproduction/README.md.j2 and claims/*.md.j2) ---

TEMPLATE = FOLDER / "README.md.j2"
RULE_CONSTANTS = {"0.05", "0.95", "0.975", "1.000"}
"""Numbers of the rules the page states, not results: the significance level, the Bayesian decision level, the t
quantile's level, full accuracy."""
EXPRESSIONS = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)


def test_the_committed_claims_page_is_what_its_template_renders():
    rendered = render_page(TEMPLATE)
    assert rendered == (FOLDER / "README.md").read_text(), "run `ndebench page docs/reproduction/README.md.j2`"


@pytest.mark.parametrize("template", sorted(p.name for p in (FOLDER / "claims").glob("*.md.j2")) + ["README.md.j2"])
def test_the_templates_prose_quotes_no_figure(template):
    """Every decimal and every "N of M" count on the page is an expression on its source, none written in the prose
    (the paper's section numbers and the rules' constants aside)."""
    path = FOLDER / ("claims" if template != "README.md.j2" else "") / template
    prose = _quoted(re.sub(r"Section \d+\.\d+", " ", EXPRESSIONS.sub(" ", path.read_text())))
    left = [n for n in DECIMAL.findall(prose) if n not in RULE_CONSTANTS] + COUNT.findall(prose)
    assert not left, f"{template}: figures written in the prose: {left}"


@pytest.mark.parametrize(("figure", "changed"), [
    ("+0.072 ± 0.012 over all 30", "+0.073 ± 0.012 over all 30"),   # the paper's Table 9
    ("+0.098 ± 0.020 (15 sets)", "+0.098 ± 0.021 (15 sets)"),        # the paper's Table 10
    ("study minus paper -0.144", "study minus paper -0.145"),
    ("p = 0.00127", "p = 0.00128"),
    ("540 of\n540 evaluate runs ok", "540 of\n541 evaluate runs ok"),
])
def test_a_figure_changed_by_one_in_its_last_digit_fails_the_check(tmp_path, figure, changed):
    page = (FOLDER / "README.md").read_text()
    assert page.count(figure) == 1
    mutated = tmp_path / "README.md"
    mutated.write_text(page.replace(figure, changed))
    assert main(["page", str(TEMPLATE), "--out", str(mutated), "--check"]) == 1
    mutated.write_text(page)
    assert main(["page", str(TEMPLATE), "--out", str(mutated), "--check"]) == 0


def test_the_benchmark_plans_what_its_header_says_and_its_report_is_committed_whole():
    config = FOLDER / "benchmark.yaml"
    spec = api.load(config)
    base, tune = plan_stages(spec)
    planned = len(sweep_cells(spec)) * len(spec.evaluate.seeds)
    assert (base.trials, tune.trials, planned) == (36, 522, 360)
    header = config.read_text()
    assert "= 36 (" in header and "= 522;" in header and "= 360 runs" in header
    assert f"{planned} of {planned} evaluate runs ok" in header
    results = (BENCHMARK / "results.csv").read_text().splitlines()
    assert len(results) == planned + 1 and all(",ok," in line for line in results[1:])
    methods = json.loads((BENCHMARK / "methods.json").read_text())["models"]["neural_ode"]
    assert sorted(methods["methods"]) == sorted(spec.regularizers) and len(methods["datasets"]) == 9
