"""The key-set check of the workflow tests (tests/result_keys.py) fails on a lost or an undeclared key."""

import json

import result_keys


def _write(root, name, result):
    p = root / name / "result.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(result))


def test_a_lost_or_undeclared_key_is_named(tmp_path):
    snap = json.loads(result_keys.FIXTURE.read_text())
    keys = snap["sr3_scaling/all/ok"]
    result = {}
    for k in keys:  # rebuild a result with exactly the snapshot's keys
        cur = result
        *parents, last = k.split(".")
        for p in parents:
            cur = cur.setdefault(p, {})
        cur.setdefault(last, {} if any(o.startswith(k + ".") for o in keys) else 1)
    result.update(experiment="sr3_scaling", status="ok")
    _write(tmp_path / "same", "a", result)
    assert result_keys.check(tmp_path / "same") == []
    lost = json.loads(json.dumps(result))
    del lost["measurements"]["iteration"]
    lost["measurements"]["surprise"] = 1
    lost["measurements"]["flops"] = 1  # declared in ADDED: allowed
    lost["config"]["ddp"] = {"bucket_cap_mb": 10}  # an optional setting the config chose: allowed
    _write(tmp_path / "changed", "a", lost)
    assert result_keys.check(tmp_path / "changed") == [
        "sr3_scaling/all/ok: key measurements.iteration lost",
        "sr3_scaling/all/ok: key measurements.surprise added (declare it in tests/result_keys.py ADDED)",
    ]
