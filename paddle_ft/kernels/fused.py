"""Fused CPU kernels for training (`train.runtime.fused_kernels`): the encoder layers' residual steps
(`layer_norm(dropout(x) + residual)`), exact GELU (with the FFN's bias added inside), attention's core (scores,
`softmax(scores + mask)`, its dropout and the context, per text and head, on the projections' own layout), dropout,
forward and backward, the linears' biases, clipping by the global norm and AdamW's update, in C++
(`fused_kernels.cc`).

Why: on CPU, Paddle's kernels for these are slow for their size (the profile of a training step in
docs/performance.md: dropout 14-18%, layer-norm backward 10%, GELU 5.6%, the residual and mask adds 3.9%, softmax
2%; later attention's transposes and batched matmuls, 11-12 ms a layer at e5-small's shape), where one vectorised
loop each costs a third to a half as much. The kernels are built once, on first use, through Paddle's
custom-operator support (`paddle.utils.cpp_extension`), into a cache keyed by their source, Paddle's version and
this CPU; where no C++ compiler is present, or the build fails, training says so in one line and runs Paddle's own
kernels, the reference tests/kernels/test_fused.py holds the fused ones to (forward and gradients, 1e-5). Dropout
draws from Paddle's own generator exactly as Paddle's dropout does, in the same order, in its kernel and in the
attention kernel alike: a run draws the same masks with or without the fused kernels, and its pinned loss does not
move.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import types
import warnings
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn
from paddle.profiler import RecordEvent, TracerEventType
from paddle.profiler.utils import in_profiler_mode

from paddle_ft.io import open_own_file, user_cache_folder
from paddle_ft.kernels.cpu_linear import bf16_matmul
from paddle_ft.kernels.mkl_vendor import \
    CACHE_VARIABLE  # where built kernels are kept (default ~/.cache/paddle_ft/kernels)
from paddle_ft.log import native_output_captured
from paddle_ft.models.packing import PACKS_TEXTS, packed_offsets
from paddle_ft.runtime import cpu_identity

SOURCE = Path(__file__).with_name("fused_kernels.cc")
# -fno-trapping-math: without it GCC keeps the clamps of erf/exp scalar (a select could trap), 10x slower
FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math"]
# Paddle's math runs on the Intel OpenMP library it ships; the kernels' loops join the same thread team when they
# are linked to it (fused_kernels.cc says why not GCC's own)
INTEL_OPENMP = Path(paddle.__file__).parent / "libs" / "libiomp5.so"
INTEL_MKL = INTEL_OPENMP.with_name("libmklml_intel.so")  # the sgemm the attention kernel calls
ONEDNN = INTEL_OPENMP.with_name("libdnnl.so.3")  # the bfloat16 GEMM of bf16 training (kernels/bf16.py)
BUILD_LOG = "build.log"
# the kernels loaded in this process, by cache key: Paddle registers a library's operators once per process, and a
# second load() of the same library returns a module without them
_LOADED: dict[str, object] = {}


@functools.cache
def kernels() -> tuple[object | None, str | None]:
    """(the built kernels' module, None), or (None, why not): built on the first call of a process, into a cache
    that later processes load from."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return None, f"no C++ compiler ({compiler}) on PATH"
    compile_flags, link_flags = build_flags()
    key = hashlib.sha256("\n".join([SOURCE.read_text(encoding="utf-8"), paddle.__version__, *compile_flags,
                                    *link_flags, cpu_identity()]).encode()).hexdigest()[:16]
    if key in _LOADED:
        return _LOADED[key], None
    cache = user_cache_folder(CACHE_VARIABLE, "kernels")
    if cache is None:  # no home directory (a container's user without one): nowhere to keep a build
        return None, f"no home directory to keep the built kernels in; set {CACHE_VARIABLE} to a writable folder"
    folder = cache / key
    try:
        module = _build(folder, key, compile_flags, link_flags)
    except Exception as exc:  # a compiler error, missing headers, a read-only cache: Paddle's kernels instead
        reason = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else type(exc).__name__
        log = folder / BUILD_LOG
        where = f"; the compiler's output is in {log}" if log.is_file() else \
            f" (set {CACHE_VARIABLE} to a writable folder if {folder.parent} is not one)"
        return None, f"the build failed ({reason}){where}"
    _LOADED[key] = _RecordedOperators(module)
    return _LOADED[key], None


class _RecordedOperators:
    """The built module whose operators, called under paddle.profiler, each leave a span named after the operator.
    The profiler records a custom operator's backward as an operator but not its forward, so a trace showed the
    kernels' forwards (~12% of a step at e5-small's shape) as time outside every operator. Outside the profiler a
    call costs one check more."""

    def __init__(self, module: types.ModuleType):
        self._module = module

    def __getattr__(self, name: str):
        operator = getattr(self._module, name)
        if not name.startswith("paddle_ft_"):  # the module's own attributes (its __file__)
            return operator

        def call(*args):
            if not in_profiler_mode():
                return operator(*args)
            with RecordEvent(name, event_type=TracerEventType.PythonOp):
                return operator(*args)

        setattr(self, name, call)  # looked up once
        return call


def build_flags() -> tuple[list[str], list[str]]:
    """The compiler's and the linker's flags: OpenMP on Paddle's own Intel OpenMP library where Paddle ships one
    (GCC's OpenMP code calls GOMP_* entry points, which libiomp5 provides; no -fopenmp when linking, so that GCC's
    libgomp is not linked in), the loops on the calling thread otherwise; the attention kernel where Paddle ships
    MKL's sgemm (its matmuls' own), none otherwise (attention then runs Paddle's ops)."""
    compile_flags, libraries = list(FLAGS), []
    if INTEL_OPENMP.is_file():
        compile_flags.append("-fopenmp")
        libraries.append("-liomp5")
    if INTEL_MKL.is_file():
        compile_flags.append("-DPADDLE_FT_MKL")
        libraries.append("-lmklml_intel")
    if ONEDNN.is_file():
        compile_flags.append("-DPADDLE_FT_DNNL")
        libraries.append(f"-l:{ONEDNN.name}")
    if not libraries:
        return compile_flags, []
    return compile_flags, [f"-L{INTEL_OPENMP.parent}", *libraries, f"-Wl,-rpath,{INTEL_OPENMP.parent}"]


def _build(folder: Path, key: str, compile_flags: list[str], link_flags: list[str]):
    """The kernels built into `folder` (or loaded from it, built before), one process at a time; what the build
    printed goes to folder/build.log."""
    folder.mkdir(parents=True, exist_ok=True)
    with open_own_file(folder / ".lock", "r+") as lock, warnings.catch_warnings():
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (test workers, ranks of a launch)
        warnings.simplefilter("ignore")  # "No ccache found", on import
        from paddle.utils.cpp_extension import load

        def keep_log(text: str) -> str:
            with open_own_file(folder / BUILD_LOG) as out:
                out.write(text)
            return ""  # nothing echoed: a failure is reported in one line that names the log

        with native_output_captured(keep_log):
            module = load(name=f"paddle_ft_fused_{key}", sources=[str(SOURCE)], extra_cxx_cflags=compile_flags,
                          extra_ldflags=link_flags, build_directory=str(folder), verbose=False)
        # Paddle writes a Python stub beside the library for every process that loads it (NAME_THREADID.py) and
        # imports it; imported, it is not needed again, and kept it would pile up in the cache, one per run
        for stub in Path(module.__file__).parent.glob(f"paddle_ft_fused_{key}_*.py"):
            stub.unlink(missing_ok=True)
        return module


def add_layer_norm(x: paddle.Tensor, residual: paddle.Tensor, norm: nn.LayerNorm) -> paddle.Tensor:
    """`norm(x + residual)` in one kernel (forward and backward)."""
    module, _ = kernels()
    return module.paddle_ft_add_layer_norm(x, residual, norm.weight, norm.bias, float(norm._epsilon))[0]


def layer_norm(x: paddle.Tensor, norm: nn.LayerNorm) -> paddle.Tensor:
    """`norm(x)` in one kernel (forward and backward)."""
    module, _ = kernels()
    return module.paddle_ft_layer_norm(x, norm.weight, norm.bias, float(norm._epsilon))[0]


def gelu(x: paddle.Tensor) -> paddle.Tensor:
    """Exact (erf) GELU in one kernel (forward and backward)."""
    module, _ = kernels()
    return module.paddle_ft_gelu(x)


def bias_gelu(x: paddle.Tensor, bias: paddle.Tensor) -> paddle.Tensor:
    """Exact GELU of `x + bias` (bias over the last axis) in one kernel, which also sums the bias's gradient."""
    module, _ = kernels()
    return module.paddle_ft_bias_gelu(x, bias)


def _linear_gelu(linear: nn.Linear, x: paddle.Tensor) -> paddle.Tensor:
    """`gelu(linear(x))`, the FFN's first half: the linear's matmul (over x's rows, as FastLinear's), then its bias
    added and its gradient summed inside GELU's kernel, where the linear would add the bias in a pass of its own and
    sum its gradient in another over the [tokens, 4 x hidden] output (0.65 ms a layer forward and backward at
    e5-small's shape, ~0.9% of a step). Another kind of linear (a subclass) keeps its own forward."""
    if type(linear) is not nn.Linear or linear.bias is None:
        return gelu(linear(x))
    rows = x.reshape([-1, x.shape[-1]])
    in_bf16 = bf16_matmul(rows, linear)
    rows = paddle.matmul(rows, linear.weight) if in_bf16 is None else in_bf16
    return bias_gelu(rows, linear.bias).reshape(x.shape[:-1] + [linear.weight.shape[1]])


def _fusable_norm(norm: nn.LayerNorm) -> bool:
    """A norm over the last axis, with a weight and a bias: what the kernels compute."""
    return norm.weight is not None and norm.bias is not None and len(norm._normalized_shape) == 1


def _fusable(layer: nn.TransformerEncoderLayer) -> bool:
    """A post-norm layer (BERT, ERNIE, RoBERTa) whose norms the kernels can compute."""
    return not layer.normalize_before and _fusable_norm(layer.norm1) and _fusable_norm(layer.norm2)


def _training_on_cpu_fp32(layer: nn.Layer, x: paddle.Tensor) -> bool:
    """Where the kernels run: training in dygraph, float32 on CPU (not evaluation, export or AMP)."""
    return layer.training and paddle.in_dynamic_mode() and x.dtype == paddle.float32 and x.place.is_cpu_place()


def _forward(self: nn.TransformerEncoderLayer, src, src_mask=None, cache=None, output_attentions=False):
    """The encoder layer's forward as PaddleNLP replaces Paddle's (`_transformer_encoder_layer_fwd`: the same
    post-norm computation, with `output_attentions`), with the fused kernels while training in float32 on CPU;
    the class's own forward otherwise (evaluation, export, AMP, a cache, attention weights asked for)."""
    if not (_training_on_cpu_fp32(self, src) and cache is None and not output_attentions):
        if packed_offsets() is not None:  # Paddle's own forward would attend across the packed texts
            raise RuntimeError("a packed row reached an encoder layer outside the fused training kernels")
        return type(self).forward(self, src, src_mask, cache, output_attentions)
    from paddle.nn.layer.transformer import _convert_attention_mask

    self.self_attn.need_weights = False
    src_mask = _convert_attention_mask(src_mask, src.dtype)
    src = _dropout_add_layer_norm(self.dropout1, _self_attention(self.self_attn, src, src_mask), src, self.norm1)
    hidden = _linear_gelu(self.linear1, src) if self.activation is F.gelu else self.activation(self.linear1(src))
    return _dropout_add_layer_norm(self.dropout2, self.linear2(self.dropout(hidden)), src, self.norm2)


def _dropout_add_layer_norm(drop: nn.Dropout, x: paddle.Tensor, residual: paddle.Tensor, norm: nn.LayerNorm):
    """`norm(drop(x) + residual)`: in one kernel where `drop` is dropout as the kernels draw it (upscale in train,
    0 < p < 1), the same masks in the same order; the dropout, then add_layer_norm, otherwise."""
    if type(drop) is nn.Dropout and drop.mode == "upscale_in_train" and drop.axis is None \
            and _kernels_draw(drop.p, drop.training):
        module, _ = kernels()
        return module.paddle_ft_dropout_add_layer_norm(x, residual, norm.weight, norm.bias, float(norm._epsilon),
                                                       float(drop.p))[0]
    return add_layer_norm(drop(x), residual, norm)


def _self_attention(attention: nn.MultiHeadAttention, src: paddle.Tensor, mask: paddle.Tensor | None):
    """MultiHeadAttention.forward (Paddle 3.3's) for self-attention without a cache: its core in one kernel
    (`attention_core`) where the mask is a padding mask and the kernels have it, else `softmax(scores + mask)` fused
    and the same operations in the same order otherwise, its dropout included."""
    module, _ = kernels()
    offsets = packed_offsets()
    if offsets is not None:  # a padding-free row (models/packing.py): attention inside each of its texts
        tokens, width = src.shape[1], src.shape[2]
        q, k, v = (projection(src).reshape([tokens, width])
                   for projection in (attention.q_proj, attention.k_proj, attention.v_proj))
        context = module.paddle_ft_packed_attention(q, k, v, offsets, int(attention.num_heads),
                                                    float(attention.head_dim**-0.5),
                                                    float(attention.dropout if attention.training else 0.0))[0]
        return attention.out_proj(context.reshape([1, tokens, width]))
    if hasattr(module, "paddle_ft_attention") and _padding_mask(mask, src):
        context = attention_core(attention.q_proj(src), attention.k_proj(src), attention.v_proj(src), mask,
                                 attention.num_heads, attention.dropout if attention.training else 0.0)
        return attention.out_proj(context)
    q, k, v = attention._prepare_qkv(src, src, src, None)
    scores = paddle.matmul(x=q * (attention.head_dim**-0.5), y=k, transpose_y=True)
    weights = masked_softmax(scores, mask)
    if attention.dropout:
        weights = dropout(weights, attention.dropout, attention.training)
    out = paddle.matmul(weights, v).transpose(perm=[0, 2, 1, 3])
    return attention.out_proj(out.reshape(shape=[0, 0, out.shape[2] * out.shape[3]]))


def _padding_mask(mask: paddle.Tensor | None, src: paddle.Tensor) -> bool:
    """A mask the kernels take: additive, [batch, 1, 1, length], in src's dtype."""
    return mask is not None and list(mask.shape) == [src.shape[0], 1, 1, src.shape[1]] and mask.dtype == src.dtype


def attention_core(q: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor, mask: paddle.Tensor, heads: int,
                   p: float) -> paddle.Tensor:
    """Attention between the projections q, k and v ([batch, length, heads x head_dim]) under a padding mask:
    dropout(softmax(q k^T / sqrt(head_dim) + mask), p) v, heads side by side as q's are, in one kernel (forward and
    backward), dropout's masks drawn from Paddle's generator as Paddle's dropout draws them."""
    module, _ = kernels()
    head_dim = q.shape[-1] // heads
    return module.paddle_ft_attention(q, k, v, mask, int(heads), float(head_dim**-0.5), float(p))[0]


def masked_softmax(scores: paddle.Tensor, mask: paddle.Tensor | None) -> paddle.Tensor:
    """`softmax(scores + mask)` over the last axis, in one kernel where the mask is a padding mask ([batch, 1, 1,
    keys], the same for every head and query); Paddle's ops for other masks."""
    if mask is None or list(mask.shape) != [scores.shape[0], 1, 1, scores.shape[3]] or mask.dtype != scores.dtype:
        return F.softmax(scores if mask is None else scores + mask)
    module, _ = kernels()
    return module.paddle_ft_masked_softmax(scores, mask)


def dropout(x: paddle.Tensor, p: float, training: bool) -> paddle.Tensor:
    """`F.dropout(x, p, training, mode="upscale_in_train")` in one kernel that draws the masks from Paddle's CPU
    generator as Paddle's dropout would and leaves it where Paddle's dropout would: the same numbers, over ten times
    as fast (0.32 against 4.8 ms on a 32 x 62 x 256 tensor)."""
    if not (_kernels_draw(p, training) and x.dtype == paddle.float32 and x.place.is_cpu_place()):
        return F.dropout(x, p, training=training, mode="upscale_in_train")  # (the kernel takes p as a float32)
    module, _ = kernels()
    out, _ = module.paddle_ft_dropout(x, float(p))
    return out


def _kernels_draw(p: float, training: bool) -> bool:
    """Whether the kernels draw a dropout's masks: in training, 0 < p < 1 with p as the kernels take it, a float32."""
    return training and 0 < p and np.float32(p) < 1


def clip_grad_norm(grads: list[paddle.Tensor], max_norm: float,
                   in_place: bool = True) -> tuple[paddle.Tensor, float] | None:
    """`engine.amp.clip_grad_norm` over float32 CPU gradients in one kernel: (the global norm before clipping, the
    factor clipping scales every gradient by, min(1, max_norm / (norm + 1e-6))), the gradients scaled by it in place
    unless in_place is False (AdamW's fused update then reads them times the factor); None where the kernels could
    not be built."""
    module, _ = kernels()
    if module is None:
        return None
    if not grads:  # (the kernel takes no empty list)
        return paddle.zeros([], dtype="float32"), 1.0
    # detached: the same storage, scaled in place, without the autograd check that refuses in-place ops on leaves
    _, norm, factor = module.paddle_ft_clip_by_global_norm([g.detach() for g in grads], float(max_norm), in_place)
    return norm, float(factor)


def adamw_update(optimizer: paddle.optimizer.Optimizer):
    """`optimizer.step()` for Paddle's AdamW over float32 CPU parameters in one kernel, as update(grad_scale): every
    gradient read times grad_scale (clipping folded in), on the optimizer's own moments and beta powers (its
    state_dict and checkpoints are unchanged). None, with nothing done, where the kernel does not compute what
    Paddle's step would: another optimizer, multi-precision, AMSGrad, lazy mode, lr_ratio, an optimizer's own
    grad_clip or regularization, tensor-valued hyperparameters. A parameter's moments and beta powers are made by the
    optimizer's own `_create_accumulators`, as its first step makes them (from a loaded checkpoint's values, after
    set_state_dict): every step is the kernel's, so that a resumed run computes what an uninterrupted one does."""
    module, _ = kernels()
    if module is None or type(optimizer) is not paddle.optimizer.AdamW or optimizer._multi_precision \
            or optimizer._amsgrad or optimizer._lr_ratio is not None or optimizer._grad_clip is not None \
            or optimizer.regularization is not None or optimizer._name is not None:
        return None
    groups = optimizer._param_groups if isinstance(optimizer._parameter_list[0], dict) \
        else [{"params": optimizer._parameter_list}]
    learning_rate = np.float32(optimizer.get_lr())  # Paddle keeps the step's rate in a float32 tensor
    stepped, settings = [], []
    for group in groups:
        options = {**optimizer._default_dict, **group}
        hyper = [options["weight_decay"], options["beta1"], options["beta2"], options["epsilon"]]
        numbers = all(isinstance(h, (int, float)) for h in hyper)  # not Tensors, which Paddle's AdamW also takes
        if options["lazy_mode"] or options["grad_clip"] is not None or not numbers:
            return None
        ratio = group.get("learning_rate", 1.0)  # a group's share of the rate, as Paddle's _create_param_lr takes it
        rate = learning_rate if ratio == 1.0 else np.float32(learning_rate * np.float32(ratio))
        for param in group["params"]:
            grad = param._grad_ivar()
            if param.stop_gradient or grad is None:
                continue
            if param.dtype != paddle.float32 or not param.place.is_cpu_place() or grad.is_selected_rows():
                return None
            decays = optimizer._apply_decay_param_fun is None or optimizer._apply_decay_param_fun(param.name)
            stepped.append((param, grad))
            settings.append([rate, hyper[0] if decays else 0.0, *hyper[1:]])
    made = optimizer._accumulators.get("moment1", {})
    if stepped and any(param.name not in made for param, _ in stepped):
        optimizer._create_accumulators(paddle.static.default_main_program().global_block(),
                                       [param for param, _ in stepped])
    state = [optimizer._accumulators.get(name, {}) for name in ("moment1", "moment2", "beta1_pow_acc",
                                                                "beta2_pow_acc")]
    # the parameters detached: the same storage, updated in place without autograd's check on leaves
    tensors = [[param.detach() for param, _ in stepped], [grad for _, grad in stepped],
               *[[moments[param.name] for param, _ in stepped] for moments in state]]

    def update(grad_scale: float = 1.0) -> None:
        if not settings:  # no gradient (every parameter frozen): Paddle's step changes nothing either
            return
        with _optimization_event():
            module.paddle_ft_adamw(*tensors, paddle.to_tensor(np.asarray(settings, dtype=np.float32)),
                                   float(grad_scale))
    return update


def _optimization_event():
    """Under paddle.profiler, the span Paddle's profiler gives an optimizer's step ("Optimization Step"), so that a
    trace shows the kernel's update as a step of the optimizer, as it shows Paddle's; nothing otherwise."""
    if not in_profiler_mode():
        return contextlib.nullcontext()
    return RecordEvent("Optimization Step", event_type=TracerEventType.Optimization)


def _layer_norm_forward(self: nn.LayerNorm, x: paddle.Tensor) -> paddle.Tensor:
    if not _training_on_cpu_fp32(self, x):
        return nn.LayerNorm.forward(self, x)
    return layer_norm(x, self)


def _dropout_forward(self: nn.Dropout, x: paddle.Tensor) -> paddle.Tensor:
    if self.mode != "upscale_in_train" or self.axis is not None:
        return nn.Dropout.forward(self, x)
    return dropout(x, self.p, self.training)


def use_fused_kernels(model: nn.Layer) -> tuple[int, str | None]:
    """Route `model`'s post-norm encoder layers, dropouts and layer norms through the fused kernels while
    training; returns (how many encoder layers, None), or (0, why not) where the kernels cannot be built."""
    module, reason = kernels()
    if module is None:
        return 0, reason
    layers = [layer for layer in model.sublayers(include_self=True)
              if isinstance(layer, nn.TransformerEncoderLayer) and _fusable(layer)]
    # past PaddleNLP's __setattr__ patch, which would take `forward` for an unbound method of the layer
    for layer in layers:
        object.__setattr__(layer, "forward", types.MethodType(_forward, layer))
        object.__setattr__(layer, PACKS_TEXTS, hasattr(module, "paddle_ft_packed_attention"))
    for layer in model.sublayers(include_self=True):  # every dropout, the other norms (the embeddings')
        if type(layer) is nn.Dropout:
            object.__setattr__(layer, "forward", types.MethodType(_dropout_forward, layer))
        elif type(layer) is nn.LayerNorm and _fusable_norm(layer):  # (a fused layer's norms take add_layer_norm)
            object.__setattr__(layer, "forward", types.MethodType(_layer_norm_forward, layer))
    return len(layers), None
