"""measurements.energy of the experiments' own code paths on the CPU, with a scripted energy counter standing in
for RAPL/NVML: quantization's J per 1k evaluated tokens, LoRA's windows over the timed optimizer steps only."""

from __future__ import annotations

import pytest

from accelbench.backends.clock_reader import ClockReader, ClockSample
from accelbench.backends.device import Device
from accelbench.backends.energy_counter import Counter
from accelbench.measure import clocks, energy
from llm_quant_helpers import chunks, sensitivity_result, tiny_llama  # noqa: F401 (module-scoped fixtures)


class FixedCounter(Counter):
    """Each read adds ``per_read`` J: every window sees exactly ``per_read`` J (opened and closed by one read each)."""

    source, update_period_s = "scripted", None

    def __init__(self, per_read: float):
        self.per_read, self.j, self.identity = per_read, 0.0, "scripted"

    def read_j(self):
        self.j += self.per_read
        return self.j


@pytest.fixture
def scripted(monkeypatch):
    from accelbench.backends.cpu import CpuBackend

    monkeypatch.setattr(CpuBackend, "energy_counter", lambda self, index=0: FixedCounter(6.0))
    monkeypatch.setattr(energy, "_settings", energy.Settings(window_s=600.0))  # one window per phase


class ScriptedClocks(ClockReader):
    """A device at 1700 of 1980 MHz with its power capped; counts its reads."""

    source, identity = "scripted", "scripted"

    def __init__(self):
        self.reads = 0

    def read(self):
        self.reads += 1
        return ClockSample(1700.0, 1980.0, 70.0, ("sw_power_cap",))


@pytest.fixture
def clocked(monkeypatch):
    """The cpu backend given a scripted clock reader, sampled after every step (interval 0)."""
    from accelbench.backends.cpu import CpuBackend

    monkeypatch.setattr(CpuBackend, "clock_reader", lambda self, index=0: ScriptedClocks())
    monkeypatch.setattr(clocks, "SAMPLE_INTERVAL_S", 0.0)


def test_quantization_reports_joules_per_1k_evaluated_tokens(tiny_llama, chunks, scripted, clocked):
    import copy

    from accelbench.experiments.llm_quant.methods import MethodRun, MethodText, run_method

    model = copy.deepcopy(tiny_llama)
    run = MethodRun(
        method="fp32",
        bitset="none",
        chunk_len=32,
        eval_tokens=96,
        group_size=128,
        clustering="percentile",
        metric="prune",
        throughput={"batch": 1, "seq_len": 16, "warmup": 1, "repeat": 3},
    )
    m = run_method(model, MethodText(256, chunks), sensitivity_result(model, chunks), run, Device("cpu"))[
        "measurements"
    ]
    e = m["energy"]
    assert e["status"] == "ok" and e["main_phase"] == "evaluation" and e["source"] == "scripted"
    tokens = m["perplexity"]["tokens"]
    assert e["j_per_step"] == pytest.approx(6.0)  # the evaluation is one step, one window
    assert e["per_unit"]["per_1k_eval_tokens"]["value"] == pytest.approx(6.0 * 1000 / tokens)
    assert e["per_unit"]["per_1k_forward_tokens"]["value"] == pytest.approx(6.0 / 3 * 1000 / 16)
    assert e["step_ms"] == pytest.approx(m["eval_time"]["value"] * 1e3)
    assert not e["reliable"] and e["phases"]["forward"]["windows_used"] == 1  # one window < min_windows
    assert "energy" not in m["forward_benchmark"]
    c = m["clocks"]  # the forward benchmark's 3 timed steps (not its warm-up), the evaluation's one
    assert c["status"] == "ok" and c["main_phase"] == "forward" and c["sm_clock_mhz"] == 1700
    assert c["phases"]["forward"]["samples"] == 3 and c["phases"]["evaluation"]["samples"] == 1
    assert c["clock_event_reasons"] == {"sw_power_cap": 1.0} and "clocks" not in m["forward_benchmark"]


def test_lora_meters_the_timed_optimizer_steps_only(monkeypatch, scripted, clocked):
    import accelbench.models.llm as llm
    from accelbench.experiments.lora import train as lora_train
    from accelbench.experiments.lora.settings import LoraSettings, Plan
    from lora_helpers import CrcTokenizer, config_parts, system

    real_load = llm.load_causal_lm

    def load(spec, dtype):
        lm = real_load(spec, dtype)
        lm.tokenizer = CrcTokenizer()
        return lm

    monkeypatch.setattr(llm, "load_causal_lm", load)
    s = LoraSettings(r=4, alpha=4, seq_len=16, warmup_steps=2, timed_steps=3, eval_blocks=2, precision="fp32")
    spec = {
        "settings": s.to_dict(),
        **config_parts(),
        "model": {
            "source": "random",
            "config": {
                "model_type": "llama",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 100,
            },
        },
    }
    out = lora_train.train_rank(spec, system(), Plan("single", 1, "flash", "sdpa", "fp32"), threads=1)
    assert out["status"] == "ok", out
    e = out["measurements"]["energy"]
    assert e["status"] == "ok" and [w["steps"] for w in e["windows"]] == [3]  # warm-up steps and evaluation outside
    assert e["per_step"]["median"] == pytest.approx(2.0)
    c = out["measurements"]["clocks"]  # the 3 timed optimizer steps, not the 2 warm-up ones
    assert c["status"] == "ok" and c["samples"] == 3 and c["clock_event_reasons"] == {"sw_power_cap": 1.0}
