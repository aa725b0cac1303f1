"""Convolution shapes of Study A's and SR3's networks, each timed alone on the device under cuDNN's switches.

Both diffusion nets are bound by cuDNN convolutions. This tool takes every convolution one forward of each network
calls (the product's own builders: Study A's ``unet3d.network.build_network`` with the implementations of
``--study-a-configuration``, SR3's ``sr3.network.build_unet`` with the settings ``sr3.job.Settings.from_spec`` gives
``--sr3-configuration``; ``--scale paper``: 128^3 at width 64 batch 1, 256 px at width 128 batch 4 per device),
captured on the **meta device** (no memory; a CPU does it in seconds): input, weight, stride, padding, dilation,
groups and how many times each distinct shape is called per forward. Forward hooks on every ``nn.Conv1d/2d/3d``
name the module and whether its input needs a gradient; a ``TorchDispatchMode`` records the ``aten.convolution``
arguments themselves, so a convolution called outside a module is captured too (module ``(functional)``).

Then, per distinct shape, it times on ``--device`` the forward (``aten.convolution``), the input gradient (dgrad)
and the weight gradient (wgrad) (``aten.convolution_backward`` with the output mask ``[1,0,0]`` / ``[0,1,0]``):
one untimed first call (its wall time, ``first_call_ms``, includes cuDNN's algorithm search when benchmarking),
``--warmup`` untimed calls, then ``--repeat`` calls through the product's clock (``measure.timing.time_steps``:
CUDA events), median and p10/p90 in ms, for each setting of a small grid:

* ``dtype``: bf16 (``--dtypes bf16,fp32``; fp32 runs with TF32 on, ``torch.backends.cudnn.allow_tf32``);
* ``memory_format``: channels-last (``channels_last``/``channels_last_3d`` on input, weight and incoming gradient)
  or contiguous; 1-D convolutions have no channels-last layout (their row says so, ``unsupported``);
* cuDNN's algorithm choice: ``torch.backends.cudnn.benchmark`` off with cuDNN's instant heuristics (PyTorch's
  default) or heuristics mode B (``TORCH_CUDNN_USE_HEURISTIC_MODE_B=1``, read once per process), or on with
  ``torch.backends.cudnn.benchmark_limit`` 10 (PyTorch's default) or 0 (every engine tried).

Skinny shapes (fewer than 8 input or output channels, one group: Study A's stem 3 -> 64 and output convolution
64 -> 1, SR3's stem 2 -> 128 and output 128 -> 3) are timed a second and third time, padded as
``accelbench.models.padded_conv`` pads them in the network (``skinny_conv``): ``pad_cout8``/``pad_cout16`` (zero filters
to 8/16 output channels; the forward's output sliced back to the real channels and copied to the layout, the incoming
gradient zero-padded for dgrad and wgrad, wgrad's weight gradient sliced back), ``pad_cin8`` (zero input channels and
weights to 8; the forward includes the input's padding copy, as the stem's input is made per step, dgrad the slice of
the input gradient). Their rows name the padding at the end of ``setting`` (``bf16/channels_last/heuristic/pad_cout8``)
and count the real convolution's FLOPs, so TFLOP/s compare with the unpadded row's. ``--only-skinny`` times only these
shapes.

Accumulation precision: PyTorch has no switch for a bf16 convolution's accumulator. ATen's cuDNN path
(``aten/src/ATen/native/cudnn/Conv_v8.cpp``, ``getConvDescriptor``) sets the compute type to fp32 for bf16 and fp16
inputs unconditionally and drops engines with the numerical note ``DOWN_CONVERT_INPUTS``;
``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction`` is a cuBLAS (matmul) switch and does not reach
a convolution. The real precision switch is fp32's TF32 (``torch.backends.cudnn.allow_tf32``, or
``torch.backends.cudnn.conv.fp32_precision = "tf32"``), recorded per row (``accumulate`` says what each row ran).

Each setting runs in its own process: cuDNN's plan cache (keyed by shape, dtype, layout, TF32 and determinism, not
by ``benchmark`` or ``benchmark_limit``) would otherwise hand one setting the plan another setting chose.

FLOPs of one call: ``2 x output elements x (C_in / groups) x kernel volume`` (forward; the same count for dgrad and
wgrad); TFLOP/s = FLOPs / median time. A shape's share of the network's convolution FLOPs per step: forward +
wgrad + dgrad (dgrad only where the module's input needs a gradient: the first convolution's input is the data),
times its calls per forward. The peak is the device's dense datasheet peak of the row's math mode (bf16; TF32 for
fp32 rows) from the system file whose ``match`` names the device (``config/systems/*.yaml``); unknown leaves
``peak_tflops`` and ``fraction_of_peak`` empty. A row that runs out of memory or that the device cannot run is
recorded ``OOM``/``unsupported``/``error`` with its reason, never dropped.

Output: one CSV (``--csv``, default ``results/benchmarks/conv_shapes.csv``, rewritten) with one row per
(network, shape, setting, op), the device, torch, cuDNN and CUDA versions and the UTC time; on stdout, per network
and setting, the convolution ms of one forward + backward and its FLOP-weighted fraction of peak (total FLOPs /
total time), and which setting wins per shape ("keep what wins"). A benchmark writes numbers; it asserts nothing.

Usage (on the GPU node; ``--limit N`` times only the first N distinct shapes of each network)::

    python benchmarks/conv_shapes.py --device cuda --csv results/benchmarks/conv_shapes.csv
    # within a 10-minute window: one network per call, the CSV rewritten after every setting
    python benchmarks/conv_shapes.py --networks study_a --csv results/benchmarks/conv_shapes_study_a.csv
    python benchmarks/conv_shapes.py --networks sr3 --layouts channels_last --cudnn heuristic,benchmark_limit10
    python benchmarks/conv_shapes.py --networks study_a --only-skinny --csv results/benchmarks/conv_shapes_skinny.csv
    python benchmarks/conv_shapes.py --device cpu --scale small --limit 2 --repeat 3   # smoke run on a CPU
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NETWORKS = ("study_a", "sr3")
OPS = ("fwd", "dgrad", "wgrad")
DTYPES = ("bf16", "fp32")
LAYOUTS = ("channels_last", "contiguous")
# cuDNN's algorithm choice: (name, torch.backends.cudnn.benchmark, benchmark_limit, heuristics mode B)
CUDNN_CHOICES = (
    ("heuristic", False, None, False),
    ("heuristic_mode_b", False, None, True),
    ("benchmark_limit10", True, 10, False),
    ("benchmark_all", True, 0, False),
)
# the paddings of a skinny shape (benchmarks only those of its sides with fewer than 8 channels): name -> (input
# channels padded to, output channels padded to)
PADS = {"pad_cout8": (None, 8), "pad_cout16": (None, 16), "pad_cin8": (8, None)}
PEAK_PRECISION = {"bf16": "bf16", "fp32": "tf32"}  # the math mode each dtype's rows run (fp32: TF32 on)
ACCUMULATE = {
    "bf16": "fp32 (fixed by ATen's cuDNN descriptor; no switch)",
    "fp32": "fp32 with TF32 inputs (torch.backends.cudnn.allow_tf32=True)",
}
COLUMNS = (
    "network",
    "shape_key",
    "conv_dims",
    "input_shape",
    "weight_shape",
    "stride",
    "padding",
    "dilation",
    "groups",
    "calls_per_forward",
    "modules",
    "input_needs_grad",
    "gflop_per_call",
    "flop_share",
    "setting",
    "dtype",
    "memory_format",
    "cudnn_benchmark",
    "cudnn_benchmark_limit",
    "cudnn_heuristic_mode_b",
    "allow_tf32",
    "accumulate",
    "op",
    "status",
    "reason",
    "first_call_ms",
    "ms_median",
    "ms_p10",
    "ms_p90",
    "warmup",
    "repeat",
    "timing_method",
    "tflop_per_s",
    "peak_precision",
    "peak_tflops",
    "fraction_of_peak",
    "device",
    "torch",
    "cudnn",
    "cuda",
    "utc",
)


# --------------------------------------------------------------------------- shapes (meta device)
def conv_flops(input_shape, weight_shape, stride, padding, dilation, groups: int) -> int:
    """FLOPs of one convolution call: ``2 x output elements x (C_in / groups) x kernel volume`` (2 per multiply-add;
    the same count for its dgrad and wgrad). Shapes ``(N, C_in, *spatial)`` and ``(C_out, C_in / groups,
    *kernel)``; output size per axis ``floor((L + 2 p - d (k - 1) - 1) / s) + 1``."""
    n, kernel = input_shape[0], weight_shape[2:]
    out = [
        (size + 2 * p - d * (k - 1) - 1) // s + 1
        for size, k, s, p, d in zip(input_shape[2:], kernel, stride, padding, dilation)
    ]
    return 2 * n * weight_shape[0] * math.prod(out) * (input_shape[1] // groups) * math.prod(kernel)


def shape_key(call: dict) -> str:
    """A distinct convolution: ``conv3d_x1x64x128x128x128_w64x64x3x3x3_s1x1x1_p1x1x1_d1x1x1_g1``."""

    def j(v):
        return "x".join(str(int(i)) for i in v)

    return (
        f"conv{len(call['weight_shape']) - 2}d_x{j(call['input_shape'])}_w{j(call['weight_shape'])}"
        f"_s{j(call['stride'])}_p{j(call['padding'])}_d{j(call['dilation'])}_g{call['groups']}"
    )


def capture_convolutions(model, *inputs) -> list[dict]:
    """Every convolution one forward of ``model`` (on the meta device, autograd on) calls, in call order:
    ``{input_shape, weight_shape, stride, padding, dilation, groups, module, input_needs_grad}``.

    Forward pre-hooks on every ``nn.Conv1d/2d/3d`` (``torch.nn.modules.conv._ConvNd``) name the module and say
    whether its input needs a gradient; the ``aten.convolution`` calls seen by a ``TorchDispatchMode`` give the
    arguments (a call outside a conv module gets module ``(functional)``).

    Raises:
        ValueError: a transposed convolution (not timed by this tool) or a conv module whose forward made no
            ``aten.convolution`` call (a hook missed; the capture would undercount).
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[dict] = []
    current: list[tuple[str, bool]] = []
    module_calls = Counter()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.convolution.default:
                x, w, _b, stride, padding, dilation, transposed, _op, groups = args[:9]
                if transposed:
                    raise ValueError("capture_convolutions: transposed convolutions are not timed by this tool")
                name, needs = current[-1] if current else ("(functional)", True)
                calls.append(
                    {
                        "input_shape": tuple(x.shape),
                        "weight_shape": tuple(w.shape),
                        "stride": tuple(stride),
                        "padding": tuple(padding),
                        "dilation": tuple(dilation),
                        "groups": int(groups),
                        "module": name,
                        "input_needs_grad": needs,
                    }
                )
            return func(*args, **(kwargs or {}))

    def pre(name):
        def hook(mod, args):
            current.append((name, bool(args[0].requires_grad)))
            module_calls[name] += 1

        return hook

    def post(mod, args, out):
        current.pop()

    handles = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.modules.conv._ConvNd):
            handles.append(mod.register_forward_pre_hook(pre(name)))
            handles.append(mod.register_forward_hook(post))
    try:
        with torch.enable_grad(), Record():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    seen = Counter(c["module"] for c in calls)
    missed = sorted(n for n, k in module_calls.items() if seen[n] < k)
    if missed:
        raise ValueError(f"capture_convolutions: conv modules called without an aten.convolution: {missed[:5]}")
    return calls


def load_settings(config: Path) -> dict:
    """The product's configuration (``config/config.yaml`` with the schema's defaults). Raises SystemExit (one line)
    on a missing or invalid file."""
    from accelbench.core.config import load_config
    from accelbench.errors import ConfigError

    try:
        return load_config(config, REPO / "config" / "config.schema.yaml")
    except ConfigError as e:
        raise SystemExit(f"conv_shapes: --config {config}: {str(e).splitlines()[0]}") from None


def network_calls(network: str, cfg: dict, scale: str, study_a_model: str, study_a_conf: str, sr3_conf: str):
    """``(settings recorded, convolution calls of one forward)`` of ``network`` (``study_a`` or ``sr3``) at
    ``scale``, built by the product's own builders on the meta device."""
    import types

    import torch

    system = types.SimpleNamespace(scale=scale)  # from_spec reads only the scale of the system
    if network == "study_a":
        from accelbench.experiments.unet3d import network
        from accelbench.experiments.unet3d.settings import Settings

        spec = {**cfg["unet3d_profile"], "model": study_a_model, "configuration": study_a_conf, "run": {}}
        s = Settings.from_spec(spec, system)
        with torch.device("meta"):
            model = network.set_implementations(network.build_network(s.model), s.variant)
            x = torch.empty(s.model.tensor_shape)
            t = torch.zeros(s.model.batch_size, dtype=torch.long)
        about = {"model": study_a_model, "configuration": study_a_conf, "tensor_shape": list(s.model.tensor_shape)}
    else:
        from accelbench.experiments.sr3 import network as sr3_network
        from accelbench.experiments.sr3.job import Settings

        spec = {**cfg["sr3_scaling"], "devices": 1, "configuration": sr3_conf, "run": {}}
        s = Settings.from_spec(spec, system).sr3
        with torch.device("meta"):
            model = sr3_network.build_unet(s)
            # the network's input: the upsampled low-resolution image beside the noisy image (sr3.model.Trainer)
            x = torch.empty(s.batch_size, 2, s.hr_size, s.hr_size)
            t = torch.zeros(s.batch_size, dtype=torch.long)
        about = {"configuration": sr3_conf, "tensor_shape": [s.batch_size, 2, s.hr_size, s.hr_size]}
    model.train()
    return about, capture_convolutions(model, x, t)


def distinct_shapes(network: str, calls: list[dict]) -> list[dict]:
    """The distinct shapes of ``calls`` in first-call order, with their call count, modules, FLOPs per call and
    share of the network's convolution FLOPs per training step (forward + wgrad + dgrad where needed)."""
    by_key: dict[str, dict] = {}
    for c in calls:
        key = shape_key(c)
        d = by_key.setdefault(key, {**c, "network": network, "shape_key": key, "calls": 0, "modules": []})
        d["calls"] += 1
        d["input_needs_grad"] = d["input_needs_grad"] or c["input_needs_grad"]
        d["modules"].append(c["module"])
    shapes = list(by_key.values())
    for d in shapes:
        d["flop"] = conv_flops(
            d["input_shape"], d["weight_shape"], d["stride"], d["padding"], d["dilation"], d["groups"]
        )
        d["step_flop"] = d["calls"] * d["flop"] * (3 if d["input_needs_grad"] else 2)
    total = sum(d["step_flop"] for d in shapes)
    for d in shapes:
        d["flop_share"] = d["step_flop"] / total if total else 0.0
    return shapes


def shape_pads(shape: dict) -> list[str]:
    """The paddings of :data:`PADS` that apply to ``shape`` (skinny as the network's option decides it,
    ``accelbench.models.padded_conv.is_skinny``: one group; ``pad_cout*`` where its output has fewer than ``SKINNY``
    channels, ``pad_cin8`` where its input has): [] for a shape that is not skinny."""
    from accelbench.models.padded_conv import SKINNY, is_skinny

    cout, cin = shape["weight_shape"][:2]
    if not is_skinny(cin, cout, shape["groups"]):
        return []
    return [
        name
        for name, (cin_to, cout_to) in PADS.items()
        if (cout_to and cout < SKINNY and cout < cout_to) or (cin_to and cin < SKINNY and cin < cin_to)
    ]


# --------------------------------------------------------------------------- settings and the timing worker
def settings_grid(dtypes: list[str], device: str, layouts=LAYOUTS, cudnn=None) -> list[dict]:
    """The settings to time: dtype x memory format (``layouts``) x cuDNN's algorithm choice (CUDA; ``cudnn``: the
    names of :data:`CUDNN_CHOICES` to keep, None: all); on a CPU, dtype x memory format only (cuDNN's switches act
    on CUDA alone; their columns stay empty)."""
    out = []
    for dtype in dtypes:
        for layout in layouts:
            choices = [c for c in CUDNN_CHOICES if cudnn is None or c[0] in cudnn]
            choices = choices if device == "cuda" else ((None, None, None, None),)
            for name, bench, limit, mode_b in choices:
                out.append(
                    {
                        "setting": "/".join(p for p in (dtype, layout, name) if p),
                        "dtype": dtype,
                        "memory_format": layout,
                        "cudnn_benchmark": bench,
                        "cudnn_benchmark_limit": limit,
                        "cudnn_heuristic_mode_b": mode_b,
                        "allow_tf32": (dtype == "fp32") if device == "cuda" else None,
                    }
                )
    return out


def _layout(t, layout: str):
    import torch

    if layout == "contiguous":
        return t.contiguous()
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}[t.dim()]
    return t.contiguous(memory_format=fmt)


def conv_steps(x, w, gy, args, layout: str, pad: str | None = None) -> dict:
    """The timed calls of one shape, op -> a callable returning the op's result: ``fwd`` the output (N, C_out, ...),
    ``dgrad`` the input gradient (N, C_in, ...), ``wgrad`` the weight gradient (C_out, C_in, ...); ``x``, ``w``,
    ``gy`` the real (unpadded) input, weight and output gradient, ``args`` ``aten.convolution``'s arguments after the
    bias. With ``pad`` (a name of :data:`PADS`) each call does what the padded network does (see the module
    docstring): the padding copies, the convolution on the padded tensors, the slice back to the real channels copied
    to ``layout``. The padded input and weight the forward saves for the backward are made once, outside dgrad/wgrad."""
    import torch
    import torch.nn.functional as F

    conv, back = torch.ops.aten.convolution, torch.ops.aten.convolution_backward
    if pad is None:
        return {
            "fwd": lambda: conv(x, w, None, *args),
            "dgrad": lambda: back(gy, x, w, None, *args, [True, False, False])[0],
            "wgrad": lambda: back(gy, x, w, None, *args, [False, True, False])[1],
        }
    cin_to, cout_to = PADS[pad]
    cout, cin = w.shape[:2]
    keep = (0, 0) * (w.dim() - 2)
    pin, pout = max((cin_to or 0) - cin, 0), max((cout_to or 0) - cout, 0)

    def pad_in(t):  # input channels (dim 1) of x and w
        return F.pad(t, (*keep, 0, pin)) if pin else t

    def pad_w(t):
        return F.pad(pad_in(t), (*keep, 0, 0, 0, pout)) if pout else pad_in(t)

    def pad_gy():
        return F.pad(gy, (*keep, 0, pout)) if pout else gy

    xp, wp = pad_in(x), pad_w(w)
    return {
        "fwd": lambda: _layout(conv(pad_in(x), pad_w(w), None, *args)[:, :cout], layout),
        "dgrad": lambda: _layout(back(pad_gy(), xp, wp, None, *args, [True, False, False])[0][:, :cin], layout),
        "wgrad": lambda: _layout(back(pad_gy(), xp, wp, None, *args, [False, True, False])[1][:cout, :cin], layout),
    }


def time_shape(shape: dict, setting: dict, device, warmup: int, repeat: int, pad: str | None = None) -> list[dict]:
    """Rows (one per op) of one shape under the current process's setting: status, ms median/p10/p90, first call;
    ``pad``: timed padded (a name of :data:`PADS`, recorded in each row's ``pad``)."""
    import torch

    from accelbench.measure.timing import time_steps

    base = {"status": "ok", "reason": "", "pad": pad or ""}
    if setting["memory_format"] == "channels_last" and len(shape["weight_shape"]) not in (4, 5):
        why = f"no channels-last layout for {len(shape['weight_shape']) - 2}-D convolutions"
        return [{"op": op, **base, "status": "unsupported", "reason": why} for op in OPS]
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[setting["dtype"]]
    dev = device.torch_device
    args = (shape["stride"], shape["padding"], shape["dilation"], False, [0] * len(shape["stride"]), shape["groups"])
    rows = []
    try:
        x = _layout(torch.randn(shape["input_shape"], device=dev, dtype=dtype), setting["memory_format"])
        w = _layout(torch.randn(shape["weight_shape"], device=dev, dtype=dtype), setting["memory_format"])
        y = torch.ops.aten.convolution(x, w, None, *args)
        gy = _layout(torch.randn_like(y), setting["memory_format"])
        del y
        steps = conv_steps(x, w, gy, args, setting["memory_format"], pad)
    except torch.OutOfMemoryError as e:
        return [{"op": op, **base, "status": "OOM", "reason": str(e).splitlines()[0]} for op in OPS]
    for op, step in steps.items():
        row = {"op": op, **base}
        try:
            t0 = time.perf_counter()
            step()
            device.synchronize()
            row["first_call_ms"] = (time.perf_counter() - t0) * 1e3
            desc = f"{shape['shape_key']}{'/' + pad if pad else ''} {op}"
            t = time_steps(step, device, warmup, repeat, desc=desc, energy=False)
            row.update(ms_median=t.median, ms_p10=t.p10, ms_p90=t.p90, timing_method=t.method)
        except torch.OutOfMemoryError as e:
            row.update(status="OOM", reason=str(e).splitlines()[0])
        except (RuntimeError, NotImplementedError) as e:
            row.update(status="unsupported", reason=(str(e).strip().splitlines() or [type(e).__name__])[0][:300])
        rows.append(row)
        if device.backend == "cuda":
            torch.cuda.empty_cache()
    return rows


def worker(plan_path: str, out_path: str) -> None:
    """One setting in this process (cuDNN's plan cache fresh): time every shape of the plan and append one JSON
    line per row to ``out_path`` as it goes (a crash keeps the rows before it)."""
    import torch

    from accelbench.backends.device import Device

    plan = json.loads(Path(plan_path).read_text())
    setting, device = plan["setting"], Device(plan["device"])
    if device.backend == "cuda":
        torch.backends.cudnn.benchmark = bool(setting["cudnn_benchmark"])
        if setting["cudnn_benchmark_limit"] is not None:
            torch.backends.cudnn.benchmark_limit = int(setting["cudnn_benchmark_limit"])
        torch.backends.cudnn.allow_tf32 = bool(setting["allow_tf32"])
    env = {
        "device": torch.cuda.get_device_name() if device.backend == "cuda" else "cpu",
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else "",
        "cuda": torch.version.cuda or "",
    }
    with open(out_path, "a") as out:
        for shape in plan["shapes"]:
            for pad in (None, *shape.get("pads", ())):
                for row in time_shape(shape, setting, device, plan["warmup"], plan["repeat"], pad):
                    out.write(json.dumps({"network": shape["network"], "shape_key": shape["shape_key"], **row, **env}))
                    out.write("\n")
                    out.flush()


def run_setting(setting: dict, shapes: list[dict], args) -> list[dict]:
    """The rows of one setting, timed in a fresh process; rows it did not write (a crash) are ``error`` rows."""
    env = dict(os.environ)
    env.pop("TORCH_CUDNN_USE_HEURISTIC_MODE_B", None)
    if setting["cudnn_heuristic_mode_b"]:
        env["TORCH_CUDNN_USE_HEURISTIC_MODE_B"] = "1"
    with tempfile.TemporaryDirectory(prefix="conv_shapes_") as tmp:
        plan, out = Path(tmp) / "plan.json", Path(tmp) / "rows.jsonl"
        shapes_in = [{k: v for k, v in s.items() if k != "modules"} for s in shapes]
        plan.write_text(
            json.dumps(
                {
                    "setting": setting,
                    "device": args.device,
                    "warmup": args.warmup,
                    "repeat": args.repeat,
                    "shapes": shapes_in,
                }
            )
        )
        out.touch()
        try:
            done = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--worker", str(plan), str(out)],
                env=env,
                capture_output=True,
                text=True,
                timeout=args.setting_timeout,
            )
            returncode, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired:  # run() killed the worker; the rows it wrote are kept
            returncode = "timeout"
            stderr = f"killed after --setting-timeout {args.setting_timeout} s"
        rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    got = {(r["network"], r["shape_key"], r.get("pad", ""), r["op"]) for r in rows}
    if returncode != 0:
        tail = (stderr.strip().splitlines() or ["no message"])[-1][:300]
        for s in shapes:
            for pad in ("", *s.get("pads", ())):
                for op in OPS:
                    if (s["network"], s["shape_key"], pad, op) not in got:
                        rows.append(
                            {
                                "network": s["network"],
                                "shape_key": s["shape_key"],
                                "pad": pad,
                                "op": op,
                                "status": "error",
                                "reason": f"worker exited rc {returncode}: {tail}",
                            }
                        )
    return rows


# --------------------------------------------------------------------------- rows, CSV and the summary
def device_peaks(device_name: str, backend: str) -> dict:
    """Dense datasheet peaks (TFLOP/s by math mode) of the system file whose ``match`` names the device; {} if none."""
    from accelbench.core.systems import load_systems, match_system

    system = match_system(
        device_name, backend, load_systems(REPO / "config" / "systems", REPO / "config" / "system.schema.yaml")
    )
    return dict(system.peak_tflops) if system else {}


def full_rows(shapes: list[dict], setting: dict, timed: list[dict], args, utc: str, peaks_of) -> list[dict]:
    """The CSV rows of one setting: each shape's columns joined with its timed rows and TFLOP/s (a padded variant's
    rows: the setting's name ``/`` the padding, the real convolution's FLOPs)."""
    by = {(r["network"], r["shape_key"], r.get("pad", ""), r["op"]): r for r in timed}
    out = []
    for s, pad, op in ((d, pad, op) for d in shapes for pad in ("", *d.get("pads", ())) for op in OPS):
        r = by.get((s["network"], s["shape_key"], pad, op), {"status": "error", "reason": "no row from the worker"})
        peaks = peaks_of(r.get("device", ""))
        precision = PEAK_PRECISION[setting["dtype"]] if args.device == "cuda" else setting["dtype"]
        peak = peaks.get(precision)
        tflops = s["flop"] / (r["ms_median"] * 1e-3) / 1e12 if r.get("ms_median") else None
        out.append(
            {
                "network": s["network"],
                "shape_key": s["shape_key"],
                "conv_dims": len(s["weight_shape"]) - 2,
                "input_shape": "x".join(map(str, s["input_shape"])),
                "weight_shape": "x".join(map(str, s["weight_shape"])),
                "stride": "x".join(map(str, s["stride"])),
                "padding": "x".join(map(str, s["padding"])),
                "dilation": "x".join(map(str, s["dilation"])),
                "groups": s["groups"],
                "calls_per_forward": s["calls"],
                "modules": ";".join(dict.fromkeys(s["modules"])),
                "input_needs_grad": s["input_needs_grad"],
                "gflop_per_call": s["flop"] / 1e9,
                "flop_share": s["flop_share"],
                "setting": setting["setting"] + (f"/{pad}" if pad else ""),
                **{k: setting[k] for k in ("dtype", "memory_format")},
                **{k: setting[k] for k in ("cudnn_benchmark", "cudnn_benchmark_limit", "cudnn_heuristic_mode_b")},
                "allow_tf32": setting["allow_tf32"],
                "accumulate": ACCUMULATE[setting["dtype"]] if args.device == "cuda" else "",
                "op": op,
                "status": r["status"],
                "reason": r.get("reason", ""),
                "first_call_ms": r.get("first_call_ms"),
                "ms_median": r.get("ms_median"),
                "ms_p10": r.get("ms_p10"),
                "ms_p90": r.get("ms_p90"),
                "warmup": args.warmup,
                "repeat": args.repeat,
                "timing_method": r.get("timing_method", ""),
                "tflop_per_s": tflops,
                "peak_precision": precision if peak else "",
                "peak_tflops": peak,
                "fraction_of_peak": tflops / peak if tflops and peak else None,
                **{k: r.get(k, "") for k in ("device", "torch", "cudnn", "cuda")},
                "utc": utc,
            }
        )
    return out


def write_csv(rows: list[dict], path: Path) -> None:
    """All rows to ``path`` (a temporary file in its folder, then renamed over it: a link there is replaced, never
    followed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r[k] for k in COLUMNS})
    os.replace(tmp, path)


def summary(rows: list[dict], shapes: list[dict]) -> list[str]:
    """Per network: each setting's convolution ms of one forward + backward (calls x (fwd + wgrad + dgrad where
    needed)) and FLOP-weighted fraction of peak (total FLOPs / total time / peak); a padded variant (``.../pad_*``,
    skinny shapes only): its ms against the same setting unpadded on those shapes; then the setting that wins each
    shape (least fwd + bwd time, padded variants included) and the time if each shape kept its winner."""
    info = {(s["network"], s["shape_key"]): s for s in shapes}
    ms = defaultdict(dict)  # (network, shape) -> setting -> ms of one step's calls, or None if a row is not ok
    peak_of = {}
    for r in rows:
        s = info[(r["network"], r["shape_key"])]
        if r["op"] == "dgrad" and not s["input_needs_grad"]:
            continue
        key, setting = (r["network"], r["shape_key"]), r["setting"]
        prev = ms[key].get(setting, 0.0)
        ok = r["status"] == "ok" and prev is not None
        ms[key][setting] = prev + s["calls"] * r["ms_median"] if ok else None
        peak_of[setting] = r["peak_tflops"]
    lines = []
    for network in NETWORKS:
        keys = [k for k in ms if k[0] == network]
        if not keys:
            continue
        step_flop = sum(info[k]["step_flop"] for k in keys)
        settings = list(dict.fromkeys(st for k in keys for st in ms[k]))
        lines.append(f"{network}: {len(keys)} shapes timed, {step_flop / 1e12:.3f} TFLOP of convolutions per step")
        for st in settings:
            if "/pad_" in st:
                base = st.rsplit("/", 1)[0]
                mine = [k for k in keys if st in ms[k]]
                pairs = [(ms[k][st], ms[k].get(base)) for k in mine]
                if any(a is None or b is None for a, b in pairs):
                    lines.append(f"  {st:45s} incomplete: a row not ok on its {len(mine)} skinny shape(s)")
                else:
                    padded, plain = sum(a for a, _ in pairs), sum(b for _, b in pairs)
                    lines.append(
                        f"  {st:45s} {padded:10.3f} ms on its {len(mine)} skinny shape(s), {plain:.3f} ms unpadded"
                    )
                continue
            vals = [ms[k].get(st) for k in keys]
            if any(v is None for v in vals):
                bad = sum(v is None for v in vals)
                lines.append(f"  {st:45s} incomplete: {bad} shape(s) with a row not ok")
                continue
            total = sum(vals)
            tflops = step_flop / (total * 1e-3) / 1e12
            frac = f", {tflops / peak_of[st]:.3f} of peak" if peak_of.get(st) else ""
            lines.append(f"  {st:45s} {total:10.3f} ms per forward+backward, {tflops:8.1f} TFLOP/s{frac}")
        wins, best_total = Counter(), 0.0
        for k in keys:
            ok = {st: v for st, v in ms[k].items() if v is not None}
            if ok:
                st = min(ok, key=ok.get)
                wins[st] += 1
                best_total += ok[st]
        lines.append(f"  keep what wins: each shape with its fastest setting: {best_total:.3f} ms per forward+backward")
        for st, n in wins.most_common():
            lines.append(f"    {st:43s} wins {n} shape(s)")
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=__doc__.split("Usage", 1)[1].split("::", 1)[1]
    )
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="where to time; default %(default)s")
    p.add_argument("--dtypes", default="bf16", help="comma-separated of bf16,fp32 (fp32: TF32 on); default %(default)s")
    p.add_argument("--networks", default=",".join(NETWORKS), help="comma-separated of study_a,sr3; default all")
    p.add_argument(
        "--layouts", default=",".join(LAYOUTS), help="comma-separated of channels_last,contiguous; default all"
    )
    p.add_argument(
        "--cudnn",
        default=",".join(c[0] for c in CUDNN_CHOICES),
        help="comma-separated cuDNN algorithm choices (CUDA); default all: %(default)s",
    )
    p.add_argument(
        "--setting-timeout", type=float, default=420, help="seconds one setting's process may run; default %(default)s"
    )
    p.add_argument("--scale", choices=("paper", "small"), default="paper", help="the config's scale; default paper")
    p.add_argument("--limit", type=int, default=None, help="time only the first N distinct shapes of each network")
    p.add_argument(
        "--only-skinny",
        action="store_true",
        help="time only the skinny shapes (accelbench.models.padded_conv.is_skinny: fewer than 8 input or output "
        "channels), unpadded and padded",
    )
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per op after the first; default 3")
    p.add_argument("--repeat", type=int, default=20, help="timed calls per op (median, p10, p90); default 20")
    p.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml", help="the product's config file")
    p.add_argument("--study-a-model", default="whole_head", help="unet3d_profile preset; default %(default)s")
    p.add_argument(
        "--study-a-configuration",
        default="bf16_channels_last_3d_ndhwc_compile_cudagraphs_autotuned",
        help="Study A configuration whose module implementations the network gets (Med-DDPM's own: baseline); "
        "default %(default)s",
    )
    p.add_argument("--sr3-configuration", default="faithful", help="SR3 configuration; default %(default)s")
    p.add_argument(
        "--csv", type=Path, default=Path("results/benchmarks/conv_shapes.csv"), help="rewritten; default %(default)s"
    )
    p.add_argument("--worker", nargs=2, metavar=("PLAN", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(*args.worker)
    dtypes = [d for d in args.dtypes.split(",") if d]
    networks = [n for n in args.networks.split(",") if n]
    layouts = [n for n in args.layouts.split(",") if n]
    cudnn = [n for n in args.cudnn.split(",") if n]
    for what, given, allowed in (
        ("--dtypes", dtypes, DTYPES),
        ("--networks", networks, NETWORKS),
        ("--layouts", layouts, LAYOUTS),
        ("--cudnn", cudnn, [c[0] for c in CUDNN_CHOICES]),
    ):
        bad = [g for g in given if g not in allowed] or ([] if given else ["(empty)"])
        if bad:
            p.error(f"{what}: {', '.join(bad)} not one of {', '.join(allowed)}")
    for what, v, least in (
        ("--limit", args.limit, 1),
        ("--repeat", args.repeat, 1),
        ("--warmup", args.warmup, 0),
        ("--setting-timeout", args.setting_timeout, 0.01),
    ):
        if v is not None and v < least:
            p.error(f"{what} must be at least {least}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"conv_shapes: --device cuda: torch {torch.__version__} sees no CUDA device")

    cfg = load_settings(args.config)
    shapes, sizes = [], {}
    for network in networks:
        try:
            about, calls = network_calls(
                network, cfg, args.scale, args.study_a_model, args.study_a_configuration, args.sr3_configuration
            )
        except KeyError as e:
            raise SystemExit(f"conv_shapes: {network}: unknown name {e} (model or configuration)") from None
        distinct = distinct_shapes(network, calls)
        for d in distinct:
            d["pads"] = shape_pads(d)
        if args.only_skinny:
            distinct = [d for d in distinct if d["pads"]]
        sizes[network] = (len(calls), len(distinct))
        print(f"{network}: {about}: {len(calls)} convolution calls per forward, {len(distinct)} distinct shapes")
        shapes += distinct[: args.limit] if args.limit else distinct
    utc = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    peaks = {}

    def peaks_of(name):
        if name not in peaks:
            peaks[name] = device_peaks(name, args.device) if name else {}
        return peaks[name]

    rows = []
    for setting in settings_grid(dtypes, args.device, layouts, cudnn):
        t0 = time.perf_counter()
        timed = run_setting(setting, shapes, args)
        rows += full_rows(shapes, setting, timed, args, utc, peaks_of)
        write_csv(rows, args.csv)  # after every setting: a run stopped from outside keeps what it measured
        print(f"  {setting['setting']}: {len(shapes)} shapes in {time.perf_counter() - t0:.1f} s", flush=True)
    for line in summary(rows, shapes):
        print(line)
    print(f"{len(rows)} rows -> {args.csv}")


if __name__ == "__main__":
    main()
