"""Measurement: step timing, kernel traces, kernel classes, idle time, FLOPs and MFU.

Timing follows the usual rules for asynchronous devices: untimed warm-up steps first; then each
step is timed with CUDA events on CUDA, or with a host clock read after a device synchronize
elsewhere; the median and spread (p10/p90, stdev, min/max) of all repeats are reported together
with the raw samples. Kernel-level breakdowns come from :mod:`torch.profiler` traces exported in
Chrome trace format (the format Perfetto and ``chrome://tracing`` open).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from accelbench.backends.device import Device
from accelbench.measure import energy as _energy


# --------------------------------------------------------------------------- timing
@dataclass
class Timing:
    """Summary of repeated timings. All times in ``unit`` (milliseconds)."""

    unit: str
    count: int
    warmup: int
    median: float
    mean: float
    stdev: float
    p10: float
    p90: float
    min: float
    max: float
    method: str
    samples: list[float] = field(default_factory=list)
    energy: dict | None = field(default=None, repr=False)  # measurements.energy of the phase (not in to_dict)

    @classmethod
    def from_samples(cls, samples: list[float], warmup: int, method: str, unit: str = "ms") -> Timing:
        """Summarise ``samples`` (already in ``unit``). Raises ValueError on an empty list."""
        if not samples:
            raise ValueError("no timing samples")
        s = sorted(samples)
        q = statistics.quantiles(s, n=10, method="inclusive") if len(s) > 1 else [s[0]] * 9
        return cls(
            unit=unit,
            count=len(s),
            warmup=warmup,
            median=statistics.median(s),
            mean=statistics.fmean(s),
            stdev=statistics.stdev(s) if len(s) > 1 else 0.0,
            p10=q[0],
            p90=q[-1],
            min=s[0],
            max=s[-1],
            method=method,
            samples=list(samples),
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("energy")
        return d


class StepClock:
    """The one clock of every timed phase: training steps, LoRA's optimizer steps (a Trainer callback built on it),
    perplexity and accuracy batches, the all-reduce calls of the network test.

    CUDA: a pair of CUDA events around each step, read at :meth:`timing` (device time; no host sync inside the
    loop, so the host may queue the next step as in a plain training loop). CPU/HPU: ``synchronize`` (HPU: after
    ``mark_step``, which cuts the lazy graph) then ``time.perf_counter`` around each step. ``wall=True`` takes the
    second way on every backend: for whole phases with much host work (a perplexity pass, an lm-eval task), whose
    time is wall time. Times in ms.

    Energy (:mod:`accelbench.measure.energy`): with ``energy_steps`` (the phase's steps to meter, after ``energy_skip``
    untimed-for-energy steps) and the process's ``energy.enabled``, an :class:`~accelbench.measure.energy.EnergyMeter` reads
    the device's energy counter around windows of >= ``window_s`` of these steps (one synchronize and one read per
    window boundary, between steps; none inside a window); :meth:`energy` gives ``measurements.energy``.

    Usage::

        clock = StepClock(device)
        for batch in batches:
            clock.start(); step(batch); clock.stop()
        timing = clock.timing(warmup=0)
        seconds = clock.seconds()           # the last step, in s
    """

    def __init__(self, device: Device, wall: bool = False, energy_steps: int | None = None, energy_skip: int = 0):
        self.device = device
        self.events = device.ops.uses_device_events and not wall
        self.method = "cuda_events" if self.events else "synchronize+perf_counter"
        self._pairs: list = []
        self._samples: list[float] = []
        self._t0: float | None = None
        on = energy_steps is not None and _energy.settings().enabled
        self.meter = _energy.EnergyMeter(device, energy_steps, energy_skip) if on else None
        self._energy_asked = energy_steps is not None

    def start(self) -> None:
        if self.meter is not None:
            self.meter.before_step()
        if self.events:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._pairs.append([ev, None])
        else:
            self.device.synchronize()
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self.events:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._pairs[-1][1] = ev
        else:
            self.device.mark_step()
            self.device.synchronize()
            self._samples.append((time.perf_counter() - self._t0) * 1e3)
        if self.meter is not None:
            self.meter.after_step()

    def samples(self) -> list[float]:
        """The steps timed so far, in ms (CUDA: waits for the device once)."""
        if self.events:
            import torch

            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in self._pairs if b is not None]
        return list(self._samples)

    def energy(self) -> dict | None:
        """``measurements.energy`` of the metered steps (:meth:`accelbench.measure.energy.EnergyMeter.result`); ``off`` when
        ``energy.enabled`` is false; None when this clock was not asked to meter (no ``energy_steps``)."""
        if self.meter is not None:
            return self.meter.result()
        return _energy.off() if self._energy_asked else None

    def seconds(self) -> float:
        """The last timed step, in seconds."""
        return self.samples()[-1] / 1e3

    def timing(self, warmup: int = 0) -> Timing:
        """:class:`Timing` of the steps timed so far (``warmup``: untimed steps before them, recorded).

        Raises:
            ValueError: no step was timed.
        """
        t = Timing.from_samples(self.samples(), warmup=warmup, method=self.method)
        t.energy = self.energy()
        return t


def time_steps(
    step: Callable[[], object], device: Device, warmup: int, repeat: int, desc: str = "", energy: bool = True
) -> Timing:
    """Run ``step`` ``warmup`` times untimed, then ``repeat`` times timed with a :class:`StepClock` (``energy``:
    metering the timed steps too, see :class:`StepClock`).

    Returns:
        :class:`Timing` in milliseconds; its ``energy`` holds ``measurements.energy`` of the timed steps.
    """
    for _ in tqdm(range(warmup), desc=f"{desc} warm-up", leave=False, disable=warmup == 0):
        step()
    device.synchronize()
    clock = StepClock(device, energy_steps=repeat if energy else None)
    for _ in tqdm(range(repeat), desc=f"{desc} timed", leave=False):
        clock.start()
        step()
        clock.stop()
    return clock.timing(warmup)


def merge_ranks(samples_per_rank: list[list[float]], warmup: int, method: str) -> Timing:
    """Step time of a synchronous multi-rank job, stated once for every experiment: the slowest rank sets the pace
    of each step, so step ``i`` takes ``max`` over ranks of their step ``i`` (SR3 DDP, LoRA DDP/FSDP/ZeRO-3,
    net_smoke's all-reduce calls).

    Args:
        samples_per_rank: each rank's per-step times (same unit, same step count; extra steps of a longer list are
            dropped).
        warmup: untimed steps before them (recorded).
        method: how each rank timed its steps (``Timing.method``); ``", max over N ranks"`` is appended.

    Raises:
        ValueError: no rank or no step.
    """
    if not samples_per_rank or not all(samples_per_rank):
        raise ValueError("no rank timings to merge")
    steps = min(len(s) for s in samples_per_rank)
    merged = [max(s[i] for s in samples_per_rank) for i in range(steps)]
    return Timing.from_samples(merged, warmup=warmup, method=f"{method}, max over {len(samples_per_rank)} ranks")


# --------------------------------------------------------------------------- kernel traces
@dataclass(frozen=True)
class KernelRecord:
    """One device kernel (or, on CPU, one outermost operator) from a trace. Times in microseconds."""

    name: str
    start_us: float
    dur_us: float


# Ordered: the first matching class wins, after the one rule of :func:`classify_kernel` that reads the path a copy
# kernel took (:data:`_STRIDED_SAME_DTYPE_COPY`). Names seen in cuDNN/cuBLAS/CUTLASS/PyTorch kernels and in CPU aten
# operators. The two copy classes are told apart by what the kernel does, as far as its name proves it (decided on
# every copy kernel of the committed ``reference_runs/*/results/**/kernels.csv`` and of the recorded traces; the names
# are in tests/fixtures/copy_kernel_names.csv):
# - "layout_conversion": kernels that rearrange elements in memory without changing their values:
#   * cuDNN's NCHW<->NHWC / NCDHW<->NDHWC transposes (``nchwToNhwcKernel``, ``nhwcToNchwKernel``), transposes and
#     permutes, oneDNN reorders;
#   * same-dtype strided copies (:data:`_STRIDED_SAME_DTYPE_COPY`): PyTorch's ``direct_copy_kernel_cuda`` lambda run
#     by ``gpu_kernel_impl_nocast`` through the generic strided ``elementwise_kernel<128, N, ...>``. ``gpu_kernel_impl``
#     calls ``gpu_kernel_impl_nocast`` only when no operand needs a dynamic cast (source dtype == destination dtype
#     == the lambda's one element type), and that function launches ``elementwise_kernel`` (an offset calculator per
#     element) only when the iteration is not contiguous; a same-dtype contiguous copy is a ``cudaMemcpyAsync``
#     (``copy_device_to_device``). So the source and destination strides differ: a memory-format conversion
#     (``contiguous(memory_format=...)``, ``.to(memory_format=...)``; in the recorded channels_last_3d traces every
#     one of them sits under ``aten::contiguous`` or ``aten::to`` in GroupNorm, the convolutions and their
#     backward), or a copy into or out of a non-dense view (a transpose materialized, a slice written).
# - "cast_copy": copies that are not proved to be a layout change:
#   * dtype casts: ``bfloat16_copy_kernel_cuda``/``float16_copy_kernel_cuda``/``float8_copy_kernel_cuda`` (their own
#     lambdas, even through ``gpu_kernel_impl_nocast``: the lambda converts), ``direct_copy_kernel_cuda`` through
#     ``gpu_kernel_impl`` (the dynamic-cast paths: ``LoadWithCast``/``StoreWithCast`` in the contiguous
#     ``unrolled_elementwise_kernel``, ``elementwise_kernel<128, 4, gpu_kernel_impl<...>>`` when strided; PyTorch takes
#     them only when the dtypes differ, e.g. the recorded ``unrolled_elementwise_kernel<direct_copy_kernel_cuda ...
#     {lambda(float)#1} ... LoadWithCast<1>, StoreWithCast<1>>`` of 1-3 us: some other dtype cast to float32, not a
#     same-dtype copy), ``aten::to``/``aten::_to_copy``;
#   * cuDNN's ``convertTensor_kernel<SRC, DST, ...>(alpha, src, beta, dst, n)``, equal element types or not: its one
#     flat element count (no dimensions, no strides) cannot change a layout. The recorded float->float one runs only in
#     TF32 + channels_last_3d steps, inside ``cudnn_convolution`` on operands that are already NDHWC, with cuDNN's
#     data-type tag 2 that its TF32 transposes carry: an element-wise conversion of the operands, not a transpose;
#   * contiguous same-dtype copies (``vectorized_elementwise_kernel``/``unrolled_elementwise_kernel`` with
#     ``direct_copy_kernel_cuda`` and no cast: plain copies, no layout change);
#   * copies whose name does not say which path ran: ``direct_copy_kernel`` without ``gpu_kernel_impl_nocast`` (older
#     PyTorch, or a name cut short before it), CPU operators (``aten::copy_``/``clone``/``contiguous``: one operator
#     name for a layout change and a plain copy). A layout change among them is not counted as one.
KERNEL_CLASSES: list[tuple[str, re.Pattern]] = [
    (
        "layout_conversion",
        re.compile(r"nchwToNhwc|nhwcToNchw|ncdhw|ndhwc|nchw_to_nhwc|nhwc_to_nchw|transpose|permute|reorder", re.I),
    ),
    (
        "cast_copy",
        re.compile(
            r"direct_copy_kernel|copy_kernel|bfloat16_copy|float8_copy|LoadWithCast|StoreWithCast|convertTensor|"
            r"aten::copy_|aten::clone|aten::contiguous|aten::to\b|aten::_to_copy|aten::_to_dtype|ToCopyBackward|"
            r"CloneBackward",
            re.I,
        ),
    ),
    (
        "attention",
        re.compile(r"fmha|flash|attention|softmax|sdpa|scaled_dot_product|einsum|baddbmm|\bbmm|BmmBackward", re.I),
    ),
    (
        "convolution",
        re.compile(
            r"conv|implicit_gemm|implicit_convolve|fprop|dgrad|wgrad|scudnn|winograd|cudnn|"
            r"xmma_fprop|xmma_dgrad|xmma_wgrad|mkldnn_convolution|slow_conv3d|im2col|vol2col|col2vol",
            re.I,
        ),
    ),
    (
        "gemm",
        re.compile(
            r"gemm|cublas|cutlass|matmul|triton_tem_fused_\w*?(?<![a-z])(add|b)?mm(?![a-z])|aten::mm\b|"
            r"aten::addmm|aten::linear|AddmmBackward|\bMmBackward|xmma",
            re.I,
        ),
    ),
    ("elementwise", re.compile(r"distribution_|normal_kernel|philox|aten::randn|aten::normal_", re.I)),  # RNG
    (
        "normalization",
        re.compile(
            r"group_?norm|layer_?norm|batch_?norm|rms_?norm|welford|RowwiseMoments|ComputeFusedParams|GammaBeta|"
            r"ComputeInternalGradients|ComputeBackwardFusedParams|"
            r"aten::native_group_norm",
            re.I,
        ),
    ),
    (
        "reduction",
        re.compile(
            r"reduce|triton_red_|triton_per_|sum_kernel|mean_kernel|aten::sum|aten::mean|"
            r"aten::l1_loss|norm_kernel",
            re.I,
        ),
    ),
    ("memory", re.compile(r"memcpy|memset|Memcpy|Memset|aten::fill_|aten::zero_|aten::empty", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor_apply|foreach|aten::_fused_adam", re.I)),
    (
        "elementwise",
        re.compile(
            r"elementwise|vectorized|unrolled|pointwise|triton_poi|aten::(add|mul|sub|div|silu|sigmoid|exp|pow|sqrt|"
            r"addcmul|addcdiv|lerp|where|neg|abs|sign|cat|upsample)|upsample|silu|sigmoid|triton_|AccumulateGrad|"
            r"\b(Add|Mul|Sub|Div|Silu|Sigmoid|Exp|Pow|Sqrt|Neg|Cat|Clone|Expand|View|Unsqueeze|Squeeze|Where|Lerp)Backward",
            re.I,
        ),
    ),
]
# Tensor-core kernels (a property, not a class): TF32/BF16/FP16/INT8 tile names and HMMA/GMMA/WGMMA
# mnemonics; FP32 kernels that run on the FMA pipes say "ffma" (cuDNN) or "sgemm"/"scudnn".
TENSOR_CORE = re.compile(
    r"tf32|bf16|f16|fp16|h884|h1688|h16816|s1688|s16816|i8816|hmma|gmma|wgmma|tensorop|"
    r"tensor\d+x\d+|warpgroupsize|fp8|e4m3",
    re.I,
)
NOT_TENSOR_CORE = re.compile(r"ffma|sgemm|scudnn|dgemm", re.I)


# A same-dtype strided copy (see the comment above :data:`KERNEL_CLASSES`): ``direct_copy_kernel_cuda``'s lambda
# inside ``gpu_kernel_impl_nocast<...>``, launched by the generic ``elementwise_kernel<...>`` (not ``vectorized_`` or
# ``unrolled_``), in the spellings torch.profiler (``at::native::``), Nsight Compute
# (``void at::gpu_kernel_impl_nocast<at::...>``) and Nsight Systems (``(int)128``) give it.
_STRIDED_SAME_DTYPE_COPY = re.compile(
    r"(?<![\w])elementwise_kernel<[^<>]*?gpu_kernel_impl_nocast<\s*(?:[\w:]*::)?direct_copy_kernel_cuda"
)


# Inductor's generated pointwise/reduction kernels (``triton_poi_``/``triton_red_``/``triton_per_``) are named after
# every operator whose nodes they fuse, including the convolution or matmul that produced their input
# (``triton_poi_fused__to_copy_add_clone_convolution_native_dropout_native_group_norm_silu_unsqueeze_16``: a GroupNorm
# + SiLU epilogue); those names say nothing of the kernel's own work, so these kernels are never ``convolution`` or
# ``gemm``. Inductor's template kernels (``triton_tem_``) do run the matmul or convolution.
_INDUCTOR_FUSED = re.compile(r"triton_(poi|red|per)_")
_NOT_FOR_FUSED = ("convolution", "gemm")


def classify_kernel(name: str) -> str:
    """Class of a kernel or operator name: one of :data:`KERNEL_CLASSES` or ``other``.

    Copies are classed by what they do (the comment above :data:`KERNEL_CLASSES` gives the evidence):
    ``layout_conversion`` = cuDNN's NC(D)HW<->N(D)HWC transposes, transposes/permutes/reorders, and same-dtype strided
    copies (``direct_copy_kernel_cuda`` run by ``gpu_kernel_impl_nocast`` through the strided ``elementwise_kernel``:
    :data:`_STRIDED_SAME_DTYPE_COPY`); ``cast_copy`` = dtype casts (``bfloat16_copy_kernel_cuda``, ``LoadWithCast``/
    ``StoreWithCast``, ``aten::to``/``_to_copy``), cuDNN's flat ``convertTensor_kernel`` (any element types),
    contiguous same-dtype copies, and copies whose name does not show the path (``direct_copy_kernel`` without
    ``gpu_kernel_impl_nocast``, CPU ``aten::copy_``/``clone``/``contiguous``). Inductor's fused pointwise and reduction
    kernels are never ``convolution`` or ``gemm`` (see :data:`_INDUCTOR_FUSED`).
    """
    if _STRIDED_SAME_DTYPE_COPY.search(name):
        return "layout_conversion"
    fused = bool(_INDUCTOR_FUSED.search(name))
    for cls, pattern in KERNEL_CLASSES:
        if fused and cls in _NOT_FOR_FUSED:
            continue
        if pattern.search(name):
            return cls
    return "other"


def is_tensor_core_kernel(name: str) -> bool:
    """True if the kernel name says it runs on tensor cores (HMMA/GMMA, TF32/BF16/FP16 tiles)."""
    return bool(TENSOR_CORE.search(name)) and not NOT_TENSOR_CORE.search(name)


def load_chrome_trace(path: str | Path) -> dict:
    """Read a Chrome trace (``.json`` or ``.json.gz``) as written by ``torch.profiler``."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


# Wrappers around other operators (torch.compile regions, autograd's per-node wrappers for compiled
# graphs and gradient accumulation): looked through, so that the operators inside them count.
_WRAPPERS = re.compile(
    r"^Torch-Compiled Region|CompiledFunction|^## Call CompiledFxGraph|"
    r"^autograd::engine::evaluate_function: (CompiledFunctionBackward|torch::autograd::)"
)


def _outermost_events(events: list[dict]) -> list[dict]:
    """Events not nested inside another event of the same thread (CPU operator traces).

    On CPU the outermost aten operator (``aten::conv3d``, ``autograd::engine::evaluate_function:
    ConvolutionBackward0``, ...) is the unit that dispatches one fused implementation: it plays the
    role a kernel plays on a GPU, and outermost events never overlap, so times add up. Code that
    torch.compile generates for the CPU is not an ATen operator and does not appear (it counts as idle).
    """
    out = []
    by_tid: dict = {}
    for e in events:
        if _WRAPPERS.search(e.get("name", "")):
            continue
        by_tid.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        end = float("-inf")
        for e in evs:
            if e["ts"] >= end:
                out.append(e)
                end = e["ts"] + e.get("dur", 0)
    return out


def kernel_records_from_trace(trace: dict) -> tuple[list[KernelRecord], str, tuple[float, float] | None]:
    """Device kernels of a Chrome trace, or outermost CPU operators when the trace has no device kernels.

    Returns:
        ``(records, source, step_window)``: ``source`` is ``"device_kernel"`` or ``"cpu_op"`` (outermost CPU operators);
        ``step_window`` is the ``(start_us, end_us)`` span of the ``accelbench_step`` annotations
        (None if absent).
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    steps = [
        e
        for e in events
        if e.get("name", "").startswith("accelbench_step")
        and e.get("cat") in ("user_annotation", "cpu_op", "python_function")
    ]
    window = (min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)) if steps else None
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    source = "device_kernel"
    if not kernels:
        ops = [e for e in events if e.get("cat") == "cpu_op"]
        if window:
            ops = [e for e in ops if window[0] <= e["ts"] <= window[1]]
        kernels, source = _outermost_events(ops), "cpu_op"
    records = [KernelRecord(e["name"], float(e["ts"]), float(e.get("dur", 0.0))) for e in kernels]
    return records, source, window


def busy_union_us(records: Iterable[KernelRecord]) -> float:
    """Total time covered by at least one record (overlaps counted once), in microseconds."""
    total, cur_start, cur_end = 0.0, None, None
    for r in sorted(records, key=lambda r: r.start_us):
        end = r.start_us + r.dur_us
        if cur_end is None or r.start_us > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = r.start_us, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


@dataclass
class KernelSummary:
    """Reduced kernel trace for ``steps`` profiled steps. Times in microseconds per step."""

    source: str
    steps: int
    kernel_count: float
    distinct_kernels: int
    device_time_us: float
    span_us: float
    idle_fraction: float
    class_time_us: dict[str, float]
    class_share: dict[str, float]
    tensor_core_share: float
    layout_conversion_count: float
    cast_copy_count: float
    table: list[dict]

    def to_dict(self, top: int | None = 25) -> dict:
        d = asdict(self)
        d["table"] = self.table[:top] if top else self.table
        return d


def summarize_kernels(
    records: list[KernelRecord], source: str, steps: int = 1, window: tuple[float, float] | None = None
) -> KernelSummary:
    """Per-kernel table, class totals/shares, kernel count and device idle fraction.

    ``idle_fraction`` = 1 - (time with at least one kernel running) / span, where span is the first
    kernel start to the last kernel end (device kernels) or the step annotation window (CPU ops).
    Counts and times are divided by ``steps``. ``layout_conversion_count`` and ``cast_copy_count``
    are kernel launches per step of those two classes.
    """
    if not records:
        raise ValueError("the trace holds no kernels or operators")
    by_name: dict[str, dict] = {}
    for r in records:
        row = by_name.setdefault(r.name, {"name": r.name, "calls": 0, "device_time_us": 0.0})
        row["calls"] += 1
        row["device_time_us"] += r.dur_us
    total = sum(row["device_time_us"] for row in by_name.values())
    table = []
    for row in sorted(by_name.values(), key=lambda r: -r["device_time_us"]):
        table.append(
            {
                "name": row["name"],
                "class": classify_kernel(row["name"]),
                "tensor_core": is_tensor_core_kernel(row["name"]),
                "calls": row["calls"] / steps,
                "device_time_us": row["device_time_us"] / steps,
                "share": row["device_time_us"] / total if total else 0.0,
            }
        )
    if source == "device_kernel" or window is None:
        span = max(r.start_us + r.dur_us for r in records) - min(r.start_us for r in records)
    else:
        span = window[1] - window[0]
    busy = busy_union_us(records)
    return KernelSummary(
        source=source,
        steps=steps,
        kernel_count=len(records) / steps,
        distinct_kernels=len(table),
        device_time_us=total / steps,
        span_us=span / steps,
        idle_fraction=max(0.0, 1.0 - busy / span) if span > 0 else 0.0,
        **_class_totals(table),
        table=table,
    )


# The fields of a kernel summary (``measurements.kernels`` of a result) that depend on the classifier.
CLASS_FIELDS = ("class_time_us", "class_share", "tensor_core_share", "layout_conversion_count", "cast_copy_count")


def _class_totals(table: list[dict]) -> dict:
    """:data:`CLASS_FIELDS` of a complete per-kernel table whose rows hold ``class``, ``tensor_core``, ``calls`` and
    ``device_time_us`` (per step): device time per class, its share of the table's device time, the tensor-core share,
    and the launches per step of the two copy classes."""
    total = sum(r["device_time_us"] for r in table)
    classes = list(dict.fromkeys([c for c, _ in KERNEL_CLASSES] + ["other"]))
    class_time = {c: sum(r["device_time_us"] for r in table if r["class"] == c) for c in classes}
    return {
        "class_time_us": class_time,
        "class_share": {c: (t / total if total else 0.0) for c, t in class_time.items()},
        "tensor_core_share": sum(r["device_time_us"] for r in table if r["tensor_core"]) / total if total else 0.0,
        "layout_conversion_count": sum(r["calls"] for r in table if r["class"] == "layout_conversion"),
        "cast_copy_count": sum(r["calls"] for r in table if r["class"] == "cast_copy"),
    }


def read_kernel_table(path: str | Path) -> list[dict]:
    """Rows of a ``kernels.csv`` written by :func:`write_kernel_table`, numbers as numbers (``tensor_core`` a bool)."""
    import csv

    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for i, row in enumerate(rows, start=2):
        try:
            out.append(
                {
                    **row,
                    "calls": float(row["calls"]),
                    "device_time_us": float(row["device_time_us"]),
                    "share": float(row.get("share") or 0.0),
                    "tensor_core": str(row.get("tensor_core", "")).strip().lower() == "true",
                }
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: line {i}: not a kernel-table row ({exc!r})") from None
    return out


def reclassify(kernels_csv_rows: Iterable[dict]) -> dict:
    """The class numbers of a complete per-kernel table (the rows of a result's ``kernels.csv``: ``name``, ``calls``,
    ``device_time_us`` per step; the recorded ``class`` and ``tensor_core`` columns are ignored), re-derived with the
    current :func:`classify_kernel` and :func:`is_tensor_core_kernel`: the :data:`CLASS_FIELDS` of
    ``measurements.kernels`` (``class_time_us``, ``class_share``, ``tensor_core_share``, ``layout_conversion_count``,
    ``cast_copy_count``), exactly as :func:`summarize_kernels` computes them from a trace. Shares are of the table's
    total device time (the result's ``device_time_us``: kernels.csv holds every kernel)."""
    table = [
        {
            "class": classify_kernel(r["name"]),
            "tensor_core": is_tensor_core_kernel(r["name"]),
            "calls": float(r["calls"]),
            "device_time_us": float(r["device_time_us"]),
        }
        for r in kernels_csv_rows
    ]
    return _class_totals(table)


def reclassify_recorded(kernels: dict) -> dict:
    """The class numbers of a recorded ``measurements.kernels`` re-derived from its own top table, for a result whose
    ``kernels.csv`` is not kept: each row of ``table`` (the top kernels by device time) that the current
    :func:`classify_kernel` puts in another class moves its time and launches there; the kernels outside the table
    keep their recorded classes. Returns the :data:`CLASS_FIELDS` (``tensor_core_share`` as recorded)."""
    time = {c: float(t) for c, t in kernels["class_time_us"].items()}
    counts = {"layout_conversion": kernels.get("layout_conversion_count"), "cast_copy": kernels.get("cast_copy_count")}
    for row in kernels.get("table") or []:
        old, new = row["class"], classify_kernel(row["name"])
        if old == new:
            continue
        time[old] = time.get(old, 0.0) - row["device_time_us"]
        time[new] = time.get(new, 0.0) + row["device_time_us"]
        for c, sign in ((old, -1), (new, 1)):
            if counts.get(c) is not None:
                counts[c] += sign * row["calls"]
    total = sum(time.values())
    return {
        "class_time_us": time,
        "class_share": {c: (t / total if total else 0.0) for c, t in time.items()},
        "tensor_core_share": kernels.get("tensor_core_share"),
        "layout_conversion_count": counts["layout_conversion"],
        "cast_copy_count": counts["cast_copy"],
    }


# Where the class numbers of :func:`current_classes` come from.
CLASSES_FROM_TABLE = "kernels.csv, current classifier"
CLASSES_FROM_TOP = "top kernels reclassified, the rest as recorded"
CLASSES_AS_RECORDED = "as recorded"


def current_classes(kernels: dict, kernel_table: str | Path | None = None) -> tuple[dict, str]:
    """``measurements.kernels`` of a result with its class numbers (:data:`CLASS_FIELDS`) re-derived by the current
    classifier, and where they come from: the full per-kernel table ``kernel_table`` (the result's ``kernels.csv``)
    when it exists (:func:`reclassify`, :data:`CLASSES_FROM_TABLE`), else the result's own top table
    (:func:`reclassify_recorded`, :data:`CLASSES_FROM_TOP`), else the numbers as recorded. The result itself is not
    changed: a result records what its run's classifier said; an aggregation reads the current rule."""
    if kernel_table is not None and Path(kernel_table).is_file():
        return {**kernels, **reclassify(read_kernel_table(kernel_table))}, CLASSES_FROM_TABLE
    if kernels.get("table") and kernels.get("class_time_us"):
        return {**kernels, **reclassify_recorded(kernels)}, CLASSES_FROM_TOP
    return dict(kernels), CLASSES_AS_RECORDED


def write_kernel_table(summary: KernelSummary, path: str | Path) -> None:
    """Write the full per-kernel table as CSV (name, class, tensor_core, calls, device_time_us, share)."""
    import csv

    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["name", "class", "tensor_core", "calls", "device_time_us", "share"])
        writer.writeheader()
        writer.writerows(summary.table)


def profile_steps(step: Callable[[], object], device: Device, steps: int, trace_path: str | Path) -> KernelSummary:
    """Capture ``steps`` calls of ``step`` with torch.profiler, export the trace, reduce it.

    Each step runs inside a ``record_function("accelbench_step")`` range followed by a device
    synchronize, so kernels of one step do not spill into the next.
    """
    import torch

    with torch.profiler.profile(activities=device.profiler_activities()) as prof:
        for _ in range(steps):
            with torch.profiler.record_function("accelbench_step"):
                step()
                device.synchronize()
    prof.export_chrome_trace(str(trace_path))
    records, source, window = kernel_records_from_trace(load_chrome_trace(trace_path))
    return summarize_kernels(records, source, steps=steps, window=window)


# --------------------------------------------------------------------------- FLOPs and MFU
