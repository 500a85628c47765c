"""Components from a package outside ndebench, found through entry points, in a fresh interpreter."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fakes import log_evaluate_runs, make_plugin

PLUGIN = '''
import numpy as np
import torch
from ndebench.datasets.files import CorruptFileError, missing_files, resolve_data_dir
from ndebench.datasets.protocol import uea_protocol
from ndebench.datasets.registry import register_dataset
from ndebench.datasets.synthetic import synthetic
from ndebench.models.neural_cde import NeuralCDE
from ndebench.models.registry import register_model
from ndebench.regularizers.none import NoRegularizer
from ndebench.regularizers.registry import register_regularizer


@register_model("plugin_cde", summary="a Neural CDE from a plugin", paper="none")
class PluginCDE(NeuralCDE):
    pass


@register_regularizer("plugin_none", summary="no regularization, from a plugin")
class PluginNone(NoRegularizer):
    pass


register_dataset("plugin_waves", summary="the synthetic set, from a plugin")(synthetic)


def _locate(member, data_dir):
    root = resolve_data_dir(data_dir)
    if not (root / "waves.txt").is_file():
        raise missing_files("plugin_pairs", root, ["waves.txt"], "the plugin's authors")
    return f"local file ({root / 'waves.txt'})"


def _probe(member, data_dir):
    _locate(member, data_dir)
    path = resolve_data_dir(data_dir) / "waves.txt"
    if path.read_text() != "waves":
        raise CorruptFileError(f"{path} does not say 'waves'")
    return {"files": 1}


@register_dataset("plugin_pairs", summary="two classes of waves, with every fact registered",
                  expected={"files": 1, "samples": 40, "classes": 2, "channels": 2, "length": 16},
                  locate=_locate, probe=_probe, missing_values=False, metric="auroc")
def plugin_pairs(*, seed=0, data_dir=None):
    _locate(None, data_dir)
    rng = np.random.default_rng(seed)
    labels = np.arange(40) % 2
    angle = 2 * np.pi * (labels[:, None] + 1) * np.linspace(0, 1, 16) + rng.uniform(0, 6, (40, 1))
    values = torch.from_numpy(np.stack([np.sin(angle), np.cos(angle)], axis=-1))
    return uea_protocol("plugin_pairs", values, labels, seed=seed, missing_rate=0.0, source="a plugin's file")
'''


# A regularizer whose hyperparameter ``alpha`` is declared in its registration and nowhere else.
ALPHA_PLUGIN = '''
from ndebench.regularizers.none import NoRegularizer
from ndebench.regularizers.registry import HyperParam, register_regularizer


@register_regularizer("plugin_alpha", summary="no regularization, with a hyperparameter alpha, from a plugin",
                      hyperparams={"alpha": HyperParam((0.1, 0.5), help="a plugin's own hyperparameter")})
class PluginAlpha(NoRegularizer):
    def __init__(self, alpha=0.1):
        super().__init__()
        self.alpha = alpha
'''


def _python(code: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_entry_point_components_register_and_train(tmp_path):
    env = make_plugin(tmp_path / "site", PLUGIN)
    out = _python('''
        import json
        from ndebench.datasets.registry import list_datasets
        from ndebench.models.integrate import SolverConfig
        from ndebench.models.registry import list_models
        from ndebench.platform.spec.config import TrainingConfig
        from ndebench.platform.worker.loop import run_trial
        from ndebench.platform.worker.spec import TrialSpec
        from ndebench.regularizers.registry import list_regularizers

        spec = TrialSpec(model="plugin_cde", dataset="plugin_waves", regularizer="plugin_none",
                         model_params={"hidden_size": 8}, training=TrainingConfig(epochs=1, threads=1),
                         solver=SolverConfig("euler"))
        result = run_trial(spec)
        print(json.dumps({"models": "plugin_cde" in list_models(), "regs": "plugin_none" in list_regularizers(),
                          "data": "plugin_waves" in list_datasets(), "status": result.status,
                          "acc": result.test["test_accuracy"]}))
    ''', env)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["models"] and found["regs"] and found["data"] and found["status"] == "ok"
    assert 0.0 <= found["acc"] <= 1.0


@pytest.mark.system
def test_entry_point_datasets_pass_the_cli_with_and_without_their_facts(tmp_path):
    """``plugin_waves`` registers only a summary, ``plugin_pairs`` every fact (files, probe, shape, metric):
    both are listed, validated, checked and preflighted by the CLI, and their metric reaches the tags."""
    env = make_plugin(tmp_path / "site", PLUGIN)
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "plugin.yaml"
    config.write_text(json.dumps({"study": "plugin", "models": ["plugin_cde"], "data_dir": str(data),
                                  "datasets": ["plugin_waves", "plugin_pairs"], "regularizers": ["none"]}))
    out = _python(f'''
        import json
        from pathlib import Path
        from ndebench.datasets.check import preflight_problems
        from ndebench.platform.cli.main import main
        from ndebench.platform.spec.config import load_spec
        from ndebench.platform.spec.plan import sweep_cells
        from ndebench.platform.engine.sweep import Sweep
        from ndebench.platform.engine.trainable import trial_tags
        from ndebench.platform.worker.build import build_trial
        from ndebench.platform.worker.spec import TrialSpec

        data, config = {str(data)!r}, {str(config)!r}
        codes = [main(["datasets", "list", "--data-dir", data]), main(["validate", config]), main(["run", config])]
        Path(data, "waves.txt").write_text("wave")
        codes.append(main(["datasets", "check", "plugin_pairs", "--data-dir", data]))
        Path(data, "waves.txt").write_text("waves")
        codes += [main(["datasets", "check", name, "--data-dir", data]) for name in ("plugin_waves", "plugin_pairs")]
        assert preflight_problems("plugin_waves", data) == preflight_problems("plugin_pairs", data) == []
        sweep = Sweep(load_spec(config), tracking_uri="sqlite:///unused.db", storage_path="ray")
        cells = {{c.dataset: sweep.ctx.cell_tags(c)["metric"] for c in sweep_cells(sweep.spec)}}
        config = {{"study": "s", "model": "plugin_cde", "regularizer": "none", "cell": "c"}}
        trials = {{name: (trial_tags({{**config, "dataset": name}}, "tune")["metric"],
                         build_trial(TrialSpec("plugin_cde", name, "none", data_dir=data)).metric_name)
                  for name in ("plugin_waves", "plugin_pairs")}}
        print(json.dumps({{"codes": codes, "cells": cells, "trials": trials}}))
    ''', env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["codes"] == [0, 0, 2, 1, 0, 0], out.stdout + out.stderr
    listing = out.stdout.split("plugin_pairs", 1)[1].split("\n")[0]
    assert " no " in listing and "40 x 16 x 2, 2 classes" in listing and listing.endswith("missing")
    waves = out.stdout.split("plugin_waves", 1)[1].split("\n")[0]
    assert "yes" in waves and "unknown" in waves and "provided by the dataset's factory" in waves
    assert "ndebench run: error: dataset 'plugin_pairs' needs files that are not on disk" in out.stderr
    assert str(data / "waves.txt") in out.stderr and "Ray cluster" not in out.stdout
    assert f"problem: {data / 'waves.txt'} does not say 'waves'" in out.stdout
    assert "plugin_waves: OK" in out.stdout and "plugin_pairs: OK" in out.stdout
    assert "Traceback" not in out.stderr and not (tmp_path / "mlflow.db").exists()
    assert found["cells"] == {"plugin_waves": "accuracy", "plugin_pairs": "auroc"}
    assert found["trials"] == {"plugin_waves": ["accuracy", "accuracy"], "plugin_pairs": ["auroc", "auroc"]}


def test_a_broken_plugin_is_named(tmp_path):
    env = make_plugin(tmp_path / "site", body="raise RuntimeError('boom')\n")
    out = _python("from ndebench.models.registry import list_models; list_models()", env)
    assert out.returncode != 0
    assert "plugin 'plugin' of entry-point group 'ndebench.models'" in out.stderr and "boom" in out.stderr


def test_plugins_key_modules_are_imported(tmp_path):
    from ndebench.platform.common.plugins import PluginError, import_plugins

    with pytest.raises(PluginError, match="'no_such_module_xyz'"):
        import_plugins(["no_such_module_xyz"])


def test_a_registry_loads_its_builtins_once_on_first_lookup(tmp_path, monkeypatch):
    import types

    from ndebench.platform.common.registry import Registry, UnknownNameError

    holder = types.ModuleType("widget_holder")
    holder.REGISTRY, holder.imports = Registry("widget", builtins="widget_builtins"), 0
    monkeypatch.setitem(sys.modules, "widget_holder", holder)
    (tmp_path / "widget_builtins.py").write_text(
        "import widget_holder\nwidget_holder.imports += 1\nwidget_holder.REGISTRY.register('cog', info='a cog')(dict)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        registry = holder.REGISTRY
        assert registry.names() == ["cog"] and registry.info("cog") == "a cog"
        assert registry.create("cog", teeth=3) == {"teeth": 3} and "cog" in registry and holder.imports == 1
        with pytest.raises(UnknownNameError, match="unknown widget 'gear'; valid widgets: cog"):
            registry.info("gear")
        with pytest.raises(ValueError, match=r"widget 'cog' is already registered; registered: \['cog'\]"):
            registry.register("cog")(dict)
    finally:
        sys.modules.pop("widget_builtins", None)


def test_a_plugin_regularizers_hyperparameter_gets_its_sensitivity_table(tmp_path, uri):
    """The report of a study with ``plugin_alpha``'s fixed-alpha variant cells has alpha's table (the baseline
    row, then one row per alpha), although nothing outside the plugin names alpha."""
    env = make_plugin(tmp_path / "site", ALPHA_PLUGIN, module="ndebench_alphaplugin")
    cells = {("none", None): (0.5, 0.75), ("plugin_alpha", 0.1): (0.625, 0.6875), ("plugin_alpha", 0.5): (0.75, 0.875)}
    log_evaluate_runs(uri, "alpha", [
        {"model": "neural_cde", "dataset": "synthetic", "regularizer": regularizer, "seed": seed,
         "variant": "" if alpha is None else f"plugin_alpha[alpha={alpha:g}]",
         "params": {} if alpha is None else {"alpha": alpha}, "metrics": {"test_accuracy": score}}
        for (regularizer, alpha), scores in cells.items() for seed, score in enumerate(scores)])
    out = _python(f'''
        from ndebench.platform.cli.main import main
        raise SystemExit(main(["report", "--study", "alpha", "--tracking-uri", {uri!r}, "--out", "out"]))
    ''', env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (tmp_path / "out" / "alpha" / "sensitivity.md").read_text()
    block = text.split("## plugin_alpha: alpha on synthetic\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in block.splitlines() if line.startswith("| ")]
    assert rows[0] == ["alpha", "neural_cde"]
    expected = {"none" if alpha is None else f"{alpha:g}": f"{np.mean(s):.3f} ({np.std(s, ddof=1):.3f})"
                for (_, alpha), s in cells.items()}
    assert {row[0]: row[1].strip("*") for row in rows[1:]} == expected
