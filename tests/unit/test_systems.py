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
