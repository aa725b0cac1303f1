"""The LoRA memory pre-check's parameter count before any weight is loaded: a local checkpoint's from its
safetensors headers (no transformers import in a multi-rank job's parent), the same number the loaded model has."""

from __future__ import annotations

import pytest

from accelbench.experiments.lora.model import count_parameters
from accelbench.models.llm import parameter_count
from lora_helpers import tiny_llama

pytest.importorskip("transformers")


@pytest.mark.parametrize("tied", [True, False])
def test_saved_checkpoint_counts_as_the_loaded_model(tmp_path, tied):
    model = tiny_llama(tie_word_embeddings=tied)
    model.save_pretrained(tmp_path / "m")
    loaded = parameter_count(model.parameters())
    assert count_parameters({"source": "path", "path": str(tmp_path / "m")}) == loaded
    # the meta-device count (architecture only) agrees
    meta = count_parameters({"source": "path", "path": str(tmp_path / "nowhere"), "config_from": str(tmp_path / "m")})
    assert meta == loaded


def test_unreadable_header_falls_back(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 4)  # a truncated file, no config.json either
    assert count_parameters({"source": "path", "path": str(tmp_path)}) is None


def test_saved_checkpoint_is_counted_without_transformers(tmp_path):
    """A multi-rank job's parent counts before its ranks start: it must not pay transformers' import (5-7 s)."""
    import subprocess
    import sys

    tiny_llama().save_pretrained(tmp_path)
    code = (
        "import sys; from accelbench.experiments.lora.model import count_parameters; "
        f"n = count_parameters({{'source': 'path', 'path': {str(tmp_path)!r}}}); "
        "print(n, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) > 0 and out[1] == "False"
