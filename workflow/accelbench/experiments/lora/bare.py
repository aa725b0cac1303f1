"""Study B LoRA's bare reference loop: the plain PyTorch step that the harness's Trainer step
(:func:`.train.train_rank`) is checked against, and the settings it takes from the result it is compared with.

``benchmarks/harness_overhead.py lora`` (driver: :mod:`.overhead`) times both on the same model, shapes
and settings and writes ``harness_ms``/``bare_ms``; ``ddp-profile`` and ``host-overhead`` run :func:`lora_bare` too.

The bare loop runs the settings the result ran with (:func:`bare_settings`: the result's
``measurements.trainer_settings`` and ``measurements.series``, else what ``train_rank`` derives from its ``config``):
``torch.compile`` (``TrainingArguments.torch_compile``: accelerate compiles the wrapped model last, backend
``inductor``), Liger kernels, the attention implementation, precision and the bf16 cast of the adapters, batch and
accumulation, fused AdamW, gradient clipping, how batches reach the device (pinned and non-blocking for ``ours``,
blocking for ``faithful``) and the faithful series' per-step host reads (``logging_steps 1``: loss and grad norm
``.item()``; the NaN/Inf filter on every micro-batch; the label-token count across ranks) and the Trainer's loss call
where the model accepts loss kwargs (``num_items_in_batch``, the step's label-token count, into the forward; the loss
then not divided by the accumulation). :func:`settings_text`
states them for the CSV's ``settings`` column, with what the bare loop does not reproduce (Trainer's own host work)
and any setting in which the harness run differs from the result (:func:`harness_differences`: a result from another
node or software). The step is split as the product's step timer sees it (Trainer's on_step_begin to on_step_end):
the batch fetch and copies and the token-count reduction before it, the logging reads after it.

Torch is imported inside the functions that build the loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from dataclasses import dataclass

from accelbench import backends
from accelbench.experiments.lora.bare_step import BareStep, batch_source

# results older than series_options (committed reference runs' first LoRA results record neither series nor
# series_options, which came together): the ours options their jobs ran with
OPTIONS_BEFORE_SERIES = {"compile": True, "liger": "auto", "loss_tolerance": 0.02}


def direct_device(ops) -> bool:
    """True where the bare loop drives the accelerator through plain torch (not through optimum-habana's
    bridge, whose training the bare loop does not mirror): it then keeps bf16 weights, runs Liger kernels where
    installed and builds random-init models on the device, as ``train_rank`` does there."""
    return ops.accelerator and not ops.optimum_habana


@dataclass(frozen=True)
class BareSettings:
    """The runtime settings of a LoRA result that :func:`lora_bare` reproduces (built by :func:`bare_settings`)."""

    series: str  # faithful | ours | ours_<variant>
    compile: bool  # torch.compile of the (DDP-wrapped) model, last, as accelerate's prepare_model
    compile_backend: str  # TrainingArguments.torch_compile_backend (None there means "inductor")
    liger: bool  # Liger kernels on the base model (TrainingArguments.use_liger_kernel)
    adapters_bf16: bool  # the LoRA model cast to bf16 after the adapters (train_rank, run_lora_clm.py)
    fused_adamw: bool  # optim "adamw_torch_fused" (weight decay 0: TrainingArguments' default)
    max_grad_norm: float  # clipping of the trainable parameters' gradients when > 0
    batch_copy: str  # "non_blocking": pinned, non_blocking=True; "blocking": accelerate's default copy
    log_every: int | None  # optimizer steps between the loss/grad-norm host reads (None: logging off)
    nan_inf_filter: bool  # isnan/isinf of every micro-batch loss read on the host
    average_tokens: bool  # label-token count reduced across ranks before every optimizer step (world > 1)
    source: str  # where the values were read
    not_reproduced: tuple[str, ...] = ()
    liger_kernels: tuple[str, ...] | None = None  # the Liger kernels applied (None: Liger's defaults)
    compile_mode: str | None = None  # TrainingArguments.torch_compile_mode (None: torch.compile's default)
    # Trainer's num_items_in_batch (where it found the model accepts loss kwargs: Trainer.model_accepts_loss_kwargs):
    # the step's label-token count passed into every micro-batch's forward (Liger's fused linear cross-entropy then
    # sums and divides by it), the loss not divided by grad_accum. None: as the model built here accepts loss kwargs
    # (:func:`accepts_loss_kwargs`, resolved by :func:`lora_bare`); False also where turned off
    # (:func:`without_num_items_in_batch`)
    num_items_in_batch: bool | None = None

    def describe(self) -> str:
        """The settings as the CSV's ``settings`` column states them."""
        logging = f"every {self.log_every} step(s) (loss, grad norm .item())" if self.log_every else "off"
        text = (
            f"series {self.series}, compile {self.compile}"
            + (f" ({', '.join(filter(None, (self.compile_backend, self.compile_mode)))})" if self.compile else "")
            + f", liger {self.liger}"
            + (
                f" ({', '.join(self.liger_kernels) or 'no kernels'})"
                if self.liger and self.liger_kernels is not None
                else ""
            )
            + f", adapters {'bf16' if self.adapters_bf16 else 'fp32'}, fused AdamW "
            f"{self.fused_adamw}, clip {self.max_grad_norm}, batch copy {self.batch_copy}, logging {logging}, "
            f"NaN/Inf filter {self.nan_inf_filter}, token count across ranks {self.average_tokens}, "
            f"num_items_in_batch "
            + ("as the model accepts loss kwargs" if self.num_items_in_batch is None else str(self.num_items_in_batch))
            + "; "
            f"from {self.source}"
        )
        return text + (f"; not reproduced: {'; '.join(self.not_reproduced)}" if self.not_reproduced else "")


def bare_settings(result: dict, s, plan, system) -> BareSettings:
    """The bare loop's settings for a LoRA ``result`` (its ``result.json``): the recorded
    ``measurements.trainer_settings`` and ``measurements.series`` (``train_rank`` writes them), each missing value
    derived from the ``config`` as ``train_rank`` derives it (:func:`~accelbench.experiments.lora.series.runtime_for`,
    :func:`~accelbench.experiments.lora.trainer.training_arguments_kwargs`). ``s``/``plan``/``system``: of
    :func:`.overhead.case_of`. What cannot be reproduced here is listed in ``not_reproduced`` (and left out).

    Raises:
        SystemExit: the recorded batch or accumulation differs from the config's (not the same work).
    """
    import importlib.util

    from accelbench.experiments.lora.series import LIGER_KERNELS, runtime_for
    from accelbench.experiments.lora.trainer import COMPILED_STRATEGIES

    spec = result["config"]
    m = result.get("measurements") or {}
    ts, ser = m.get("trainer_settings") or {}, m.get("series") or {}
    ops = backends.get(system.backend)
    cuda = direct_device(ops)
    rt = runtime_for(
        spec.get("series", "ours"),  # results older than series: ours
        spec["series_options"] if "series" in spec else OPTIONS_BEFORE_SERIES,
        ops.accelerator,
        backend_has_compile=ops.accelerator and not ops.optimum_habana,
    )
    for key, want in (
        ("per_device_train_batch_size", s.per_device_batch),
        ("gradient_accumulation_steps", s.grad_accum),
    ):
        if ts.get(key) is not None and int(ts[key]) != want:
            raise SystemExit(f"result's trainer_settings.{key} {ts[key]} differs from its config's {want}")
    notes = []
    liger = bool(ts.get("use_liger_kernel", rt.liger))
    if liger and not (cuda and importlib.util.find_spec("liger_kernel")):
        notes.append("Liger kernels (liger_kernel not installed or no CUDA device here)")
        liger = False
    # the kernels the Trainer applied (TrainingArguments.liger_kernel_config), else those the config names
    config = ts.get("liger_kernel_config")
    kernels = [k for k in LIGER_KERNELS if config[k]] if config else rt.liger_kernels
    adapters_bf16 = (
        ser["adapters_cast_to"] == "bfloat16"
        if "adapters_cast_to" in ser
        else plan.precision == "bf16" and ops.accelerator and plan.strategy != "zero3"
    )
    if adapters_bf16 and not cuda:  # lora_bare keeps float32 weights off CUDA, as train_rank off an accelerator
        notes.append("the bf16 cast of the LoRA model (CUDA only here)")
        adapters_bf16 = False
    copy = ts.get("batch_copy")
    non_blocking = copy.startswith("non_blocking") if copy else rt.non_blocking_copies and ops.non_blocking_copies
    strategy = ts.get("logging_strategy", "steps" if rt.logging_steps else "no")
    every = ts.get("logging_steps", rt.logging_steps) if strategy == "steps" else None
    if strategy not in ("steps", "no"):
        notes.append(f"logging_strategy {strategy}")
    if not ts.get("fast_host_step", rt.fast_host_step):
        notes.append("Trainer's per-step module walks (fast_host_step False: Trainer's own host work, measured)")
    if ts.get("include_num_input_tokens_seen") not in (None, False, "no"):
        notes.append("include_num_input_tokens_seen (a gathered token count .item() per micro-batch)")
    if ts.get("lr_scheduler_type", s.lr_scheduler) != "constant":
        notes.append(f"LR scheduler {ts.get('lr_scheduler_type', s.lr_scheduler)} (the bare loop keeps a constant LR)")
    if ts.get("attention_mask_in_batch"):
        notes.append("the attention mask in the batch")
    return BareSettings(
        series=spec.get("series", "ours"),
        compile=bool(ts.get("torch_compile", rt.compile and plan.strategy in COMPILED_STRATEGIES)),
        compile_backend=ts.get("torch_compile_backend") or "inductor",
        liger=liger,
        adapters_bf16=adapters_bf16,
        fused_adamw=ts["optim"] == "adamw_torch_fused" if "optim" in ts else ops.fused_adamw,
        max_grad_norm=float(ts.get("max_grad_norm", s.max_grad_norm)),
        batch_copy="non_blocking" if non_blocking else "blocking",
        log_every=int(every) if every else None,
        nan_inf_filter=bool(ts.get("logging_nan_inf_filter", not rt.no_step_sync)),
        average_tokens=bool(ts.get("average_tokens_across_devices", not rt.no_step_sync)),
        source="the result's trainer_settings and series" if ts else "the result's config (no trainer_settings)",
        not_reproduced=tuple(notes),
        liger_kernels=tuple(kernels) if liger and kernels is not None else None,
        compile_mode=ts.get("torch_compile_mode", rt.compile_mode) or None,
        # recorded by train_rank (Trainer.model_accepts_loss_kwargs); older results: decided from the model built
        num_items_in_batch=ts.get("model_accepts_loss_kwargs"),
    )


def without_num_items_in_batch(mirror: BareSettings) -> BareSettings:
    """``mirror`` with the Trainer's ``num_items_in_batch`` turned off (``harness_overhead.py lora
    --no-num-items-in-batch``): each micro-batch's mean loss divided by ``grad_accum``, as before the bare loop
    mirrored it; the rest the result's. Beside the mirrored loop on the same node, the isolation of the Liger fused
    linear cross-entropy failure under the Trainer (campaign part ``liger_isolate``)."""
    note = "Trainer's num_items_in_batch (turned off: --no-num-items-in-batch; mean loss / grad_accum instead)"
    return dataclasses.replace(mirror, num_items_in_batch=False, not_reproduced=(*mirror.not_reproduced, note))


def with_liger_kernels(mirror: BareSettings, names: str) -> BareSettings:
    """``mirror`` applying the Liger kernels ``names`` (comma-separated, of
    :data:`~accelbench.experiments.lora.series.LIGER_KERNELS`) instead of the result's (``harness_overhead.py lora
    --liger-kernels``: the bare loop of a kernel set whose Trainer run left no result, e.g. the fused linear
    cross-entropy alone, from the result of another set).

    Raises:
        SystemExit: an unknown kernel name, or Liger off here (not installed, no CUDA device, or off in the result).
    """
    from accelbench.experiments.lora.series import LIGER_KERNELS

    kernels = tuple(k for k in names.split(",") if k)
    unknown = [k for k in kernels if k not in LIGER_KERNELS]
    if unknown:
        raise SystemExit(f"--liger-kernels: unknown kernel {unknown[0]!r} (known: {', '.join(LIGER_KERNELS)})")
    if not mirror.liger:
        raise SystemExit(f"--liger-kernels: Liger is off for this result here ({'; '.join(mirror.not_reproduced)})")
    note = f"the result's Liger kernels (replaced: --liger-kernels {','.join(kernels)})"
    return dataclasses.replace(mirror, liger_kernels=kernels, not_reproduced=(*mirror.not_reproduced, note))


def accepts_loss_kwargs(model) -> bool:
    """Whether the Trainer passes ``num_items_in_batch`` into ``model``'s forward, decided as transformers 5.x's
    ``Trainer.__init__`` decides ``model_accepts_loss_kwargs`` (before Liger patches the forward, in ``train()``): the
    PEFT-unwrapped model's ``accepts_loss_kwargs`` attribute where it has one, else whether its ``forward`` takes
    ``**kwargs``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(base, "accepts_loss_kwargs"):
        return bool(base.accepts_loss_kwargs)
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in inspect.signature(base.forward).parameters.values())


# settings of the harness run compared with the result's (trainer_settings keys, then series keys)
COMPARED = (
    (
        "trainer_settings",
        (
            "torch_compile",
            "torch_compile_mode",
            "use_liger_kernel",
            "liger_kernel_config",
            "optim",
            "batch_copy",
            "logging_strategy",
            "logging_steps",
            "logging_nan_inf_filter",
            "average_tokens_across_devices",
            "max_grad_norm",
            "gradient_accumulation_steps",
            "per_device_train_batch_size",
            "fast_host_step",
            "model_accepts_loss_kwargs",
        ),
    ),
    ("series", ("adapters_cast_to",)),
)


def harness_differences(result_m: dict, harness_m: dict) -> list[str]:
    """Settings in which this harness run (``train_rank``'s measurements) differs from the result's measurements
    (:data:`COMPARED`; keys one side lacks are skipped): ``"<key> <here> here, <recorded> in the result"``."""
    out = []
    for section, keys in COMPARED:
        a, b = harness_m.get(section) or {}, result_m.get(section) or {}
        out += [f"{k} {a[k]} here, {b[k]} in the result" for k in keys if k in a and k in b and a[k] != b[k]]
    return out


def settings_text(s, plan, mirror: BareSettings, differs: list[str] | tuple = ()) -> str:
    """The CSV ``settings`` of a LoRA row: shapes, precision, attention, the bare loop's :class:`BareSettings` and the
    settings in which the harness run differs from the result (:func:`harness_differences`)."""
    text = (
        f"seq {s.seq_len}, batch {s.per_device_batch}x{s.grad_accum}/device, {plan.precision}, attention "
        f"{plan.attention} ({plan.attn_implementation}), {mirror.describe()}"
    )
    return text + (f"; harness run differs from the result: {'; '.join(differs)}" if differs else "")


@dataclass(frozen=True)
class ProcessRank:
    """This process's place among the ranks of the run: global ``rank``, ``world`` size and ``local`` rank (the device
    index on its node); the defaults are one process alone."""

    rank: int = 0
    world: int = 1
    local: int = 0


def lora_bare(
    spec: dict,
    system,
    plan,
    s,
    place: ProcessRank | None = None,
    ddp_kwargs: dict | None = None,
    fused: bool | None = None,
    mirror: BareSettings | None = None,
):
    """The bare LoRA step of a rule's spec: same model (random init on the device for ``source: random``), attention,
    LoRA, dtype and autocast; DDP when ``place.world > 1`` (``ddp_kwargs``); AdamW on the adapters; ``grad_accum``
    micro-batches of random token ids (``no_sync`` but the last); gradient clipping. The process group must exist
    when ``place.world > 1``. ``place``: this process's ranks (None: one process alone). Returns ``(step, model)``.

    ``mirror`` (:func:`bare_settings` of the result compared with): its compilation, Liger kernels, bf16 adapters,
    fused AdamW (weight decay 0), clipping, batches drawn on the host and copied as the Trainer copies them (pinned on
    CUDA; a pool of ``2 x grad_accum`` drawn once), its per-step host reads and its loss call (``num_items_in_batch``;
    where ``mirror.num_items_in_batch`` is None, decided by :func:`accepts_loss_kwargs` of the model built: the
    returned step's ``mirror`` holds the value used). Without it (``ddp-profile``,
    ``host-overhead``): eager, adapters as peft builds them (float32), token ids drawn on the device, no host reads;
    ``fused``: fused AdamW (None = on CUDA only)."""
    import torch

    place = place or ProcessRank()
    ops = backends.get(system.backend)
    cuda = direct_device(ops)
    dev = ops.torch_device(place.local) if cuda else torch.device("cpu")
    if cuda:
        ops.set_device(place.local)
    model, accepts = _lora_model(spec, plan, s, ops, dev, mirror)
    if mirror is not None and mirror.num_items_in_batch is None:
        mirror = dataclasses.replace(mirror, num_items_in_batch=accepts)
    net = _wrapped(model, ops, place, ddp_kwargs, mirror)
    params = [p for p in model.parameters() if p.requires_grad]
    fused = mirror.fused_adamw if mirror is not None else (cuda if fused is None else fused)
    opt = torch.optim.AdamW(
        params, lr=s.lr, **({"fused": True} if fused else {}), **({"weight_decay": 0.0} if mirror is not None else {})
    )
    step = BareStep(
        net=net,
        opt=opt,
        params=params,
        fetch=batch_source(s, min(model.config.vocab_size, 49152), dev, cuda, place.rank, mirror),
        dev=dev,
        dtype=torch.bfloat16 if plan.precision == "bf16" else None,
        max_norm=mirror.max_grad_norm if mirror is not None else s.max_grad_norm,
        world=place.world,
        grad_accum=s.grad_accum,
        mirror=mirror,
    )
    return step, net


def _lora_model(spec: dict, plan, s, ops, dev, mirror: BareSettings | None):
    """The spec's model with its LoRA adapters on ``dev``, in training mode: bf16 weights on a directly driven device
    for ``bf16``, random init on the device where the backend can; the result's bf16 cast and Liger kernels. Returns
    ``(model, accepts)``: ``accepts`` is :func:`accepts_loss_kwargs` of the model before Liger patched it."""
    import torch

    from accelbench.experiments.lora.model import apply_lora, set_attention
    from accelbench.models.llm import load_causal_lm

    cuda = direct_device(ops)
    random_on_device = spec["model"].get("source") == "random" and ops.device_weight_init
    with torch.device(dev) if random_on_device else contextlib.nullcontext():
        lm = load_causal_lm(dict(spec["model"]), dtype="bfloat16" if plan.precision == "bf16" and cuda else "float32")
    model = lm.model.to(dev)
    set_attention(model, plan)
    model.config.use_cache = False
    torch.manual_seed(s.seed)
    model, _ = apply_lora(model, s)
    if mirror is not None and mirror.adapters_bf16:
        model = model.to(torch.bfloat16)  # as train_rank: peft keeps the adapters in float32 otherwise
    accepts = accepts_loss_kwargs(model)  # as Trainer.__init__, before use_liger_kernel patches (in train())
    if mirror is not None and mirror.liger:  # as Trainer (use_liger_kernel): on the base model, before wrapping
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        from accelbench.experiments.lora.series import liger_kernel_config

        _apply_liger_kernel_to_instance(
            model=model.get_base_model(), **(liger_kernel_config(mirror.liger_kernels) or {})
        )
    model.train()
    return model, accepts


def _wrapped(model, ops, place: ProcessRank, ddp_kwargs: dict | None, mirror: BareSettings | None):
    """``model`` as the step runs it: in DDP when ``place.world > 1``, then compiled last as accelerate's
    prepare_model does where the result compiled."""
    import torch

    net = (
        torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[place.local] if ops.ddp_device_ids else None, **(ddp_kwargs or {})
        )
        if place.world > 1
        else model
    )
    if mirror is not None and mirror.compile:  # accelerate's prepare_model: torch.compile last, around the DDP model
        mode = {"mode": mirror.compile_mode} if mirror.compile_mode else {}
        net = torch.compile(net, backend=mirror.compile_backend, **mode)
    return net
