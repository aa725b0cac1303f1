"""End to end: Study B's SR3 scaling part of the real Snakemake DAG on a tiny config (1 and 2 gloo ranks)."""

import json

import pandas as pd
import yaml

import result_keys
from dag import snakemake


def test_sr3_scaling_dag(tmp_path, tiny_config):
    cfg = dict(tiny_config, experiments=["sr3_scaling"])
    cfg["sr3_scaling"] = dict(cfg["sr3_scaling"], devices=[1, 2, 4096], configurations=["faithful"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    res = tmp_path / "results" / "cpu" / "sr3_scaling" / "faithful"
    one = json.loads((res / "devices_1" / "result.json").read_text())
    two = json.loads((res / "devices_2" / "result.json").read_text())
    big = json.loads((res / "devices_4096" / "result.json").read_text())
    assert big["status"] == "unsupported" and "4096 devices requested" in big["reason"]
    for r, n in ((one, 1), (two, 2)):
        m = r["measurements"]
        assert r["status"] == "ok" and r["environment"]["git"]["commit"] and r["config"]["devices"] == n
        assert m["iterations_per_device"] * n == cfg["sr3_scaling"]["workload_iterations"]
        assert (
            m["iteration"]["count"] == m["iterations_run"] - m["iteration"]["warmup"] and m["iteration"]["median"] > 0
        )
        assert len(m["rank_median_ms"]) == n and len(m["peak_rss_gib_per_rank"]) == n
        # thread placement and the cuDNN autotuning setting are recorded (a CPU "device" is one core)
        assert m["threads_per_rank"] == [1] * n and len(m["placement_per_rank"]) == n
        assert all(p["threads"] == 1 and p["parent_death_signal"] for p in m["placement_per_rank"])
        # the Study B-faithful settings, each recorded
        assert m["cudnn_benchmark"] is True and m["configuration"]["host_syncs"] and r["config"]["series"] == "faithful"
        assert r["config"]["settings"]["attention_levels"] == [False, True, False]  # as run (tiny: unet_image_size 16)
        # the authors' data path: 8 DataLoader workers capped at the rank's one core, blocking copy (CPU: no pinning)
        assert {k: m["data_path"][k] for k in ("loader_workers_requested", "loader_workers", "pin_memory", "copy")} == {
            "loader_workers_requested": 8,
            "loader_workers": 1,
            "pin_memory": False,
            "copy": "blocking",
        }
        assert r["config"]["data_path"] == {"loader_workers": 8, "pin_memory": True, "copy": "blocking"}  # spec
        assert len(m["loss"]["curve"]) == m["iterations_run"]
        assert m["study_b_projection"]["label"] == "projection" and m["study_b_projection"]["iterations"] == 40000 // n
        assert m["quality"]["bicubic"]["psnr_db"] > 15 and "beats_bicubic" in m["quality"]
        assert (res / f"devices_{n}" / "samples.npz").exists()
    assert two["measurements"]["collective_backend"] == "gloo" and two["measurements"]["replica_max_abs_diff"] == 0.0
    # energy: RAPL where the host exposes it (the 2 ranks share it: counted once), else unsupported
    for r in (one, two):
        e = r["measurements"]["energy"]
        assert e["label"] == "device-level board energy, not MLPerf Power" and r["config"]["energy"]["enabled"]
        if e["status"] == "ok":
            assert e["source"] == "rapl" and e["j_per_step"] > 0 and e["per_unit"]["image"]["unit"] == "J/image"
        else:
            assert e["status"] == "unsupported" and "RAPL" in e["reason"]
    # the device clocks of the timed iterations: the cpu backend reports none (NVML on CUDA), said so with why
    for r in (one, two):
        assert r["measurements"]["clocks"] == {
            "status": "unsupported",
            "main_phase": "iteration",
            "reason": "no clock reader for backend cpu",
            "phases": {"iteration": {"status": "unsupported", "reason": "no clock reader for backend cpu"}},
        }
        assert r["measurements"]["noise"]["thresholds"]["clock_ratio_min"] == 0.9
    energy_table = pd.read_csv(tmp_path / "results" / "energy" / "energy.csv")
    assert sorted(c.split("/")[0] + "/" + c.split("/")[-1] for c in energy_table["case"]) == [
        "faithful/n1",
        "faithful/n2",
    ]
    assert (
        set(energy_table["energy"]) <= {"ok", "unsupported"}
        and (tmp_path / "results" / "energy" / "fig_time_vs_energy.png").stat().st_size > 0
    )
    assert (res / "devices_1" / "result.json").stat().st_mode & 0o222 == 0  # write-protected

    agg = tmp_path / "results" / "study_b_sr3"
    for name in (
        "scaling.csv",
        "scaling.md",
        "scaling.tex",
        "efficiency.csv",
        "efficiency.md",
        "fig_scaling.png",
        "fig_samples.png",
    ):
        assert (agg / name).stat().st_size > 0, name
    table = pd.read_csv(agg / "scaling.csv")
    assert sorted(table["devices"]) == [1, 2, 4096]
    assert table.set_index("devices").loc[4096, "iteration_ms"] == "unsupported"
    eff = pd.read_csv(agg / "efficiency.csv")
    assert {"published Gaudi1", "published H100"} <= set(eff["series"])
    assert (tmp_path / "resources" / "sky" / "sr3_small.npz").exists()
    assert (tmp_path / "logs" / "cpu" / "sr3_scaling" / "faithful" / "devices_2.log").exists()

    again = snakemake(tmp_path, "--dry-run")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    # the result files keep the keys of the embedded default before the restructuring (tests/result_keys.py)
    assert not result_keys.check(tmp_path / "results"), result_keys.check(tmp_path / "results")
