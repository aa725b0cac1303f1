"""models.llm.gguf_parsed_once: transformers' three GGUF parses of one from_pretrained (tokenizer, config,
weights) share one gguf.GGUFReader inside the block, and only there (llm_export 28 -> 20 s); its 397 tensor name maps
likewise (-> about 12 s on 2 cores)."""

from __future__ import annotations

import pytest

from accelbench.models.llm import gguf_parsed_once


def _tiny_gguf(path):
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("accelbench.test", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return gguf


def test_a_gguf_file_is_parsed_once_inside_the_block_only(tmp_path):
    gguf = _tiny_gguf(tmp_path / "t.gguf")
    original = gguf.GGUFReader
    with gguf_parsed_once():
        first = gguf.GGUFReader(tmp_path / "t.gguf")
        assert gguf.GGUFReader(str(tmp_path / "t.gguf")) is first  # the same file by another spelling: one parse
        assert first.fields["accelbench.test"].parts[-1][0] == 1
    assert gguf.GGUFReader is original
    assert gguf.GGUFReader(tmp_path / "t.gguf") is not first


def test_the_tensor_name_map_is_built_once_per_architecture_inside_the_block_only():
    gguf = pytest.importorskip("gguf")
    original = gguf.get_tensor_name_map
    arch = next(iter(gguf.MODEL_ARCH_NAMES))
    with gguf_parsed_once():
        first = gguf.get_tensor_name_map(arch, 2)
        assert gguf.get_tensor_name_map(arch, 2) is first  # transformers asks once per sub-module
        assert gguf.get_tensor_name_map(arch, 3) is not first
    assert gguf.get_tensor_name_map is original
    assert original(arch, 2) is not first
