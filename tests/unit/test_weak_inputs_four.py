"""Weak inputs, round four: each case now ends in one line naming the key or file. Each test fails on 327e108 (the
case's old behaviour is in its docstring); the reads routed through core/files.py since are checked at the end with
a FIFO planted at each one's path (one line, within a time limit; the old reads blocked)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from accelbench.errors import AccelbenchError, CampaignError, ConfigError

REPO = Path(__file__).resolve().parents[2]


def _python(code: str, *args: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def _check_system(*config: str, env: dict | None = None) -> subprocess.CompletedProcess:
    code = "import sys; from accelbench.cli import main; sys.exit(main())"
    return _python(code, "check-system", "--config", *config, env=env)


# --------------------------------------------------------------------------- results_dir=~nobody/x
def test_results_dir_in_a_home_that_does_not_exist_is_one_line(tmp_path):
    """`results_dir=~nobody/x` planned a new top folder `/nonexistent/x` as root (old: check-system passed, rc 0)."""
    proc = _check_system("results_dir=~/x", env={"HOME": str(tmp_path / "gone")})
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "config key 'results_dir': '~/x': the home folder of ~" in last and "does not exist" in last
    assert not (tmp_path / "gone").exists()


def test_results_dir_whose_top_folder_would_be_made_at_the_root_is_one_line():
    from accelbench.core.config import results_dir_errors

    top = "/nonexistent-accelbench-weak-test"
    assert not os.path.exists(top)
    (line,) = results_dir_errors(f"{top}/x")
    assert line.startswith("config key 'results_dir': ") and f"its top folder {top} does not exist" in line
    home = os.path.expanduser("~nobody")
    if not home.startswith("~") and not os.path.isdir(home):  # Debian's nobody: /nonexistent
        (line,) = results_dir_errors("~nobody/x")
        assert f"the home folder of ~nobody ({home}) does not exist" in line
    assert results_dir_errors("results") == [] and results_dir_errors("/tmp/x/y") == []


# --------------------------------------------------------------------------- one error line of a megabyte
def test_cap_line_keeps_the_head_and_tail_of_a_long_error():
    from accelbench.cli.terminal import MAX_ERROR_CHARS, cap_line

    line = "config file /a/b.yaml: key " + "k" * 1_000_000 + " is not allowed; remove it"
    capped = cap_line(line)
    assert len(capped) == MAX_ERROR_CHARS and capped.startswith("config file /a/b.yaml: key kkk")
    assert capped.endswith("is not allowed; remove it")
    left_out = int(capped.split(" ... (")[1].split(" characters")[0])
    mark = f" ... ({left_out} characters left out) ... "
    assert mark in capped and len(capped) - len(mark) + left_out == len(line)  # the count is exact
    assert cap_line("short") == "short"


def test_a_long_error_reaches_the_terminal_capped(capsys):
    """An error built from user data was printed whole: 989 KB in one line (old: no cap)."""
    from accelbench.cli import failure
    from accelbench.cli.terminal import MAX_ERROR_CHARS, _for_terminal

    err = AccelbenchError("config file /a/b.yaml: " + "x" * 500_000 + " is not allowed")
    assert failure.report("check-system", err) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert len(line) <= MAX_ERROR_CHARS
    assert line.startswith("accelbench check-system: error: config file /a/b.yaml: xx") and line.endswith("allowed")
    record = logging.LogRecord("snakemake", logging.ERROR, "", 0, "results_dir " + "y" * 300_000, None, None)
    shown = _for_terminal(record, lambda r: r.getMessage())
    assert len(shown) <= MAX_ERROR_CHARS and shown.startswith("results_dir yyy")


def test_check_system_with_90000_unknown_keys_prints_short_lines(tmp_path):
    """A YAML of 90,000 unknown keys (under the 200,000-value bound): one line of 1,069,185 characters (old)."""
    big = tmp_path / "big.yaml"
    big.write_text("".join(f"key{i}: 1\n" for i in range(90_000)))
    proc = _check_system(str(big))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert max(map(len, proc.stderr.splitlines())) <= 2000
    assert "config key '<top level>': 90,000 keys are not allowed ('key0'" in proc.stderr


# --------------------------------------------------------------------------- container_uri: "{image:>1500000000}"
@pytest.mark.parametrize(
    "uri", ["docker://r/{image}:{image:>1500000000}", "docker://r/{image:>1500000000}", "docker://r/{image!r}"]
)
def test_container_uri_with_a_format_spec_is_refused_before_formatting(uri):
    """`{image:>1500000000}` built a 1.5 GB string, then failed without the key (old: MemoryError under a 1 GB
    address-space limit, or 1.6 GB and a bare error)."""
    code = (
        "import resource, sys; from types import SimpleNamespace\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from accelbench.cluster.containers import image_uri\n"
        "image_uri(SimpleNamespace(image='cuda', name='h100'), sys.argv[1], 'containers')\n"
    )
    proc = _python(code, uri)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("accelbench.errors.ConfigError: container_uri ") and "write plain {image}" in last


def test_plain_image_placeholder_still_formats():
    from accelbench.cluster.containers import image_uri

    uri = image_uri(SimpleNamespace(image="cuda", name="h100"), "docker://r/{image}:{{x}}", REPO / "containers")
    assert uri == "docker://r/cuda:{x}"
    with pytest.raises(ConfigError, match="container_uri"):
        image_uri(SimpleNamespace(image="cuda", name="h100"), "docker://r/{image:>9}", REPO / "containers")


# --------------------------------------------------------------------------- campaign file linked to /dev/zero
@pytest.mark.parametrize("kind, said", [("dev_zero", "a character device"), ("fifo", "a FIFO"), ("dir", "a folder")])
def test_campaign_file_that_is_no_plain_file_says_what_it_is(tmp_path, kind, said):
    """A campaign file linked to /dev/zero read 'no such file' (old)."""
    from accelbench.core import campaign

    path = tmp_path / "c.yaml"
    {"dev_zero": lambda: path.symlink_to("/dev/zero"), "fifo": lambda: os.mkfifo(path), "dir": path.mkdir}[kind]()
    with pytest.raises(CampaignError) as info:
        campaign.load(path)
    assert str(info.value) == f"campaign file {path}: not a plain file ({said}); move it away"
    with pytest.raises(CampaignError, match="no such file"):
        campaign.load(tmp_path / "missing.yaml")


# --------------------------------------------------------------------------- reads routed through core/files.py
_REF = "resources/reference"
ROUTED_READS = {  # name: (file planted as a FIFO, code calling the reader with it as sys.argv[1], what the line says)
    "claims_table.read_claims": (
        "study_b_claims.csv",
        "from accelbench.aggregate.claims_table import read_claims; read_claims(p, 'study_b')",
        "claims file",
    ),
    "energy.read_board_power": (
        "board_power.csv",
        "from accelbench.aggregate.energy import read_board_power; read_board_power(p)",
        "board power table",
    ),
    "llm_quant.read_model_cards": (
        "model_cards.csv",
        "from accelbench.experiments.llm_quant.tables_cells import read_model_cards; read_model_cards(p)",
        "model cards table",
    ),
    "llm_quant.read_reference": (
        "study_b_quantization.csv",
        "from accelbench.experiments.llm_quant.tables_rows import read_reference; read_reference(p)",
        "reference file",
    ),
    "lora.read_reference": (
        "study_b_finetune_runtime.csv",
        "from accelbench.experiments.lora.tables_rows import read_reference; read_reference(p)",
        "published LoRA runtimes",
    ),
    "sr3.read_reference": (
        "study_b_sr3_scaling.csv",
        "from accelbench.experiments.sr3.tables_rows import read_reference; read_reference(p)",
        "reference file",
    ),
    "unet3d.read_claims": (
        "study_a_claims.csv",
        "from accelbench.experiments.unet3d_ncu.tables_claims import read_claims; read_claims(p)",
        "claims file",
    ),
    "unet3d.overhead": (
        "result.json",
        "from accelbench.experiments.unet3d.overhead import study_a; study_a(SimpleNamespace(result=p))",
        "result file",
    ),
    "lora.overhead": (
        "result.json",
        "from accelbench.experiments.lora.overhead import lora; lora(SimpleNamespace(result=p))",
        "result file",
    ),
    "sr3.overhead": (
        "result.json",
        "from accelbench.experiments.sr3.overhead import sr3; sr3(SimpleNamespace(result=p))",
        "result file",
    ),
    "models.export.exported_info": (
        "accelbench.json",
        "from accelbench.models.export import exported_info; import os; exported_info(os.path.dirname(p))",
        "exported model info",
    ),
    "llm_quant.accuracy._task_config": (
        "task.yaml",
        "from accelbench.experiments.llm_quant.accuracy import _task_config; _task_config(p)",
        "lm-eval task file",
    ),
}


@pytest.mark.parametrize("name", sorted(ROUTED_READS))
def test_fifo_at_a_routed_read_is_one_line(tmp_path, name):
    """A FIFO at each read routed through core/files.py since 327e108: one line naming the file, within 30 s (the
    old reads blocked in open(); the reference readers guarded by is_file() said "no table" for a FIFO)."""
    file, call, what = ROUTED_READS[name]
    fifo = tmp_path / file
    os.mkfifo(fifo)
    code = "import sys; from types import SimpleNamespace\np = sys.argv[1]\n" + call
    proc = _python(code, str(fifo), timeout=30)
    assert proc.returncode != 0, proc.stdout[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert f"{what} {fifo}: not a plain file (a FIFO); move it away" in last, proc.stderr[-3000:]
