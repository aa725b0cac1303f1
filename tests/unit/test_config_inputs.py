"""Config values as a user writes them: a config file's YAML keeps its types (``repeat: "3"`` is a string, refused
naming the key) while ``--config`` text is coerced to the schema's types; ``container_uri`` is an image reference or a
``.sif`` path, never whitespace or shell syntax; a config file that is not YAML is named by ``accelbench
check-system`` (Snakemake's own message names no file)."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from tests.dag import SNAKEMAKE

from accelbench.core.config import validate_config
from accelbench.errors import ConfigError
from conftest import REPO

SCHEMA = REPO / "config/config.schema.yaml"


def _check_system(*config: str) -> subprocess.CompletedProcess:
    code = "import sys; from accelbench.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, "check-system", "--config", *config],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_a_quoted_integer_in_a_config_file_is_refused_naming_the_key(default_config):
    """Old: every string leaf was coerced, so a config file's `repeat: "3"` passed silently as 3."""
    cfg = copy.deepcopy(default_config)
    cfg["unet3d_profile"]["repeat"] = "3"
    with pytest.raises(ConfigError) as info:
        validate_config(copy.deepcopy(cfg), SCHEMA, text={})  # no --config: every value came from YAML
    assert str(info.value).splitlines()[1:] == [
        "  config: config key 'unet3d_profile.repeat': '3' is a string, not an integer (write 3)"
    ]
    # the same text given on the command line (`--config 'unet3d_profile={repeat: 3}'`: Snakemake hands nested
    # values over as strings) is coerced, and only there: another quoted integer beside it is still refused
    given = {"unet3d_profile": {"repeat": "3"}}
    assert validate_config(copy.deepcopy(cfg), SCHEMA, text=given)["unet3d_profile"]["repeat"] == 3
    cfg["unet3d_profile"]["warmup"] = "1"
    with pytest.raises(ConfigError, match=r"'unet3d_profile.warmup': '1' is a string, not an integer \(write 1\)"):
        validate_config(copy.deepcopy(cfg), SCHEMA, text=given)


def test_check_system_refuses_a_quoted_integer_of_a_file_and_coerces_key_value_text(tmp_path):
    path = tmp_path / "quoted.yaml"
    path.write_text('unet3d_profile:\n  repeat: "3"\n')
    proc = _check_system(str(path))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "  config: config key 'unet3d_profile.repeat': '3' is a string, not an integer (write 3)"
    )
    proc = _check_system("unet3d_profile={repeat: '3'}", "system=cpu")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_snakemake_configfile_with_a_quoted_integer_names_the_key(tmp_path, default_config):
    """Through the Snakefile (common.smk passes Snakemake's `--config` entries as the text to coerce)."""
    cfg = copy.deepcopy(default_config)
    cfg["unet3d_profile"]["repeat"] = "3"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))  # a --configfile replaces config/config.yaml
    base = [*SNAKEMAKE, "-n", "-d", str(tmp_path), "--configfile", str(tmp_path / "c.yaml")]
    proc = subprocess.run(base, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    said = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "unet3d_profile" in ln]
    assert said == ["  config: config key 'unet3d_profile.repeat': '3' is a string, not an integer (write 3)"], said
    nested = [*base, "--config", "experiments=[unet3d_profile]", "unet3d_profile={repeat: 3}"]  # text: coerced
    proc = subprocess.run(nested, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.parametrize(
    "uri",
    [
        "docker://ghcr.io/accelbench/accelbench-{image}:0.1.0",
        "oras://registry.example.org/accelbench-{image}@sha256:0123abcd",
        "library://accelbench/default/accelbench-{image}:0.1.0",
        "shub://accelbench/{image}",
        "/images/accelbench-{image}.sif",
        "images/accelbench-{image}.sif",
    ],
)
def test_container_uri_accepts_image_references_and_sif_paths(default_config, uri):
    cfg = copy.deepcopy(default_config)
    cfg["container_uri"] = uri
    assert validate_config(cfg, SCHEMA)["container_uri"] == uri


@pytest.mark.parametrize(
    "uri",
    [
        "docker://ghcr.io/accelbench/accelbench-{image} :0.1.0",  # Snakemake: "containing whitespace", no key
        "docker://r/$(touch /tmp/x)/{image}",  # accepted before, unchecked
        "docker://r/`id`/{image}",
        "docker://r/{image};rm -rf x",
        "http://r/{image}",
        "accelbench-{image}.img",
        "docker://r/{image}\n",
    ],
)
def test_container_uri_with_whitespace_or_shell_syntax_is_one_line_naming_the_key(default_config, uri):
    cfg = copy.deepcopy(default_config)
    cfg["container_uri"] = uri
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, SCHEMA)
    (line,) = str(info.value).splitlines()[1:]
    assert line.startswith(f"  config: config key 'container_uri': {uri!r} does not match ")


def test_a_config_file_that_is_not_yaml_is_named_by_check_system(tmp_path):
    """Snakemake reads `--configfile` before the Snakefile and says only "Config file is not valid JSON or YAML";
    docs/running.md points at `accelbench check-system --config FILE`, which names the file and the line."""
    path = tmp_path / "broken.yaml"
    path.write_text("unet3d_profile:\n  repeat: [3\n")
    proc = _check_system(str(path))
    assert proc.returncode == 2
    first = proc.stderr.strip().splitlines()[0]
    assert first.startswith(f"accelbench check-system: error: {path} is not valid YAML"), proc.stderr
    assert "line 2" in proc.stderr
    doc = (REPO / "docs/running.md").read_text()
    assert "accelbench check-system --config FILE" in doc and "not valid JSON or YAML" in doc
