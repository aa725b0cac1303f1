"""Untrusted ground, the Kubernetes profile. Site values are typed (``host_ipc: "false"`` rendered hostIPC true,
``image_pull_secrets: abc`` became three secrets, ``namespace: a/b`` was rendered), a duplicate key is refused,
``status`` fails a job after repeated kubectl errors (it said ``running`` for ever on "Unauthorized"), and a working
directory a double-quoted shell word would expand is refused when the profile is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from accelbench.cluster import kubernetes as k8s
from accelbench.errors import ConfigError
from conftest import REPO

SITE = REPO / "kubernetes/site.yaml"


def _site(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(SITE.read_text() + extra)
    return path


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('host_ipc: "false"\n', "host_ipc"),
        ('server_dry_run: "false"\n', "server_dry_run"),
        ('image_pull_secrets: "abc"\n', "image_pull_secrets"),
        ('namespace: "a/b"\n', "namespace"),
        ('ttl_seconds_after_finished: "one day"\n', "ttl_seconds_after_finished"),
    ],
)
def test_a_mistyped_site_value_is_one_line_naming_the_key(tmp_path, extra, key):
    text = SITE.read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith(key + ":")) + "\n" + extra
    path = tmp_path / "site.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        k8s.load_site(path)
    assert f"key '{key}'" in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_duplicate_key_in_the_site_file_is_refused(tmp_path):
    path = _site(tmp_path, "namespace: other\n")  # site.yaml has namespace: default
    with pytest.raises(ConfigError, match="'namespace' is given twice"):
        k8s.load_site(path)


def test_the_committed_site_file_still_loads():
    site = k8s.load_site(SITE)
    assert site["host_ipc"] is True and site["server_dry_run"] is True


def test_status_fails_the_job_after_repeated_kubectl_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    kubectl = tmp_path / "kubectl"
    kubectl.write_text("#!/bin/sh\necho 'error: You must be logged in to the server (Unauthorized)' >&2\nexit 1\n")
    kubectl.chmod(0o755)
    monkeypatch.setenv("ACCELBENCH_KUBECTL", str(kubectl))
    site = k8s.load_site(SITE)
    states = [k8s.status("default/job/accelbench-x-1-abc", site) for _ in range(k8s.MAX_KUBECTL_ERRORS)]
    assert states == [k8s.RUNNING] * (k8s.MAX_KUBECTL_ERRORS - 1) + [k8s.FAILED]
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"kubectl failed {k8s.MAX_KUBECTL_ERRORS} times in a row" in last and "Unauthorized" in last


def test_a_good_answer_resets_the_error_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kubectl = tmp_path / "kubectl"
    monkeypatch.setenv("ACCELBENCH_KUBECTL", str(kubectl))
    site = k8s.load_site(SITE)
    bad = "#!/bin/sh\necho Unauthorized >&2\nexit 1\n"
    good = '#!/bin/sh\necho \'{"kind": "Job", "status": {}}\'\n'
    for text in [bad] * (k8s.MAX_KUBECTL_ERRORS - 1) + [good] + [bad] * (k8s.MAX_KUBECTL_ERRORS - 1):
        kubectl.write_text(text)
        kubectl.chmod(0o755)
        assert k8s.status("default/job/j", site) == k8s.RUNNING


def test_a_working_directory_the_shell_would_expand_is_refused(tmp_path):
    bad = tmp_path / "$(touch${IFS}marker)" / "repo"
    bad.mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds '\\$'"):
        k8s.check_workdir(bad)
    assert not (tmp_path / "marker").exists() and not Path("marker").exists()
    k8s.check_workdir(tmp_path)  # a plain path is fine


def test_the_profile_checks_the_working_directory_before_submitting():
    profile = yaml.safe_load((REPO / "kubernetes/config.yaml").read_text())
    assert "check_workdir()" in "\n".join(profile["__definitions__"])


def test_a_failed_submit_says_why_on_stdout(tmp_path, capsys):
    """The executor shows only the submit command's stdout: "Error submitting jobscript (exit code 1):" was empty."""
    from accelbench import cli

    code = cli.main(["k8s", "--site", str(SITE), "submit", str(tmp_path / "missing.sh")])
    assert code != 0
    out = capsys.readouterr().out
    assert "accelbench k8s submit: error:" in out and "missing.sh" in out, out
    assert os.path.exists(SITE)
