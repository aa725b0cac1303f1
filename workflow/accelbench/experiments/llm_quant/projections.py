"""The projections of a Llama-like decoder layer that quantization and the sensitivity map touch, by name (torch-free:
the tables order the sub-module sensitivity by them too)."""

SUBMODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MLP_SUBMODULES = ("gate_proj", "up_proj", "down_proj")
