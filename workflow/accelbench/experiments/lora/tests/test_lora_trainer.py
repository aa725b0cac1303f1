"""Study B LoRA Trainer customisation (:mod:`accelbench.experiments.lora.trainer`): TrainingArguments per strategy,
DDP options, Trainer's FLOP estimate."""

import pytest
import torch

from accelbench.errors import ConfigError
from accelbench.experiments.lora.cuda_graphs import compiles_with_cuda_graphs
from accelbench.experiments.lora.settings import LoraSettings, Plan
from accelbench.experiments.lora.trainer import (
    WrapTarget,
    check_ddp_options,
    ddp_options_for,
    loss_curve_trainer,
    training_arguments_kwargs,
)
from lora_helpers import tiny_llama


def test_training_arguments_per_strategy():
    s = LoraSettings()
    mk = lambda strat, backend="cpu": training_arguments_kwargs(  # noqa: E731
        Plan(strat, 2, "flash", "sdpa", "bf16"), s, backend, "trainer-output", 12, WrapTarget("LlamaDecoderLayer")
    )
    single = mk("single")
    assert single["learning_rate"] == 3e-4 and single["lr_scheduler_type"] == "constant"  # the job files
    assert (
        single.get("warmup_steps", single.get("warmup_ratio")) == 0.03
        and single["max_grad_norm"] == 0.3
        and single["bf16"]
    )
    assert single["per_device_train_batch_size"] == 2 and single["gradient_accumulation_steps"] == 2
    assert "fsdp" not in single and "deepspeed" not in single and "ddp_backend" not in single
    assert mk("ddp")["ddp_backend"] == "gloo" and mk("ddp", "cuda")["ddp_backend"] == "nccl"
    assert mk("ddp", "hpu")["ddp_backend"] == "hccl"
    fsdp = mk("fsdp", "cuda")
    assert fsdp["fsdp"] == "full_shard auto_wrap"
    assert fsdp["fsdp_config"]["transformer_layer_cls_to_wrap"] == ["LlamaDecoderLayer"]
    assert fsdp["fsdp_config"]["sync_module_states"] and not mk("fsdp")["fsdp_config"]["sync_module_states"]
    assert mk("zero3")["deepspeed"]["zero_optimization"]["stage"] == 3
    # fused AdamW on CUDA, as the bare loop (transformers 4.x would default to the per-tensor loop)
    assert mk("single", "cuda")["optim"] == "adamw_torch_fused" and "optim" not in single


def test_training_arguments_are_accepted_by_transformers(tmp_path):
    from transformers import TrainingArguments

    kw = training_arguments_kwargs(
        Plan("single", 1, "eager", "eager", "fp32"), LoraSettings(), "cpu", str(tmp_path), 5, None
    )
    args = TrainingArguments(**kw)
    assert args.max_steps == 5 and args.get_warmup_steps(5) == 1
    # on CUDA the batches are copied without a host wait (accelerate's non_blocking, pinned DataLoader memory)
    cuda = training_arguments_kwargs(
        Plan("single", 1, "flash", "sdpa", "bf16"), LoraSettings(), "cuda", str(tmp_path), 5, None
    )
    assert cuda["accelerator_config"] == {"non_blocking": True} and cuda["dataloader_pin_memory"] is True
    assert "accelerator_config" not in kw
    cuda.update(use_cpu=True, bf16=False)  # this machine has no GPU (TrainingArguments then turns pinning off)
    assert TrainingArguments(**cuda).accelerator_config.non_blocking is True


def test_ddp_options_reach_accelerate_and_are_checked(tmp_path):
    """lora_finetune.ddp goes to accelerate's DistributedDataParallelKwargs when Trainer wraps the model; unknown
    options and static_graph with gradient accumulation are refused with the key named."""
    from accelerate.utils import DistributedDataParallelKwargs
    from transformers import Trainer, TrainingArguments

    opts = {"gradient_as_bucket_view": True, "bucket_cap_mb": 7, "static_graph": None}
    assert check_ddp_options(opts, 2) == {"gradient_as_bucket_view": True, "bucket_cap_mb": 7}
    assert ddp_options_for(Plan("single", 1, "flash", "sdpa", "fp32"), opts) == {}
    with pytest.raises(ConfigError, match="lora_finetune.ddp.static_graph needs"):
        check_ddp_options({"static_graph": True}, 2)
    assert check_ddp_options({"static_graph": True}, 1) == {"static_graph": True}
    with pytest.raises(ConfigError, match="unknown option"):
        check_ddp_options({"bucket_size": 3}, 1)
    kw = training_arguments_kwargs(
        Plan("single", 1, "eager", "eager", "fp32"), LoraSettings(), "cpu", str(tmp_path), 2, None
    )
    cls = loss_curve_trainer(Trainer, check_ddp_options(opts, 2))
    trainer = cls(model=tiny_llama(), args=TrainingArguments(**kw))
    if trainer.accelerator.ddp_handler is None:  # transformers 4.x makes it in _wrap_model, when distributed
        trainer.accelerator.ddp_handler = DistributedDataParallelKwargs()
    trainer._wrap_model(trainer.model)
    # and Trainer's FLOP estimate is the base class's, with the parameters counted once
    base = Trainer(model=trainer.model, args=trainer.args)
    batches = [{"input_ids": torch.zeros(2, n, dtype=torch.long)} for n in (4, 8, 4)]
    expected = [base.floating_point_ops(b) for b in batches]
    calls = []
    count = trainer.model.num_parameters
    trainer.model.num_parameters = lambda **kw: calls.append(kw) or count(**kw)
    assert [trainer.floating_point_ops(b) for b in batches] == expected and expected[0] > 0
    assert len(calls) == 1
    assert trainer.accelerator.ddp_handler.to_kwargs() | {"find_unused_parameters": None} == {
        "gradient_as_bucket_view": True,
        "bucket_cap_mb": 7,
        "find_unused_parameters": None,
    }


def test_cuda_graphs_only_where_the_series_compiles_with_them():
    """The Trainer handles CUDA graphs (:class:`LossCurveMixin` ``cuda_graphs``) exactly where the TrainingArguments
    compile the model in a mode that captures them: ours with compile_mode reduce-overhead (or max-autotune) on a
    strategy that compiles; not torch's default mode, not max-autotune-no-cudagraphs, not an FSDP plan (eager), not
    the faithful series, not on the CPU (no compile)."""
    from accelbench.experiments.lora.series import runtime_for

    def kw(mode, strategy="single", backend="cuda", series="ours_cudagraphs"):
        opts = {"compile": True, "liger": False, "loss_tolerance": None, "compile_mode": mode}
        if series == "faithful":
            opts = {"job_set": "2026-03"}
        rt = runtime_for(series, opts, backend != "cpu")
        plan = Plan(strategy, 1 if strategy == "single" else 2, "flash", "sdpa", "bf16")
        return training_arguments_kwargs(plan, LoraSettings(), backend, "out", 5, WrapTarget("X"), 0, rt)

    assert compiles_with_cuda_graphs(kw("reduce-overhead")) and compiles_with_cuda_graphs(kw("max-autotune"))
    assert compiles_with_cuda_graphs(kw("reduce-overhead", "ddp"))
    assert not compiles_with_cuda_graphs(kw(None)) and not compiles_with_cuda_graphs(kw("default"))
    assert not compiles_with_cuda_graphs(kw("max-autotune-no-cudagraphs"))
    assert not compiles_with_cuda_graphs(kw("reduce-overhead", "fsdp"))
    assert not compiles_with_cuda_graphs(kw("reduce-overhead", backend="cpu"))
    assert not compiles_with_cuda_graphs(kw(None, series="faithful"))
    assert not compiles_with_cuda_graphs({**kw("reduce-overhead"), "torch_compile_backend": "aot_eager"})


_SETTLE = """
import json, sys, tempfile
import torch
import transformers.training_args as ta
from transformers import TrainingArguments
from accelbench.experiments.lora.rank_setup import settle_fp32_matmul_precision

before = settle_fp32_matmul_precision()
ta.is_torch_tf32_available = lambda: True  # as on an Ampere or newer GPU
TrainingArguments(output_dir=tempfile.mkdtemp(), torch_compile=True, bf16=True, use_cpu=True, report_to=[])
try:
    torch.get_float32_matmul_precision()
    mixed = False
except RuntimeError as e:
    mixed = "legacy and new APIs" in str(e)
after = settle_fp32_matmul_precision()
json.dump({"before": before, "mixed": mixed, "after": after, "getter": torch.get_float32_matmul_precision(),
           "cuda_matmul": torch.backends.cuda.matmul.fp32_precision}, sys.stdout)
"""


def test_fp32_matmul_precision_settled_after_training_arguments_set_tf32():
    """transformers sets TF32 through torch's per-backend API, after which the legacy getter (read by Inductor's
    max-autotune cache) raises; settling states the same TF32 through the legacy setter. In a fresh interpreter:
    the settings are process-wide."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _SETTLE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == {"cuda_matmul": "none", "legacy": "highest", "resynced": False}
    # a transformers whose enable_tf32 writes the per-backend API (5.x with torch >= 2.9) leaves the getter raising;
    # older ones (the Habana image's 4.51) write the legacy flags, which leave nothing to settle
    import inspect

    from transformers.utils import import_utils

    enable = getattr(import_utils, "enable_tf32", None)
    writes_new_api = enable is not None and "fp32_precision" in inspect.getsource(enable)
    assert got["mixed"] is writes_new_api
    assert got["after"]["resynced"] is got["mixed"] and got["after"]["legacy"] == "high"
    assert got["getter"] == "high"  # TF32 on, as transformers chose it, and the legacy getter answers
    if got["mixed"]:
        assert got["after"]["cuda_matmul"] == got["cuda_matmul"] == "tf32"
