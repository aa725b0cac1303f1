"""Hostile inputs, round four (unbounded reads): reads outside core/files.py were unbounded. Each case ran
in a fresh interpreter with a time limit (a read that blocks fails the test instead of hanging it) or in memory
bounds; each fails on the old code (hang, MemoryError, bare traceback, advice to unpickle, or a parse that takes
gigabytes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def _python(code: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO
    )


def _one_line_error(proc: subprocess.CompletedProcess, *expected: str) -> str:
    """The last line of a failed run's stderr, which must hold every ``expected`` text (the error, one line)."""
    assert proc.returncode != 0, proc.stdout[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    for text in expected:
        assert text in last, proc.stderr[-3000:]
    return last


# --------------------------------------------------------------------------- C: FIFOs and devices, one line, no hang
def test_fifo_samples_npz_copied_in_is_one_line(tmp_path):
    """`study_b_sr3_aggregate` blocked in np.load on a copied-in samples.npz FIFO."""
    folder = tmp_path / "results/lab/sr3_scaling/faithful/devices_1"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "samples.npz")
    code = (
        "import sys, pandas as pd; from accelbench.experiments.sr3.tables_figures import fig_samples\n"
        "df = pd.DataFrame([{'status': 'ok', 'hardware': 'lab', 'iterations_run': 1,"
        " '_artefacts': {'samples': 'samples.npz'},"
        " '_path': sys.argv[1]}])\n"
        "fig_samples(df, sys.argv[2])"
    )
    proc = _python(code, str(folder / "result.json"), str(tmp_path / "fig.png"))
    _one_line_error(proc, "SR3 samples file", "samples.npz: not a plain file")


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_own_npy_map_fifo_or_dev_zero_is_one_line(tmp_path, kind):
    """A FIFO `*.npy` in SR3's own folder passed `-n`, then `sr3_prepare` hung; one linked to /dev/zero was answered
    with advice to load it with allow_pickle."""
    p = tmp_path / "map.npy"
    os.mkfifo(p) if kind == "fifo" else p.symlink_to("/dev/zero")
    code = (
        "import sys; from pathlib import Path; from accelbench.experiments.sr3 import data as sky; "
        "sky._read_image(Path(sys.argv[1]))"
    )
    last = _one_line_error(_python(code, str(p)), "DataError", "sky image", "map.npy: not a plain file")
    assert "allow_pickle" not in last


def test_pickled_npy_is_refused_never_unpickled(tmp_path):
    from accelbench.core import files
    from accelbench.errors import DataError

    p = tmp_path / "objects.npy"
    np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match=r"objects\.npy: holds Python objects \(pickled\), not plain arrays"):
        files.load_numpy(p, "sky image", error=DataError)
    np.savez(tmp_path / "ok.npz", a=np.arange(3))  # plain arrays load, from the checked file object
    assert files.load_numpy(tmp_path / "ok.npz")["a"].tolist() == [0, 1, 2]


def test_fifo_reference_run_readme_is_one_line(tmp_path):
    """`accelbench reference-runs --check` blocked reading a reference run's README.md FIFO."""
    run = min((d for d in (REPO / "reference_runs").iterdir() if (d / "run.yaml").is_file()), key=lambda d: d.name)
    root = tmp_path / "reference_runs"
    shutil.copytree(run, root / run.name)
    (root / run.name / "README.md").unlink()
    os.mkfifo(root / run.name / "README.md")
    code = (
        "import sys; from accelbench.aggregate.reference_runs import update\n"
        "update(sys.argv[1], sys.argv[2], check=True)"
    )
    proc = _python(code, str(root), str(REPO / "README.md"))
    _one_line_error(proc, "generated file", "README.md: not a plain file")


def test_slurm_site_file_fifo_or_duplicate_key_is_one_line(tmp_path):
    """`ACCELBENCH_SLURM_SITE` at a FIFO hung every DAG build (even a local `snakemake -n`): load_site read it
    unbounded; a key given twice was silently last-wins."""
    fifo = tmp_path / "site.yaml"
    os.mkfifo(fifo)
    code = "import sys; from accelbench.cluster.multinode import load_site; load_site(sys.argv[1])"
    _one_line_error(_python(code, str(fifo)), "ConfigError", "Slurm site file", "site.yaml: not a plain file")
    from accelbench.cluster.multinode import load_site
    from accelbench.errors import ConfigError

    twice = tmp_path / "twice.yaml"
    twice.write_text("multinode:\n  exclusive: false\n  exclusive: true\n")
    with pytest.raises(ConfigError, match="twice.yaml: line 3: key 'exclusive' is given twice"):
        load_site(twice)
    assert load_site(tmp_path / "absent.yaml") == {}


# --------------------------------------------------------------------------- D: memory, not only bytes
def test_result_of_many_empty_lists_is_refused_before_parsing(tmp_path):
    """A 255 MiB result `{"a":[[],[],...]}` took 56 s and 6.58 GB in validate-results (a bare MemoryError under a
    3 GB limit). The same shape at 13 MB (4.4M values, ~0.35 GB parsed before) is refused before parsing, in one
    line naming the file and the bound."""
    from accelbench.core import files, results
    from accelbench.errors import ResultError

    p = tmp_path / "result.json"
    n = files.MAX_JSON_NODES + 400_000
    p.write_text('{"a":[' + ",".join(["[]"] * n) + "]}")
    t0 = time.perf_counter()
    with pytest.raises(
        ResultError,
        match=rf"result.json: holds up to [\d,]+ values, more than such a file has "
        rf"\({files.MAX_JSON_NODES:,}\)",
    ) as err:
        results.read_json(p)
    assert time.perf_counter() - t0 < 5 and "\n" not in str(err.value)
    ok = tmp_path / "ok.json"  # a real result is far below the bound
    shutil.copy(next((REPO / "reference_runs").glob("*/results/*/unet3d_ncu/**/result.json")), ok)
    assert isinstance(results.read_json(ok), dict)


def test_yaml_of_too_many_values_is_refused_before_parsing(tmp_path):
    from accelbench.core.config import MAX_YAML_NODES, read_yaml
    from accelbench.errors import ConfigError

    p = tmp_path / "config.yaml"
    p.write_text("a: [" + ",".join(["[]"] * (MAX_YAML_NODES + 1)) + "]\n")
    t0 = time.perf_counter()
    with pytest.raises(
        ConfigError,
        match=rf"config.yaml: holds up to [\d,]+ values, more than such a file has "
        rf"\({MAX_YAML_NODES:,}\)",
    ):
        read_yaml(p)
    assert time.perf_counter() - t0 < 2


def test_kernel_table_huge_or_with_a_huge_cell_names_the_file(tmp_path):
    """A copied-in kernels.csv linked to a 2 GB file took 4.35 GB, then "field larger than field limit" without the
    file's name."""
    from accelbench.errors import DataError
    from accelbench.measure.kernel_classes import MAX_KERNEL_TABLE_BYTES, read_kernel_table

    big = tmp_path / "big.csv"
    with open(big, "wb") as fh:
        fh.truncate(2 * 2**30)  # sparse: no disk used
    table = tmp_path / "kernels.csv"
    table.symlink_to(big)
    with pytest.raises(
        DataError,
        match=rf"kernel table .*kernels.csv: \d+ bytes, more than such a file has "
        rf"\({MAX_KERNEL_TABLE_BYTES}\)",
    ):
        read_kernel_table(table)
    cell = tmp_path / "cell.csv"
    cell.write_text("name,calls,device_time_us\n" + '"' + "x" * (2 * 2**20) + '",1,2\n')
    with pytest.raises(DataError, match=r"kernel table .*cell.csv: line \d+: not CSV \(field larger than"):
        read_kernel_table(cell)
    os.mkfifo(tmp_path / "fifo.csv")
    code = "import sys; from accelbench.measure.kernel_classes import read_kernel_table; read_kernel_table(sys.argv[1])"
    _one_line_error(_python(code, str(tmp_path / "fifo.csv")), "fifo.csv: not a plain file")


# --------------------------------------------------------------------------- WEAK: big inputs hashed once
def test_big_file_digest_is_kept_across_processes_by_its_stamp(tmp_path, monkeypatch):
    """A 20 GB file linked into SR3's own folder, or named in a result's inputs_sha256, was hashed again on every DAG
    build (dry run 39-54 s). Its digest is now kept by (path, device, inode, size, mtime_ns, ctime_ns); a changed
    file (same size and mtime: ctime differs) is hashed again."""
    from accelbench.core import digests

    monkeypatch.chdir(tmp_path)
    big = tmp_path / "map.npy"
    big.write_bytes(b"\1" * digests.KEEP_BYTES)
    first = digests.digest(big)
    monkeypatch.setattr(digests, "_CACHE", {})  # a new process: only the kept stamps remain
    monkeypatch.setattr(digests, "_kept", None)
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    assert digests.digest(big) == first and str(big) not in opened  # not read again
    st = big.stat()
    big.write_bytes(b"\2" * digests.KEEP_BYTES)
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert digests.digest(big) != first and str(big) in opened
    assert json.loads(digests.STAMPS.read_text())  # the stamps file, this user's
