"""Study B LoRA, one rank's run (:mod:`accelbench.experiments.lora.train`): OOM handling, no host sync inside the
timed steps, the fast host step."""

import pytest
import torch

from accelbench.experiments.lora import train as lora_train
from accelbench.experiments.lora.settings import LoraSettings, Plan
from accelbench.experiments.lora.train import train_rank
from lora_helpers import CrcTokenizer, config_parts, system


def test_runtime_oom_becomes_a_result(monkeypatch):
    """An OOM raised inside training is caught and returned with the requested size."""
    import accelbench.models.llm as llm

    def boom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79 GiB total)")

    monkeypatch.setattr(llm, "load_causal_lm", boom)
    spec = {"settings": LoraSettings().to_dict(), "model": {"source": "random", "config": {}}, **config_parts()}
    out = train_rank(spec, system(), Plan("single", 1, "flash", "sdpa", "fp32"))
    assert out["status"] == "oom" and out["measurements"]["requested"] == "20.00 GiB"


# --------------------------------------------------------------------------- no host sync inside the timed steps
SYNC_METHODS = ("item", "__bool__", "__int__", "__float__", "tolist")  # what reads a device value on the host


def _timed_syncs(monkeypatch, settings: LoraSettings, extra: tuple = (), series: str = "ours", options=None):
    """Run a tiny LoRA Llama through the product's ``train_rank`` (real Trainer, CPU) and list every call of a
    :data:`SYNC_METHODS` method (and of the ``(class, method)`` pairs in ``extra``) from the first timed step's
    ``on_step_begin`` to the last step's ``on_step_end`` (``file:line method``), with the run's result. ``options``:
    series options over the default config's (a variant's, e.g. ``{"fold_grad_accum": True}``)."""
    import sys

    import accelbench.models.llm as llm

    calls, on = [], [False]
    for owner, name in [(torch.Tensor, n) for n in SYNC_METHODS] + list(extra):
        orig = getattr(owner, name)

        def wrapped(self, *a, _orig=orig, _name=name, **k):
            if on[0]:
                f = sys._getframe(1)
                calls.append(f"{f.f_code.co_filename}:{f.f_lineno} {_name}")
            return _orig(self, *a, **k)

        monkeypatch.setattr(owner, name, wrapped)
    real_timer, real_load = lora_train.make_step_timer, llm.load_causal_lm

    def timer(device, world):
        t = real_timer(device, world)
        begin, end = t.on_step_begin, t.on_step_end

        def on_step_begin(args, state, control, **kw):
            out = begin(args, state, control, **kw)
            on[0] = on[0] or state.global_step == settings.warmup_steps
            return out

        def on_step_end(args, state, control, **kw):
            if state.global_step == settings.warmup_steps + settings.timed_steps:
                on[0] = False
            return end(args, state, control, **kw)

        t.on_step_begin, t.on_step_end = on_step_begin, on_step_end
        return t

    def load(spec, dtype):
        lm = real_load(spec, dtype)
        lm.tokenizer = CrcTokenizer()
        return lm

    monkeypatch.setattr(lora_train, "make_step_timer", timer)  # where train_rank looks it up
    monkeypatch.setattr(llm, "load_causal_lm", load)
    spec = {
        "settings": settings.to_dict(),
        **config_parts("ours" if series.startswith("ours_") else series),
        "series": series,  # a variant ours_<name>: ours' options updated by ``options``
        "family": "tiny",
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
    spec["series_options"].update(options or {})
    out = train_rank(spec, system(), Plan("single", 1, "flash", "sdpa", "fp32"), threads=1)
    assert out["status"] == "ok", out
    return calls, out


TINY = LoraSettings(r=4, alpha=4, seq_len=16, warmup_steps=1, timed_steps=3, eval_blocks=2, precision="fp32")


def test_no_host_sync_inside_timed_steps(monkeypatch):
    """Between the first timed step's start and the last one's end, the product's Trainer run reads no device value
    on the host (no .item()/bool()/...: each is a synchronisation on an accelerator), and the loss curve still has
    one finite value per optimizer step (with per-step syncs the Trainer step took 1.12x the bare loop)."""
    import math

    calls, out = _timed_syncs(monkeypatch, TINY)
    # transformers' own causal-mask code tests one value per model forward (5.x: `find_packed_sequence_indices`
    # without a mask, `padding_mask.all()` with one); a bare loop's forward does the same, so it is no harness cost
    model_forward = [c for c in calls if "/masking_utils.py:" in c or "/modeling_attn_mask_utils.py:" in c]
    # torch.optim's non-fused Adam keeps its `step` counter on the host by design (torch/optim/optimizer.py
    # `_get_value`): an .item() on host memory, no device sync. The product asks for fused AdamW on CUDA (as the bare
    # loop); on CPU, and in transformers 4.x's default optimizer, the host counter remains.
    host_counter = [c for c in calls if "/torch/optim/optimizer.py:" in c]
    assert [c for c in calls if c not in model_forward + host_counter] == []
    assert len(model_forward) <= TINY.timed_steps * TINY.grad_accum
    m = out["measurements"]
    assert len(m["loss_curve"]) == TINY.warmup_steps + TINY.timed_steps
    assert all(math.isfinite(x) and x > 0 for x in m["loss_curve"])
    ts = m["trainer_settings"]
    assert (
        ts["logging_nan_inf_filter"] is False and ts["logging_strategy"] == "no" and not ts["attention_mask_in_batch"]
    )
    assert m["eval_loss_before"] is not None and m["eval_loss_after"] is not None
    # set-up phases, timed and logged per rank (a 27B FSDP job on the H200 spent its whole window before step 1)
    assert set(m["setup_s"]) == {"model_build", "lora_and_data", "trainer_init", "train"}
    assert all(v >= 0 for v in m["setup_s"].values()) and m["model_built_on"] == "host"


def test_faithful_series_runs_as_the_job_files_and_the_counter_sees_its_syncs(monkeypatch):
    """The faithful series (Study B's job files) trains with Trainer's per-step logging and NaN/Inf filter: the counter
    of the test above finds those syncs (so it can fail), the result records the series' settings, its loss curve has
    one value per step, and optimum-habana's train_runtime is measured after the 3 throughput warm-up steps."""
    faithful = LoraSettings(**{**TINY.to_dict(), "target_modules": TINY.target_modules, "warmup_steps": 3})
    calls, out = _timed_syncs(monkeypatch, faithful, series="faithful")
    trainer = [c for c in calls if "/transformers/trainer.py:" in c]
    assert len(trainer) >= 2 * TINY.timed_steps, calls  # the NaN/Inf filter per micro-batch, the log's .item()s
    m = out["measurements"]
    assert m["series"]["series"] == "faithful" and m["series"]["logging_steps"] == 1
    assert m["series"]["gaudi_mode"]["mode"] == "lazy" and m["trainer_settings"]["lr_scheduler_type"] == "constant"
    assert m["trainer_settings"]["logging_steps"] == 1 and m["trainer_settings"]["torch_compile"] is False
    assert m["trainer_settings"]["logging_nan_inf_filter"] is True  # Trainer's default, as the job files
    assert len(m["loss_curve"]) == 3 + TINY.timed_steps
    rt = m["train_runtime"]
    assert rt["warmup_steps"] == 3 and rt["steps"] == TINY.timed_steps and rt["train_runtime_s"] > 0


def test_trainer_step_walks_no_module_tree_and_trains_the_same(monkeypatch):
    """Inside the timed steps the product's Trainer step calls no ``nn.Module.train`` (Trainer's per-micro-batch
    ``model.train()``), ``nn.Module.zero_grad`` or ``nn.Module.parameters`` walk (they cost 2.5 + 1.9 + 1.7 ms of
    host time per step for 32 LoRA decoder layers, which a bare loop does not spend), and trains exactly as
    Trainer's own calls do: the same loss per step, dropout active, gradients cleared and clipped as before."""
    module = torch.nn.Module
    walks = ((module, "train"), (module, "zero_grad"), (module, "parameters"))
    calls, out = _timed_syncs(monkeypatch, TINY, walks)
    from transformers import Trainer

    # transformers 4.x (the Habana image's pins) clips over model.parameters() inline in its training loop, with no
    # method to override: that one walk per step remains there
    inline_clip = [
        c
        for c in calls
        if not hasattr(Trainer, "_clip_grad_norm")
        and "/transformers/trainer.py:" in c
        and c.split()[-1] == "parameters"
    ]
    assert len(inline_clip) <= TINY.timed_steps
    assert [c for c in calls if c.split()[-1] in ("train", "zero_grad", "parameters") and c not in inline_clip] == []
    assert out["measurements"]["trainer_settings"]["fast_host_step"] is True
    # the fp32 matmul setting the run had (on the CPU nothing to settle: TrainingArguments leaves TF32 alone)
    assert out["measurements"]["trainer_settings"]["fp32_matmul_precision"]["resynced"] is False
    fast = out["measurements"]["loss_curve"]
    monkeypatch.undo()

    real = lora_train.loss_curve_trainer  # Trainer's own walks
    monkeypatch.setattr(lora_train, "loss_curve_trainer", lambda base, ddp, fast=True, **k: real(base, ddp, False, **k))
    calls, out = _timed_syncs(monkeypatch, TINY, walks)
    names = [c.split()[-1] for c in calls]
    assert names.count("zero_grad") >= TINY.timed_steps and names.count("parameters") >= TINY.timed_steps
    assert names.count("train") >= TINY.timed_steps * TINY.grad_accum, calls  # the counter sees the walks
    assert out["measurements"]["loss_curve"] == pytest.approx(fast, rel=1e-6, abs=0)
    # dropout was active in the fast run too: without it (eval mode) the losses would differ
    assert TINY.dropout > 0


def test_step_timer_sees_the_wrapper_under_torch_compile():
    """Trainer with `torch_compile` compiles the DDP-wrapped model: the timer names the wrapper inside the
    OptimizedModule and reads DDP's options from it (on a 2x H200 node the ours DDP run was recorded `unsupported`,
    "trained the model wrapped as OptimizedModule")."""
    from types import SimpleNamespace

    from accelbench.backends.device import Device
    from accelbench.experiments.lora.timer import make_step_timer
    from accelbench.experiments.lora.train import WRAPPER

    class DistributedDataParallel(torch.nn.Module):  # stands in for DDP (no process group on a CPU test)
        static_graph, gradient_as_bucket_view, bucket_bytes_cap = False, True, 25 * 2**20

    compiled = torch.compile(DistributedDataParallel())
    timer = make_step_timer(Device("cpu"), 1)
    timer.trainer = SimpleNamespace(
        model_wrapped=compiled,
        args=SimpleNamespace(world_size=2),
        accelerator=SimpleNamespace(distributed_type="MULTI_GPU"),
    )
    timer.clock.start()
    timer.on_step_end(None, SimpleNamespace(global_step=1, max_steps=2), None)
    assert timer.wrapped_as == "OptimizedModule(DistributedDataParallel)" and WRAPPER["ddp"] in timer.wrapped_as
    assert timer.distributed["ddp"] == {"static_graph": False, "gradient_as_bucket_view": True, "bucket_cap_mb": 25.0}


def _fold_run(monkeypatch, fold: bool):
    """``train_rank`` of the tiny LoRA Llama (``TINY`` without LoRA dropout: each side would draw its masks in another
    order), series ``ours_fold`` with ``fold_grad_accum`` ``fold``; returns the result's measurements, every optimizer
    step's unclipped adapter gradients (as the Trainer hands them to clipping) and the adapter weights after the
    last step."""
    from accelerate import Accelerator

    from accelbench.experiments.lora import rank_setup

    grads, models = [], []
    clip = Accelerator.clip_grad_norm_

    def record(self, parameters, *a, **k):
        parameters = list(parameters)
        # the adapters' (transformers 4.x hands clipping every parameter, the frozen ones without a gradient)
        grads.append([p.grad.detach().clone() for p in parameters if p.grad is not None])
        return clip(self, parameters, *a, **k)

    def adapters(*a, **k):
        model, counts = rank_setup.add_adapters(*a, **k)
        models.append(model)
        return model, counts

    monkeypatch.setattr(Accelerator, "clip_grad_norm_", record)
    monkeypatch.setattr(lora_train, "add_adapters", adapters)
    no_dropout = LoraSettings(**{**TINY.to_dict(), "target_modules": TINY.target_modules, "dropout": 0.0})
    _, out = _timed_syncs(monkeypatch, no_dropout, series="ours_fold", options={"fold_grad_accum": fold})
    monkeypatch.undo()
    weights = {n: p.detach().clone() for n, p in models[0].named_parameters() if "lora_" in n}
    return out["measurements"], grads, weights


def test_folded_grad_accum_trains_as_the_accumulated_step(monkeypatch):
    """``fold_grad_accum`` (series ours_fold) runs the optimizer step's 2 x 2 micro-batches as one of 4 x 1 through
    the product's Trainer, and that step is the same work: the same loss per optimizer step (what the aggregation
    compares with faithful, step by step), the same adapter gradients at every step and the same adapter weights
    after the last, in fp32 to float rounding. The result records the folded batch and says so in its series'
    notes; the other side ran the setting's 2 x 2."""
    folded, fold_grads, fold_weights = _fold_run(monkeypatch, True)
    plain, plain_grads, plain_weights = _fold_run(monkeypatch, False)
    ts, pts = folded["trainer_settings"], plain["trainer_settings"]
    assert (ts["per_device_train_batch_size"], ts["gradient_accumulation_steps"]) == (4, 1)
    assert (pts["per_device_train_batch_size"], pts["gradient_accumulation_steps"]) == (2, 2)
    assert folded["series"]["fold_grad_accum"] is True and plain["series"]["fold_grad_accum"] is False
    assert "micro-batch 4 x 1 per optimizer step (the setting's 2 x 2)" in " ".join(folded["series"]["notes"])
    assert not any("folded" in n for n in plain["series"]["notes"])
    steps = TINY.warmup_steps + TINY.timed_steps
    assert len(folded["loss_curve"]) == len(plain["loss_curve"]) == steps
    assert folded["loss_curve"] == pytest.approx(plain["loss_curve"], rel=1e-5, abs=0)
    assert len(fold_grads) == len(plain_grads) == steps
    for step, (a, b) in enumerate(zip(fold_grads, plain_grads)):
        for ga, gb in zip(a, b, strict=True):
            torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-7, msg=lambda m, s=step: f"step {s + 1}: {m}")
    assert fold_weights.keys() == plain_weights.keys() and fold_weights
    for name in fold_weights:
        torch.testing.assert_close(fold_weights[name], plain_weights[name], rtol=1e-5, atol=1e-6)
    # the weights moved (the comparison is not of two untrained models)
    assert any(float(g.abs().max()) > 0 for g in fold_grads[0])
    # the aggregation's check against faithful lines the curves up per optimizer step: the folded one stands in the
    # plain one's place there (here the plain run plays faithful)
    import pandas as pd

    from accelbench.experiments.lora.tables_rows import loss_check

    key = {"system": "cpu", "family": "tiny", "attention": "flash", "strategy": "single", "devices": 1, "status": "ok"}
    rows = pd.DataFrame(
        [
            {**key, "series": "faithful", "loss_per_step": plain["loss_curve"], "loss_tolerance": None},
            {**key, "series": "ours_fold", "loss_per_step": folded["loss_curve"], "loss_tolerance": 1e-5},
        ]
    )
    assert loss_check(rows)[1] == f"within 0.00% <= 0.001% over {steps} steps"


# --------------------------------------------------------------------------- CUDA graphs (compile mode reduce-overhead)
class _IntoPool(torch.autograd.Function):
    """``x`` copied into the pool of ``graphs`` (:class:`_FakeCudaGraphs`); the gradient passes through."""

    @staticmethod
    def forward(ctx, x, graphs):
        return graphs.into_pool(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _FakeCudaGraphs(torch.nn.Module):
    """Stands in, on the CPU, for the model ``torch.compile(mode="reduce-overhead")`` returns, for the memory its
    outputs live in (CUDA-graph trees, torch/_inductor/cudagraph_trees.py): the forward's outputs (loss, logits) and
    the backward's (the parameters' gradients, which autograd makes the ``.grad`` itself where there is none) are
    tensors of the graphs' pool, and a forward that starts a new generation (a ``cudagraph_mark_step_begin()`` since
    the last forward, or the last forward's backward has run) invalidates every output of the generation before. Here
    they are overwritten with NaN (on a GPU, reading one raises "accessing tensor output of CUDAGraphs that has been
    overwritten by a subsequent run"). ``marks``: the count of ``cudagraph_mark_step_begin`` calls (a one-item list);
    ``marks_per_forward``: how many came before each forward."""

    def __init__(self, model, marks: list):
        super().__init__()
        self.model, self.marks, self.seen = model, marks, marks[0]
        self.live, self.pending_backward, self.marks_per_forward = [], False, []
        for p in model.parameters():
            if p.requires_grad:
                p.register_hook(self.grad_into_pool)

    def into_pool(self, t):
        """A tensor with ``t``'s values whose memory the pool owns (not a view: autograd may take it as ``.grad``)."""
        buf = torch.empty_like(t).copy_(t)
        self.live.append(buf)
        return t.new_empty(0).set_(buf.untyped_storage(), buf.storage_offset(), buf.size(), buf.stride())

    def grad_into_pool(self, grad):
        self.pending_backward = False
        return self.into_pool(grad)

    def forward(self, **inputs):
        marked, self.seen = self.marks[0] - self.seen, self.marks[0]
        self.marks_per_forward.append(marked)
        if marked or not self.pending_backward:  # a new generation: the previous one's outputs are overwritten
            for t in self.live:
                t.fill_(float("nan"))
            self.live = []
        out = self.model(**inputs)
        self.pending_backward = torch.is_grad_enabled()
        out["loss"] = _IntoPool.apply(out["loss"], self)
        out["logits"] = _IntoPool.apply(out["logits"], self)
        return out


def _cuda_graphs_run(monkeypatch, fold: bool, graphs: bool = True):
    """``train_rank`` of the tiny LoRA Llama (``TINY`` without LoRA dropout, so that the folded step draws nothing in
    another order), series ``ours_cudagraphs`` with ``fold_grad_accum`` ``fold``. ``graphs``: the Trainer compiles
    with mode reduce-overhead (as on a GPU; the CPU's runtime turns torch.compile off), and ``torch.compile`` returns
    a :class:`_FakeCudaGraphs` over the model; else the plain eager run. Returns the result's measurements, the fake
    (None without ``graphs``) and the count of ``torch.compiler.cudagraph_mark_step_begin`` calls."""
    marks, fakes = [0], []

    def mark():
        marks[0] += 1

    def compile_(model, **kw):
        assert kw.get("mode") == "reduce-overhead", kw  # accelerate compiles as TrainingArguments ask
        fakes.append(_FakeCudaGraphs(model, marks))
        return fakes[-1]

    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", mark)
    if graphs:
        real_kw = lora_train.training_arguments_kwargs

        def kwargs(*a, **k):
            return {**real_kw(*a, **k), "torch_compile": True, "torch_compile_mode": "reduce-overhead"}

        monkeypatch.setattr(lora_train, "training_arguments_kwargs", kwargs)
        monkeypatch.setattr(torch, "compile", compile_)
    no_dropout = LoraSettings(**{**TINY.to_dict(), "target_modules": TINY.target_modules, "dropout": 0.0})
    options = {"compile": True, "compile_mode": "reduce-overhead", "fold_grad_accum": fold}
    _, out = _timed_syncs(monkeypatch, no_dropout, series="ours_cudagraphs", options=options)
    monkeypatch.undo()
    assert len(fakes) == (1 if graphs else 0)
    return out["measurements"], (fakes[0] if fakes else None), marks[0]


def test_cuda_graphs_trainer_step_reads_no_overwritten_output(monkeypatch):
    """With CUDA graphs (compile mode reduce-overhead; on an H200 the ours_cudagraphs rule failed with "accessing
    tensor output of CUDAGraphs that has been overwritten by a subsequent run"), the product's Trainer step reads no
    output of a replay after the next one began, over a stand-in whose outputs are overwritten then (NaN): the loss
    curve and the adapters trained are those of the eager run, with the setting's 2 x 2 (the first micro-batch's
    gradients would be the pool's, overwritten before the second adds to them; the loss curve would read each
    micro-batch's loss after the next replay) and folded 4 x 1 (the loss curve); and the result's series notes say
    what the step does for CUDA graphs (the eager run's do not)."""
    eager, _, _ = _cuda_graphs_run(monkeypatch, fold=False, graphs=False)
    steps = TINY.warmup_steps + TINY.timed_steps
    assert len(eager["loss_curve"]) == steps
    assert not any("CUDA graphs" in n for n in eager["series"]["notes"])
    for fold in (False, True):
        m, fake, _ = _cuda_graphs_run(monkeypatch, fold=fold)
        assert m["trainer_settings"]["torch_compile_mode"] == "reduce-overhead"
        assert m["trainer_settings"]["gradient_accumulation_steps"] == (1 if fold else 2)
        # the stand-in overwrote outputs (one generation per micro-batch), so a stale read would show
        assert len(fake.marks_per_forward) == steps * (1 if fold else 2)
        assert m["loss_curve"] == pytest.approx(eager["loss_curve"], rel=1e-5, abs=0), f"fold={fold}"
        note = [n for n in m["series"]["notes"] if n.startswith("CUDA graphs under the Trainer")]
        assert len(note) == 1 and ("zeroed in place" in note[0]) is (not fold)
        weights = [p for n, p in fake.model.named_parameters() if "lora_" in n]
        assert weights and all(bool(torch.isfinite(p).all()) for p in weights)


def test_cuda_graphs_mark_a_step_before_each_micro_batch(monkeypatch):
    """With CUDA graphs the product's Trainer calls ``torch.compiler.cudagraph_mark_step_begin()`` exactly once before
    each micro-batch's compiled forward (2 x 2: two per optimizer step), so each replay starts a new CUDA-graph
    generation; without them (the eager ours run) it never calls it."""
    _, _, eager_marks = _cuda_graphs_run(monkeypatch, fold=False, graphs=False)
    assert eager_marks == 0
    m, fake, marks = _cuda_graphs_run(monkeypatch, fold=False)
    n = (TINY.warmup_steps + TINY.timed_steps) * TINY.grad_accum
    assert fake.marks_per_forward == [1] * n and marks == n
