"""`ndebench server --auth`: credentials never from the command line, a warning when exposed without auth."""
from __future__ import annotations

import configparser
import stat

import pytest
from ndebench.platform.engine.auth import AuthError, admin_credentials, auth_environment, exposure_warning
from ndebench.platform.engine.server import ServerSettings, server_command


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


def test_exposure_warning_only_beyond_localhost_without_auth():
    assert exposure_warning("127.0.0.1", auth=False) is None
    assert exposure_warning("0.0.0.0", auth=True) is None
    assert "--auth" in exposure_warning("0.0.0.0", auth=False)


def test_server_auth_without_credentials_exits_2_before_starting(monkeypatch, tmp_path, capsys):
    from ndebench.platform.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    assert main(["server", "--auth", "--port", "5999"]) == 2
    assert "MLFLOW_TRACKING_PASSWORD" in capsys.readouterr().err
    assert not (tmp_path / "mlflow-auth").exists()
