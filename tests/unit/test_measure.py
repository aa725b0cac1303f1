import re
from pathlib import Path

import pytest

from accelbench.backends.device import Device
from accelbench.measure import flops, kernel_classes, kernels, timing
from accelbench.measure.kernels import KernelRecord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_timing_summary():
    t = timing.Timing.from_samples([3.0, 1.0, 2.0, 10.0, 4.0], warmup=2, method="test")
    assert t.median == 3.0 and t.min == 1.0 and t.max == 10.0 and t.count == 5 and t.warmup == 2
    assert t.p10 <= t.median <= t.p90 and t.samples == [3.0, 1.0, 2.0, 10.0, 4.0]
    with pytest.raises(ValueError):
        timing.Timing.from_samples([], warmup=0, method="test")


def test_timing_summary_against_numpy():
    """Median, mean, stdev and p10/p90 against numpy (linear interpolation = statistics' 'inclusive' method)."""
    import numpy as np

    samples = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0, 10.0, 30.0]
    t = timing.Timing.from_samples(samples, warmup=0, method="test")
    assert t.median == np.median(samples) and t.mean == pytest.approx(np.mean(samples))
    assert t.stdev == pytest.approx(np.std(samples, ddof=1))
    assert (t.p10, t.p90) == pytest.approx((np.percentile(samples, 10), np.percentile(samples, 90)))
    assert (t.min, t.max, t.count) == (1.0, 30.0, 11)
    one = timing.Timing.from_samples([4.0], warmup=1, method="test")
    assert (one.median, one.p10, one.p90, one.stdev, one.mean) == (4.0, 4.0, 4.0, 0.0, 4.0)
    two = timing.Timing.from_samples([2.0, 4.0], warmup=1, method="test")
    assert two.p10 == pytest.approx(2.2) and two.p90 == pytest.approx(3.8) and two.stdev == pytest.approx(2**0.5)


def test_merge_ranks_takes_the_slowest_rank_per_step():
    t = timing.merge_ranks([[1.0, 5.0, 2.0, 9.0], [3.0, 4.0, 2.5]], warmup=2, method="cuda_events")
    assert t.samples == [3.0, 5.0, 2.5] and t.median == 3.0 and t.count == 3  # extra steps of a longer rank dropped
    assert t.warmup == 2 and t.method == "cuda_events, max over 2 ranks"
    assert timing.merge_ranks([[2.0]], 0, "m").samples == [2.0]
    for bad in ([], [[1.0], []]):
        with pytest.raises(ValueError, match="no rank timings"):
            timing.merge_ranks(bad, 0, "m")


def test_time_steps_counts_calls():
    calls = []
    t = timing.time_steps(lambda: calls.append(1), Device("cpu"), warmup=3, repeat=4)
    assert len(calls) == 7 and t.count == 4 and t.unit == "ms" and t.method == "synchronize+perf_counter"


@pytest.mark.parametrize(
    "name,cls",
    [
        ("sm90_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32", "convolution"),
        (
            "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>",
            "layout_conversion",
        ),
        (
            "void cudnn::ops::nhwcToNchwKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>",
            "layout_conversion",
        ),
        ("volta_scudnn_128x64_relu_interior_nn_v1", "convolution"),
        ("sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw", "convolution"),
        ("ampere_sgemm_128x64_nn", "gemm"),
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),  # cuBLAS's Hopper GEMMs (LoRA ours, H200)
        ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>", "normalization"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel", "elementwise"),
        (
            "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, normal>",
            "elementwise",
        ),
        (
            "void at::native::elementwise_kernel<128, 4, at::native::direct_copy_kernel_cuda",
            "cast_copy",
        ),  # path unknown
        # casts recorded in a bf16-autocast block on an H200: not layout conversions
        (
            "void at::native::unrolled_elementwise_kernel<at::native::bfloat16_copy_kernel_cuda(at::"
            "TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>",
            "cast_copy",
        ),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
            "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::"
            "BFloat16)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, "
            "TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::"
            "StoreWithCast<1> >",
            "cast_copy",
        ),
        # a flat element-wise conversion (one element count, no strides), not a transpose:
        # see kernel_classes.KERNEL_CLASSES
        (
            "void cudnn::engines_precompiled::convertTensor_kernel<float, float, float, (cudnnKernelDataType_t)2>",
            "cast_copy",
        ),
        (
            "void cudnn::engines_precompiled::convertTensor_kernel<__nv_bfloat16, float, float, ("
            "cudnnKernelDataType_t)2>",
            "cast_copy",
        ),
        ("aten::copy_", "cast_copy"),
        ("aten::to", "cast_copy"),
        ("aten::topk", "other"),
        ("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>", "attention"),
        ("Memset (Device)", "memory"),
        ("autograd::engine::evaluate_function: ConvolutionBackward0", "convolution"),
        ("aten::native_group_norm", "normalization"),
        ("some_unknown_kernel", "other"),
        # Inductor kernels recorded on an H200 (SR3 bf16, channels_last): a fused GroupNorm + SiLU epilogue named after
        # the convolution that feeds it is not a convolution; a template kernel is
        (
            "triton_poi_fused__to_copy_add_clone_convolution_native_dropout_native_group_norm_silu_unsqueeze_16",
            "normalization",
        ),
        ("triton_red_fused__to_copy_convolution_backward_native_group_norm_backward_sum_3", "normalization"),
        ("triton_poi_fused_addmm_silu_2", "elementwise"),
        ("triton_tem_fused_convolution_0", "convolution"),
        ("triton_tem_fused_mm_1", "gemm"),
        ("triton_tem_fused_add_mm_0", "gemm"),  # Inductor sorts the fused operators' names: epilogues come first
        ("triton_tem_fused__to_copy_mm_0", "gemm"),
        ("triton_red_fused_convolution_backward_0", "reduction"),  # a bias gradient's sum
        ("triton_poi_fused_convert_element_type_0", "elementwise"),  # "conv..." in a fused kernel's name
    ],
)
def test_classify_kernel(name, cls):
    assert kernel_classes.classify_kernel(name) == cls


def test_tensor_core_flag():
    # names recorded on an H200 (cuDNN 9.19): TF32 kernels on tensor cores, FP32 ones on the FMA pipes
    assert kernel_classes.is_tensor_core_kernel(
        "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x32_warpgroupsize1x1x1"
    )
    assert kernel_classes.is_tensor_core_kernel(
        "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tensor16x8x8"
    )
    assert not kernel_classes.is_tensor_core_kernel(
        "sm80_xmma_wgrad_implicit_gemm_indexed_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize32x32x8_stage3_g1_ffma_execute"
    )
    assert not kernel_classes.is_tensor_core_kernel("volta_scudnn_128x64_relu_interior_nn_v1")
    assert (
        kernel_classes.classify_kernel(
            "void at::native::(anonymous namespace)::ComputeInternalGradientsCUDAKernel<float>"
        )
        == "normalization"
    )


def test_busy_union_and_idle_fraction():
    recs = [KernelRecord("a", 0, 10), KernelRecord("b", 5, 10), KernelRecord("c", 30, 10)]
    assert kernels.busy_union_us(recs) == 25
    s = kernels.summarize_kernels(recs, "device_kernel")
    assert s.span_us == 40 and s.idle_fraction == pytest.approx(1 - 25 / 40)
    assert s.kernel_count == 3 and s.distinct_kernels == 3
    assert sum(s.class_share.values()) == pytest.approx(1.0)


def test_summarize_kernels_by_hand():
    """Two profiled steps of 3 kernel names, counted by hand: per-step calls and times, order, shares, tensor-core
    share, idle fraction from the kernel span (device) or the step window (CPU ops)."""
    recs = [
        KernelRecord("sm80_xmma_fprop_implicit_gemm_tf32f32_kernel", 0, 40),
        KernelRecord("void at::native::vectorized_elementwise_kernel<4, silu>", 40, 10),
        KernelRecord("void cudnn::ops::nchwToNhwcKernel<float>", 60, 10),
        KernelRecord("sm80_xmma_fprop_implicit_gemm_tf32f32_kernel", 100, 40),
        KernelRecord("void at::native::vectorized_elementwise_kernel<4, silu>", 140, 10),
        KernelRecord("void cudnn::ops::nchwToNhwcKernel<float>", 160, 10),
        KernelRecord("void cudnn::ops::nchwToNhwcKernel<float>", 170, 20),
    ]
    s = kernels.summarize_kernels(recs, "device_kernel", steps=2)
    assert [r["name"][:12] for r in s.table] == ["sm80_xmma_fp", "void cudnn::", "void at::nat"]  # by device time
    conv, layout, elem = s.table
    assert (conv["calls"], conv["device_time_us"], conv["share"]) == (1.0, 40.0, pytest.approx(80 / 140))
    assert (layout["calls"], layout["device_time_us"]) == (1.5, 20.0) and elem["device_time_us"] == 10.0
    assert conv["tensor_core"] and not elem["tensor_core"]
    assert s.kernel_count == 3.5 and s.distinct_kernels == 3 and s.device_time_us == 70.0
    assert s.span_us == 95.0 and s.idle_fraction == pytest.approx(1 - 140 / 190)  # busy 140 of span 0..190
    assert s.class_time_us["convolution"] == 40.0 and s.class_share["layout_conversion"] == pytest.approx(40 / 140)
    assert s.tensor_core_share == pytest.approx(80 / 140) and s.layout_conversion_count == 1.5
    assert s.cast_copy_count == 0 and s.source == "device_kernel" and s.steps == 2
    cpu = kernels.summarize_kernels(recs, "cpu_op", steps=2, window=(0.0, 400.0))
    assert cpu.span_us == 200.0 and cpu.idle_fraction == pytest.approx(1 - 140 / 400)
    assert kernels.busy_union_us([KernelRecord("a", 0, 10), KernelRecord("b", 10, 5), KernelRecord("c", 20, 5)]) == 20
    with pytest.raises(ValueError, match="no kernels"):
        kernels.summarize_kernels([], "device_kernel")


def test_recorded_cpu_trace_is_reduced():
    """A real torch.profiler trace (conv3d + GroupNorm + attention, forward and backward) on a CPU."""
    records, source, window = kernels.kernel_records_from_trace(
        kernels.load_chrome_trace(FIXTURES / "cpu_trace.json.gz")
    )
    assert source == "cpu_op" and window is not None
    s = kernels.summarize_kernels(records, source, window=window)
    classes = {row["name"]: row["class"] for row in s.table}
    assert classes["aten::conv3d"] == "convolution"
    assert classes["autograd::engine::evaluate_function: ConvolutionBackward0"] == "convolution"
    assert classes["aten::group_norm"] == "normalization" and classes["aten::softmax"] == "attention"
    assert 0 <= s.idle_fraction < 1 and s.class_share["convolution"] > 0 and s.class_share["attention"] > 0
    # outermost operators only: children of aten::conv3d are not counted again
    assert "aten::convolution" not in classes


def _launching_ops(trace: dict, kernel: dict) -> list[str]:
    """The CPU operators (outermost first) around the runtime call that launched ``kernel`` (by correlation id)."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    launch = next(
        e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and e["args"].get("correlation") == kernel["args"]["correlation"]
    )
    ops = [
        e
        for e in events
        if e.get("cat") == "cpu_op"
        and e.get("tid") == launch.get("tid")
        and e["ts"] <= launch["ts"] <= e["ts"] + e.get("dur", 0)
    ]
    return [e["name"] for e in sorted(ops, key=lambda e: (e["ts"], -e.get("dur", 0)))]


def check_cuda_trace_split() -> None:
    """The recorded H200 trace (fp32 channels_last_3d, TF32 on) holds 7 same-dtype ``direct_copy_kernel_cuda`` copies
    through ``gpu_kernel_impl_nocast``'s strided ``elementwise_kernel``, each launched under ``aten::contiguous`` or
    ``aten::to`` (memory-format conversions: the NCDHW input to channels_last_3d, GroupNorm's and the convolution
    backward's ``contiguous``), and 6 cuDNN ``convertTensor_kernel<float, float, float, ...>(alpha, src, beta, dst, n)``
    inside ``cudnn_convolution`` on operands already NDHWC: the first are layout conversions, the second flat
    element-wise conversions (cast_copy). Raises AssertionError when the classifier disagrees."""
    trace = kernels.load_chrome_trace(FIXTURES / "cuda_trace.json.gz")
    records, source, _ = kernels.kernel_records_from_trace(trace)
    assert source == "device_kernel"
    s = kernels.summarize_kernels(records, source)
    device_kernels = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    copies = [k for k in device_kernels if "direct_copy_kernel_cuda" in k["name"]]
    converts = [k for k in device_kernels if "convertTensor_kernel<float, float, float" in k["name"]]
    assert (len(copies), len(converts)) == (7, 6)
    # the evidence, from the trace itself: what launched each kernel
    assert all(
        "gpu_kernel_impl_nocast" in k["name"] and k["name"].startswith("void at::native::elementwise_kernel<")
        for k in copies
    )
    assert all({"aten::contiguous", "aten::to"} & set(_launching_ops(trace, k)) for k in copies)
    assert all(
        _launching_ops(trace, k)[-1] in ("aten::cudnn_convolution", "aten::convolution_backward") for k in converts
    )
    assert all(k["name"].endswith("float*, unsigned long)") for k in converts)  # one flat count, no strides
    assert s.layout_conversion_count == len(copies)  # channels_last_3d adds layout-conversion kernels
    assert s.cast_copy_count == len(converts)
    assert {row["class"] for row in s.table if "direct_copy" in row["name"]} == {"layout_conversion"}
    assert s.class_share["convolution"] > 0.2
    assert 0 <= s.idle_fraction < 1


def test_recorded_cuda_trace_is_reduced():
    """A real trace of a channels_last_3d conv3d training step recorded on an NVIDIA H200."""
    check_cuda_trace_split()


def test_sabotage_strided_copy_counted_as_cast_is_caught(monkeypatch):
    """Sabotage: the previous classifier (every ``direct_copy_kernel`` a cast/copy) must fail the check."""
    monkeypatch.setattr(kernel_classes, "_STRIDED_SAME_DTYPE_COPY", re.compile(r"(?!)"))
    with pytest.raises(AssertionError):
        check_cuda_trace_split()


def test_sabotage_flat_convert_counted_as_layout_is_caught(monkeypatch):
    """Sabotage: cuDNN's flat ``convertTensor_kernel`` back in layout_conversion must fail the check."""
    sabotaged = [
        ("layout_conversion", re.compile(kernel_classes.KERNEL_CLASSES[0][1].pattern + "|convertTensor", re.I))
    ]
    monkeypatch.setattr(kernel_classes, "KERNEL_CLASSES", sabotaged + kernel_classes.KERNEL_CLASSES[1:])
    with pytest.raises(AssertionError):
        check_cuda_trace_split()


def test_flops_and_mfu():
    import torch

    lin = torch.nn.Linear(64, 32, bias=False)
    x = torch.randn(8, 64)
    assert flops.count_flops(lambda: lin(x)) == 2 * 8 * 64 * 32
    r = flops.throughput_and_mfu(1e12, 1000.0, 2.0)
    assert r["tflop_per_s"] == pytest.approx(1.0) and r["mfu"] == pytest.approx(0.5)
    assert flops.throughput_and_mfu(1e12, 1000.0, None)["mfu"] is None
