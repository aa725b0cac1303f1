import pytest
import yaml

from accelbench.core.systems import load_systems, match_system, require_backend, resolve_system
from accelbench.errors import ConfigError, SystemMismatchError

CPU_ONLY = {"backend": "cpu", "count": 1, "names": []}


def test_all_systems_load(systems):
    assert {"cpu", "v100", "a100", "h100", "h200", "gaudi1", "gaudi2", "gaudi3"} <= set(systems)
    assert systems["h200"].backend == "cuda" and systems["gaudi2"].backend == "hpu"
    assert not systems["v100"].supports("tf32") and systems["a100"].supports("tf32")


@pytest.mark.parametrize(
    "name,backend,expected",
    [
        ("NVIDIA H200", "cuda", "h200"),
        ("NVIDIA H100 80GB HBM3", "cuda", "h100"),
        ("NVIDIA A100-SXM4-40GB", "cuda", "a100"),
        ("Tesla V100-SXM2-32GB", "cuda", "v100"),
        ("GAUDI2", "hpu", "gaudi2"),
        ("GAUDI3", "hpu", "gaudi3"),
        ("GAUDI", "hpu", "gaudi1"),
    ],
)
def test_auto_detection_by_device_name(systems, name, backend, expected):
    found = {"backend": backend, "count": 1, "names": [name]}
    assert resolve_system("auto", systems, found).name == expected


def test_auto_without_accelerator_is_cpu(systems):
    assert resolve_system("auto", systems, CPU_ONLY).name == "cpu"


def test_unknown_gpu_and_unknown_name(systems):
    with pytest.raises(ConfigError, match="L40S.*no system file matches"):
        resolve_system("auto", systems, {"backend": "cuda", "count": 1, "names": ["NVIDIA L40S"]})
    with pytest.raises(ConfigError, match="unknown system 'mi300'.*known systems:.*h100"):
        resolve_system("mi300", systems)


def test_missing_backend_fails_naming_system_and_what_was_found(systems):
    with pytest.raises(SystemMismatchError) as err:
        require_backend(systems["a100"], CPU_ONLY)
    assert "'a100'" in str(err.value) and "'cuda'" in str(err.value) and "no accelerator" in str(err.value)
    with pytest.raises(SystemMismatchError, match="gaudi2"):
        require_backend(systems["gaudi2"], {"backend": "cuda", "count": 1, "names": ["NVIDIA H200"]})
    with pytest.raises(SystemMismatchError, match="2 device"):
        require_backend(systems["h200"], {"backend": "cuda", "count": 1, "names": ["NVIDIA H200"]}, devices=2)
    assert require_backend(systems["cpu"], CPU_ONLY) == CPU_ONLY


def test_bad_system_file(tmp_path):
    (tmp_path / "x1.yaml").write_text(
        yaml.safe_dump(
            {"name": "x2", "backend": "cuda", "devices": 1, "precisions": ["fp32"], "image": "cuda", "scale": "paper"}
        )
    )
    with pytest.raises(ConfigError, match="must equal the file name"):
        load_systems(tmp_path)
    (tmp_path / "x1.yaml").write_text(
        yaml.safe_dump(
            {"name": "x1", "backend": "rocm", "devices": 1, "precisions": ["fp32"], "image": "cuda", "scale": "paper"}
        )
    )
    with pytest.raises(ConfigError, match=r"x1.yaml.*backend.*'rocm'.*allowed values"):
        load_systems(tmp_path)
    with pytest.raises(ConfigError, match="no system files"):
        load_systems(tmp_path / "empty")


def test_match_prefers_longest(systems):
    assert match_system("HL-225 GAUDI2", "hpu", systems).name == "gaudi2"
    assert match_system("NVIDIA H200", "hpu", systems) is None


def _with_copy_of_cpu(tmp_path, name: str, match: list[str]):
    """``tmp_path/systems``: the repository's system files and a copy of cpu.yaml named ``name``."""
    import shutil
    from pathlib import Path

    folder = tmp_path / "systems"
    shutil.copytree(Path(__file__).resolve().parents[2] / "config/systems", folder)
    raw = yaml.safe_load((folder / "cpu.yaml").read_text())
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({**raw, "name": name, "match": match}))
    return folder


def test_a_copy_of_cpu_is_selected_by_name_and_matched_by_its_cpu_model(tmp_path):
    """A copy of cpu.yaml is a system like any other: by name, and under `auto` where its `match` names
    this CPU's model (else the file named cpu)."""
    systems = load_systems(_with_copy_of_cpu(tmp_path, "epyc2", ["EPYC 7B13"]))
    assert resolve_system("epyc2", systems).name == "epyc2"
    epyc = {"backend": "cpu", "count": 1, "names": ["AMD EPYC 7B13 64-Core Processor"]}
    assert resolve_system("auto", systems, epyc).name == "epyc2"
    other = {"backend": "cpu", "count": 1, "names": ["Intel(R) Xeon(R) Platinum 8480+"]}
    assert resolve_system("auto", systems, other).name == "cpu"


def test_check_system_selects_a_copy_of_cpu_by_name(tmp_path, monkeypatch, capsys):
    """`accelbench check-system --system <name>` and `--config system=<name>` (as snakemake takes it) resolve a copy
    of cpu.yaml; before the fix `--config system=epyc2` read 'system=epyc2' as a file ("file not found")."""
    import json
    from pathlib import Path

    from accelbench.cli import main

    folder = _with_copy_of_cpu(tmp_path, "epyc2", [])
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    for argv in (
        ["check-system", "--system", "epyc2", "--config", f"systems_dir={folder}"],
        ["check-system", "--config", "config/config.yaml", f"systems_dir={folder}", "system=epyc2"],
    ):
        assert main(argv) in (0, None)
        assert json.loads(capsys.readouterr().out)["system"]["name"] == "epyc2"
    assert main(["check-system", "--system", "nosuch", "--config", f"systems_dir={folder}"]) == 2
    assert "unknown system 'nosuch'" in capsys.readouterr().err
