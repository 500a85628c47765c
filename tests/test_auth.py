"""`ndebench server --auth`: credentials never from the command line; `server` and `ui` beyond this machine refuse
to start without `--auth` unless `--insecure` opts in."""
from __future__ import annotations

import configparser
import stat

import pytest
from ndebench.platform.server.auth import AuthError, admin_credentials, auth_environment, check_exposure, is_loopback
from ndebench.platform.server.launch import ServerSettings, server_command


def test_credentials_from_environment_or_file(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "team")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "a-long-password")
    assert admin_credentials() == ("team", "a-long-password")
    secret = tmp_path / "admin.ini"
    secret.write_text("username = lead\npassword = another-long-one\n")
    assert admin_credentials(str(secret)) == ("lead", "another-long-one")


def test_missing_or_short_credentials_are_refused(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    with pytest.raises(AuthError, match="MLFLOW_TRACKING_USERNAME"):
        admin_credentials()
    secret = tmp_path / "admin.ini"
    secret.write_text("username = lead\npassword = short\n")
    with pytest.raises(AuthError, match="at least 12"):
        admin_credentials(str(secret))


def test_auth_config_is_owner_only_and_the_command_line_holds_no_secret(tmp_path):
    env = auth_environment(tmp_path / "auth", "lead", "another-long-one")
    path = tmp_path / "auth" / "basic_auth.ini"
    assert env["MLFLOW_AUTH_CONFIG_PATH"] == str(path.resolve()) and len(env["MLFLOW_FLASK_SERVER_SECRET_KEY"]) >= 32
    assert (env["MLFLOW_AUTH_ADMIN_USERNAME"], env["MLFLOW_AUTH_ADMIN_PASSWORD"]) == ("lead", "another-long-one")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and "another-long-one" not in path.read_text()
    parsed = configparser.ConfigParser(interpolation=None)
    parsed.read(path)
    assert parsed["mlflow"]["default_permission"] == "READ"
    command = server_command(ServerSettings("sqlite:////x.db", "/a", auth=True, allowed_hosts=("h",)))
    assert command[-2:] == ["--app-name", "basic-auth"] and "another-long-one" not in " ".join(command)


def test_loopback_hosts():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.1.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.1.2.3", "no-such-host.invalid"))


def test_exposure_beyond_localhost_needs_auth_or_insecure():
    assert check_exposure("server", "127.0.0.1", auth=False, insecure=False) is None
    assert check_exposure("server", "0.0.0.0", auth=True, insecure=False) is None
    with pytest.raises(AuthError, match=r"server --host 0\.0\.0\.0 without --auth .*pass --auth .* or --insecure"):
        check_exposure("server", "0.0.0.0", auth=False, insecure=False)
    warning = check_exposure("ui", "10.1.2.3", auth=False, insecure=True)
    assert warning.startswith("warning: --insecure: ui --host 10.1.2.3 without --auth")


@pytest.mark.parametrize("command", ["server", "ui"])
def test_exposed_without_auth_exits_2_in_one_line_before_starting(command, monkeypatch, tmp_path, capsys):
    from ndebench.platform.cli import main as cli
    from ndebench.platform.server import launch as server

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(server, "serve", lambda *a, **k: pytest.fail("started"))
    assert cli.main([command, "--host", "0.0.0.0", "--port", "5999"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"ndebench {command}: error: {command} --host 0.0.0.0")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlflow-auth").exists()


def test_server_auth_without_credentials_exits_2_before_starting(monkeypatch, tmp_path, capsys):
    from ndebench.platform.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    assert main(["server", "--auth", "--port", "5999"]) == 2
    assert "MLFLOW_TRACKING_PASSWORD" in capsys.readouterr().err
    assert not (tmp_path / "mlflow-auth").exists()


@pytest.mark.parametrize("ttl", [60, 0])
def test_mlflow_reads_the_password_cache_ttl_that_the_config_sets(tmp_path, monkeypatch, ttl):
    from mlflow.server.auth.config import read_auth_config

    env = auth_environment(tmp_path / "auth", "lead", "another-long-one", cache_ttl_s=ttl)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert read_auth_config().auth_cache_ttl_seconds == ttl


def test_the_password_cache_ttl_is_whole_seconds(capsys):
    from ndebench.platform.cli.arguments import build_parser

    assert build_parser().parse_args(["server", "--auth"]).auth_cache_ttl == 60
    assert build_parser().parse_args(["ui", "--auth", "--auth-cache-ttl", "0"]).auth_cache_ttl == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["server", "--auth", "--auth-cache-ttl", "-5"])
    assert "expected whole seconds >= 0, got '-5'" in capsys.readouterr().err
