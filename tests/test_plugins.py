"""Components from a package outside ndebench, found through entry points, in a fresh interpreter."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PLUGIN = '''
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
'''


def make_plugin(root: Path, body: str = PLUGIN) -> dict[str, str]:
    """A distribution ``ndebench-testplugin`` on ``root`` whose module registers one of each component."""
    (root / "ndebench_testplugin").mkdir(parents=True)
    (root / "ndebench_testplugin" / "__init__.py").write_text(textwrap.dedent(body))
    info = root / "ndebench_testplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ndebench-testplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "".join(f"[ndebench.{group}]\nplugin = ndebench_testplugin\n\n"
                for group in ("models", "regularizers", "datasets"))
    )
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)


def test_entry_point_components_register_and_train(tmp_path):
    env = make_plugin(tmp_path / "site")
    out = _python('''
        import json
        from ndebench.datasets.registry import list_datasets
        from ndebench.models.integrate import SolverConfig
        from ndebench.models.registry import list_models
        from ndebench.platform.config import TrainingConfig
        from ndebench.platform.trial import TrialSpec, run_trial
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


def test_a_broken_plugin_is_named(tmp_path):
    env = make_plugin(tmp_path / "site", body="raise RuntimeError('boom')\n")
    out = _python("from ndebench.models.registry import list_models; list_models()", env)
    assert out.returncode != 0
    assert "plugin 'plugin' of entry-point group 'ndebench.models'" in out.stderr and "boom" in out.stderr


def test_plugins_key_modules_are_imported(tmp_path):
    from ndebench.platform.plugins import PluginError, import_plugins

    with pytest.raises(PluginError, match="'no_such_module_xyz'"):
        import_plugins(["no_such_module_xyz"])


def test_a_registry_loads_its_builtins_once_on_first_lookup(tmp_path, monkeypatch):
    import types

    from ndebench.platform.registry import Registry, UnknownNameError

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
