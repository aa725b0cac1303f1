"""Kernel classes: the class of a kernel or operator name (:func:`classify_kernel`: convolution, GEMM, attention,
layout conversion, cast copy, normalization, ...; ``other`` when none matches), the tensor-core property
(:func:`is_tensor_core_kernel`), the class numbers of a per-kernel table (:func:`class_totals`: device time per class in
us per step, shares, launches per step of the two copy classes), and the class numbers of recorded results re-derived by
the current classifier (:func:`reclassify` from a ``kernels.csv``, :func:`reclassify_recorded` from a result's own top
table, :func:`current_classes` choosing between them).

Torch-free (aggregations import it). Kernel traces, their summaries and the writing of ``kernels.csv`` are in
:mod:`accelbench.measure.kernels`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

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
            r"gemm|cublas|cutlass|nvjet|matmul|triton_tem_fused_\w*?(?<![a-z])(add|b)?mm(?![a-z])|aten::mm\b|"
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


# The fields of a kernel summary (``measurements.kernels`` of a result) that depend on the classifier.
CLASS_FIELDS = ("class_time_us", "class_share", "tensor_core_share", "layout_conversion_count", "cast_copy_count")


def class_totals(table: list[dict]) -> dict:
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


MAX_KERNEL_TABLE_BYTES = 64 * 2**20  # a kernels.csv: one row per kernel name (a U-Net step: ~100 kB)


def read_kernel_table(path: str | Path) -> list[dict]:
    """Rows of a ``kernels.csv`` written by :func:`write_kernel_table`, numbers as numbers (``tensor_core`` a bool).

    Raises:
        DataError: not a plain file of at most :data:`MAX_KERNEL_TABLE_BYTES` (a FIFO, a link to a huge file), a cell
            past the field limit, bad CSV (:func:`accelbench.core.files.read_csv`); one line naming the file.
        ValueError: a row that is not a kernel-table row (file and line named).
    """
    from accelbench.core.files import read_csv
    from accelbench.errors import DataError

    rows = read_csv(path, "kernel table", MAX_KERNEL_TABLE_BYTES, DataError)
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
    return class_totals(table)


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
