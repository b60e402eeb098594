#!/usr/bin/python3
"""make_fixtures.py - writes the per-op test fixtures in tests/fixtures/ops/.

For every case below, PyTorch (1.13, CPU) computes the op's output and,
through torch.autograd, the gradients of every input for a random upstream
gradient dy. tests/test_ops_fixtures.c runs the same case through
dp_op_table and compares. The cases are defined only here: the attributes
travel in the file.

Inputs are drawn as float32 from a seeded numpy generator (each case has its
own seed, so adding a case does not change the others); the reference is
computed in float64 from those exact float32 values and rounded to float32
once, so the fixtures carry almost no rounding error of their own.

Run:  /usr/bin/python3 tools/make_fixtures.py [output_dir]
(default: tests/fixtures/ops next to this script's repository). Re-running
reproduces the same bytes. The tests do not need PyTorch: commit the files.

File format (".bin", all little-endian):
    magic        4 bytes  b"DPFX"
    version      u32      1
    case name    str
    op name      str      as in dp_op_table ("conv", "max_pool", ...)
    attributes   i32 kernel[3], i32 stride[3], i32 pad[3], i32 dilation[3],
                 i32 groups, i32 count_include_pad, f32 loss_denominator
                 (spatial arrays indexed like the tensor's spatial dims,
                 unused entries as in dp_op_attr_default)
    count        u32      number of tensors
    count x tensor:
        name     str      inputs: "x", "weight", "bias", "labels";
                          upstream gradient "dy"; output "y";
                          expected gradients "dx", "dweight", "dbias"
                          (see "Later additions" for the other names)
        dtype    u32      0 = float32, 1 = int32
        ndim     u32      0..5 (0 = a scalar, one value)
        dims     i32[ndim]
        data     numel x 4 bytes, row-major
    str = u32 byte length, then that many bytes of UTF-8 (no terminator)
A missing "bias" means the case has no bias.

Later additions (still version 1: they are tensors, so the header and every
older file stay as they were; a reader that does not know a name ignores
it, and a missing one means dp_op_attr_default's value):
    in[1] of add       "other", its expected gradient "dother"
    in[1] of mse       "target" (no gradient)
    batch_norm         "running_mean", "running_var" (C) before the call and
                       "running_mean_after", "running_var_after" expected
                       after it; a missing "weight" / "bias" means NULL
    attributes         "attr.output_padding" i32 (3), "attr.training" i32 (),
                       "attr.eps" f32 (), "attr.momentum" f32 (),
                       "attr.fuse_relu" i32 (), "attr.dropout_p" f32 (),
                       "attr.label_smoothing" f32 () (softmax_xent),
                       "attr.ceil_mode" i32 () (max_pool)
"""
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = b"DPFX"
VERSION = 1
DTYPE_F32, DTYPE_I32 = 0, 1


def default_attr():
    return dict(kernel=[1, 1, 1], stride=[1, 1, 1], pad=[0, 0, 0], dilation=[1, 1, 1],
                groups=1, count_include_pad=1, loss_denominator=0.0)


def pack_str(s):
    b = s.encode("utf-8")
    return struct.pack("<I", len(b)) + b


def pack_tensor(name, array):
    array = np.array(array, order="C")  # (np.ascontiguousarray makes a scalar 1-D)
    if array.dtype == np.float32:
        dtype = DTYPE_F32
    elif array.dtype == np.int32:
        dtype = DTYPE_I32
    else:
        raise TypeError(f"{name}: unsupported dtype {array.dtype}")
    out = pack_str(name) + struct.pack("<II", dtype, array.ndim)
    out += struct.pack(f"<{array.ndim}i", *array.shape)
    return out + array.astype(array.dtype.newbyteorder("<")).tobytes()


def spatial(values, n, fill=1):
    """An attribute given as an int or a tuple, as the 3-entry array."""
    if isinstance(values, int):
        values = [values] * n
    values = list(values)
    assert len(values) == n
    return values + [fill] * (3 - n)


def write_case(out_dir, name, op, attr, tensors):
    blob = MAGIC + struct.pack("<I", VERSION) + pack_str(name) + pack_str(op)
    blob += struct.pack("<12i", *attr["kernel"], *attr["stride"], *attr["pad"], *attr["dilation"])
    blob += struct.pack("<iif", attr["groups"], attr["count_include_pad"], attr["loss_denominator"])
    blob += struct.pack("<I", len(tensors))
    for tname, array in tensors:
        blob += pack_tensor(tname, array)
    path = os.path.join(out_dir, name + ".bin")
    with open(path, "wb") as f:
        f.write(blob)
    return len(blob)


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def run(fn, inputs, rng):
    """fn(*float64 tensors) -> output; returns (y, dy, grads) as float32."""
    leaves = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in inputs]
    y = fn(*leaves)
    dy = randn(rng, *y.shape) if y.dim() > 0 else np.array(rng.uniform(0.5, 1.5), dtype=np.float32)
    y.backward(torch.tensor(dy.astype(np.float64)))
    grads = [leaf.grad.numpy().astype(np.float32) for leaf in leaves]
    return y.detach().numpy().astype(np.float32), dy, grads


# --- cases -----------------------------------------------------------------

def conv_case(name, x_shape, w_shape, bias=True, stride=1, pad=0, dilation=1, groups=1, fuse_relu=False):
    rng = rng_for(name)
    n = len(x_shape) - 2
    x = randn(rng, *x_shape)
    w = randn(rng, *w_shape, scale=0.5)
    b = randn(rng, w_shape[0]) if bias else None
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    inputs = [x, w] + ([b] if bias else [])

    def fn(xt, wt, bt=None):
        y = conv(xt, wt, bt, stride=stride, padding=pad, dilation=dilation, groups=groups)
        return torch.relu(y) if fuse_relu else y

    return name, "conv", conv_attr(n, w_shape, stride, pad, dilation, groups), \
        conv_tensors(x, w, b, run(fn, inputs, rng), attr_tensors(fuse_relu=1) if fuse_relu else ())


def conv_attr(n, w_shape, stride, pad, dilation, groups):
    """The header attributes of a (transposed) convolution."""
    attr = default_attr()
    attr["kernel"] = spatial(list(w_shape[2:]), n)
    attr["stride"], attr["pad"], attr["dilation"] = spatial(stride, n), spatial(pad, n, 0), spatial(dilation, n)
    attr["groups"] = groups
    return attr


def conv_tensors(x, w, b, result, extra=()):
    """The tensors of a (transposed) convolution case, `extra` after the inputs."""
    y, dy, grads = result
    tensors = [("x", x), ("weight", w)] + ([("bias", b)] if b is not None else []) + list(extra)
    tensors += [("dy", dy), ("y", y), ("dx", grads[0]), ("dweight", grads[1])]
    if b is not None:
        tensors.append(("dbias", grads[2]))
    return tensors


def pool_attr(n, kernel, stride, pad, dilation=1, count_include_pad=True):
    attr = default_attr()
    attr["kernel"], attr["stride"], attr["dilation"] = spatial(kernel, n), spatial(stride, n), spatial(dilation, n)
    attr["pad"] = spatial(pad, n, 0)
    attr["count_include_pad"] = 1 if count_include_pad else 0
    return attr


def max_pool_case(name, x_shape, kernel, stride, pad=0, dilation=1, ceil_mode=False):
    rng = rng_for(name)
    n = len(x_shape) - 2
    x = randn(rng, *x_shape)  # continuous values: no ties
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
    y, dy, grads = run(lambda t: pool(t, kernel, stride, pad, dilation, ceil_mode=ceil_mode), [x], rng)
    ceil = [("attr.ceil_mode", np.array(1, dtype=np.int32))] if ceil_mode else []
    return name, "max_pool", pool_attr(n, kernel, stride, pad, dilation), \
        [("x", x)] + ceil + [("dy", dy), ("y", y), ("dx", grads[0])]


def avg_pool_case(name, x_shape, kernel, stride, pad=0, count_include_pad=True):
    rng = rng_for(name)
    n = len(x_shape) - 2
    x = randn(rng, *x_shape)
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
    y, dy, grads = run(lambda t: pool(t, kernel, stride, pad, count_include_pad=count_include_pad), [x], rng)
    return name, "avg_pool", pool_attr(n, kernel, stride, pad, count_include_pad=count_include_pad), \
        [("x", x), ("dy", dy), ("y", y), ("dx", grads[0])]


def linear_case(name, batch, in_features, out_features, bias=True):
    rng = rng_for(name)
    x = randn(rng, batch, in_features)
    w = randn(rng, out_features, in_features, scale=0.5)
    b = randn(rng, out_features) if bias else None
    inputs = [x, w] + ([b] if bias else [])
    y, dy, grads = run(lambda *t: F.linear(*t), inputs, rng)
    tensors = [("x", x), ("weight", w)] + ([("bias", b)] if bias else [])
    tensors += [("dy", dy), ("y", y), ("dx", grads[0]), ("dweight", grads[1])]
    if bias:
        tensors.append(("dbias", grads[2]))
    return name, "linear", default_attr(), tensors


def relu_case(name, shape):
    rng = rng_for(name)
    x = randn(rng, *shape)
    x[np.abs(x) < 1e-3] = 0.5  # no input at the kink
    y, dy, grads = run(torch.relu, [x], rng)
    return name, "relu", default_attr(), [("x", x), ("dy", dy), ("y", y), ("dx", grads[0])]


def relu6_case(name, shape):
    rng = rng_for(name)
    x = randn(rng, *shape, scale=4.0) + np.float32(3.0)  # values in all three pieces
    x[np.abs(x) < 1e-3] = 0.5  # no input at a kink
    x[np.abs(x - 6) < 1e-3] = 5.5
    y, dy, grads = run(F.relu6, [x], rng)
    return name, "relu6", default_attr(), [("x", x), ("dy", dy), ("y", y), ("dx", grads[0])]


def hard_case(name, op, shape, fn):
    """hardswish / hardsigmoid: values in all three pieces, and the kinks
    -3 and 3 themselves (aten's gradient there is part of the op)."""
    rng = rng_for(name)
    x = randn(rng, *shape, scale=3.0)
    x.reshape(-1)[:6] = np.array([-3, 3, -3, 3, 0, -4.5], dtype=np.float32)
    y, dy, grads = run(fn, [x], rng)
    # torch 1.13's CPU kernels disagree at x = 3 with themselves: the scalar
    # loop (and the CUDA kernel) take aten's closed band [-3, 3] (hardswish:
    # 3 dy / 2 at 3), the vectorised loop dy. The fixture takes the scalar
    # loop's (one-element tensors) at the kinks, the definition dptrain follows.
    flat_x, flat_dy, flat_dx = x.reshape(-1), dy.reshape(-1), grads[0].reshape(-1)
    for i in np.flatnonzero(np.abs(flat_x) == 3):
        one = torch.tensor(flat_x[i:i + 1].astype(np.float64), requires_grad=True)
        fn(one).backward(torch.tensor(flat_dy[i:i + 1].astype(np.float64)))
        flat_dx[i] = np.float32(one.grad.item())
    return name, op, default_attr(), [("x", x), ("dy", dy), ("y", y), ("dx", grads[0])]


def scale_channels_case(name, x_shape, shared=False):
    """torchvision's SqueezeExcitation's `scale * input`: s (N, C, 1, ...);
    shared: ConvNeXt's `self.layer_scale * x`, s (1, C, 1, ...)."""
    rng = rng_for(name)
    x = randn(rng, *x_shape)
    s = randn(rng, 1 if shared else x_shape[0], x_shape[1], *([1] * (len(x_shape) - 2)))
    y, dy, grads = run(lambda a, b: a * b, [x, s], rng)
    return name, "scale_channels", default_attr(), \
        [("x", x), ("other", s), ("dy", dy), ("y", y), ("dx", grads[0]), ("dother", grads[1])]


def gelu_case(name, shape):
    """torch.nn.GELU() (exact, erf): both tails and the middle."""
    rng = rng_for(name)
    x = randn(rng, *shape, scale=2.5)
    y, dy, grads = run(F.gelu, [x], rng)
    return name, "gelu", default_attr(), [("x", x), ("dy", dy), ("y", y), ("dx", grads[0])]


def layer_norm_case(name, x_shape, eps=1e-6, affine=True, offset=0.0):
    """ConvNeXt's LayerNorm2d: F.layer_norm over C of x.permute(0, 2, 3, 1),
    permuted back (for (N, C): nn.LayerNorm(C) itself); x = offset + randn."""
    rng = rng_for(name)
    channels = x_shape[1]
    x = (randn(rng, *x_shape) + np.float32(offset)).astype(np.float32)
    w = (1.0 + randn(rng, channels, scale=0.3)).astype(np.float32)
    b = randn(rng, channels, scale=0.5)
    eps32 = float(np.float32(eps))
    inputs = [x, w, b] if affine else [x]
    order = [0] + list(range(2, len(x_shape))) + [1]
    back = [0, len(x_shape) - 1] + list(range(1, len(x_shape) - 1))

    def fn(xt, wt=None, bt=None):
        return F.layer_norm(xt.permute(*order), (channels,), wt, bt, eps32).permute(*back)

    y, dy, grads = run(fn, inputs, rng)
    tensors = [("x", x)] + ([("weight", w), ("bias", b)] if affine else [])
    tensors += attr_tensors(eps=eps) + [("dy", dy), ("y", y), ("dx", grads[0])]
    if affine:
        tensors += [("dweight", grads[1]), ("dbias", grads[2])]
    return name, "layer_norm", default_attr(), tensors


def concat_case(name, a_shape, b_channels):
    """torch.cat([a, b], dim=1): DenseNet's concatenation of features."""
    rng = rng_for(name)
    a = randn(rng, *a_shape)
    b = randn(rng, a_shape[0], b_channels, *a_shape[2:])
    y, dy, grads = run(lambda s, t: torch.cat([s, t], 1), [a, b], rng)
    return name, "concat", default_attr(), \
        [("x", a), ("other", b), ("dy", dy), ("y", y), ("dx", grads[0]), ("dother", grads[1])]


def flatten_case(name, shape):
    rng = rng_for(name)
    x = randn(rng, *shape)
    y, dy, grads = run(lambda t: torch.flatten(t, 1), [x], rng)
    return name, "flatten", default_attr(), [("x", x), ("dy", dy), ("y", y), ("dx", grads[0])]


def xent_case(name, batch, classes, denominator=0.0, logit_scale=1.0, logit_offset=0.0, label_smoothing=None):
    """label_smoothing: torch's, given to the op as the float32 it rounds to (and
    to torch as that value, so the reference is the op's own problem)."""
    rng = rng_for(name)
    x = randn(rng, batch, classes, scale=logit_scale) + np.float32(logit_offset)
    labels = rng.integers(0, classes, size=batch).astype(np.int32)
    d = denominator if denominator > 0 else batch
    target = torch.tensor(labels.astype(np.int64))
    eps = 0.0 if label_smoothing is None else float(np.float32(label_smoothing))
    y, dy, grads = run(lambda t: F.cross_entropy(t, target, reduction="sum", label_smoothing=eps) / d, [x], rng)
    attr = default_attr()
    attr["loss_denominator"] = float(denominator)
    return name, "softmax_xent", attr, \
        [("x", x), ("labels", labels), ("dy", dy), ("y", y), ("dx", grads[0])] + \
        attr_tensors(label_smoothing=label_smoothing)


def large_logits_case(name):
    """Logits near +-100 (and a row with a 1000 gap): exp overflows without the max shift."""
    rng = rng_for(name)
    x = np.array([[100, -100, 99, 0, 50],
                  [100, 100, 100, 100, 100],
                  [-100, -100, -100, -99.5, -100],
                  [1000, 0, -1000, 2, 3],
                  [88.5, 89, 90, 88, 87],
                  [-100, 100, 0, 0, 0]], dtype=np.float32)
    labels = np.array([1, 3, 3, 2, 0, 0], dtype=np.int32)
    target = torch.tensor(labels.astype(np.int64))
    y, dy, grads = run(lambda t: F.cross_entropy(t, target, reduction="sum") / 6, [x], rng)
    return name, "softmax_xent", default_attr(), [("x", x), ("labels", labels), ("dy", dy), ("y", y), ("dx", grads[0])]


def attr_tensors(output_padding=None, training=None, eps=None, momentum=None, fuse_relu=None, dropout_p=None,
                 label_smoothing=None):
    """The attributes that travel as tensors (see the docstring), only those given."""
    out = []
    if output_padding is not None:
        out.append(("attr.output_padding", np.array(output_padding, dtype=np.int32)))
    for name, value, dtype in (("training", training, np.int32), ("eps", eps, np.float32),
                               ("momentum", momentum, np.float32), ("fuse_relu", fuse_relu, np.int32),
                               ("dropout_p", dropout_p, np.float32),
                               ("label_smoothing", label_smoothing, np.float32)):
        if value is not None:
            out.append(("attr." + name, np.array(value, dtype=dtype)))
    return out


def conv_transpose_case(name, x_shape, w_shape, bias=True, stride=1, pad=0, output_padding=0, dilation=1, groups=1):
    rng = rng_for(name)
    n = len(x_shape) - 2
    x = randn(rng, *x_shape)
    w = randn(rng, *w_shape, scale=0.5)
    b = randn(rng, w_shape[1] * groups) if bias else None
    conv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
    inputs = [x, w] + ([b] if bias else [])

    def fn(xt, wt, bt=None):
        return conv(xt, wt, bt, stride=stride, padding=pad, output_padding=output_padding, groups=groups,
                    dilation=dilation)

    return name, "conv_transpose", conv_attr(n, w_shape, stride, pad, dilation, groups), \
        conv_tensors(x, w, b, run(fn, inputs, rng), attr_tensors(output_padding=spatial(output_padding, n, 0)))


def global_avg_pool_case(name, x_shape):
    rng = rng_for(name)
    n = len(x_shape) - 2
    x = randn(rng, *x_shape)
    pool = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[n]
    y, dy, grads = run(lambda t: pool(t, 1), [x], rng)
    return name, "global_avg_pool", default_attr(), [("x", x), ("dy", dy), ("y", y), ("dx", grads[0])]


def batch_norm_case(name, x_shape, training=True, affine=True, momentum=0.1, eps=1e-5, offset=0.0, scale=1.0):
    """x = offset + scale * randn: an offset far from 0 tests the statistics' accuracy."""
    rng = rng_for(name)
    channels = x_shape[1]
    x = (randn(rng, *x_shape) * np.float32(scale) + np.float32(offset)).astype(np.float32)
    w = (1.0 + randn(rng, channels, scale=0.3)).astype(np.float32)
    b = randn(rng, channels, scale=0.5)
    running_mean = randn(rng, channels, scale=0.2) + np.float32(offset)
    running_var = (np.abs(randn(rng, channels)) * np.float32(scale * scale) + np.float32(0.5)).astype(np.float32)
    rm = torch.tensor(running_mean.astype(np.float64))
    rv = torch.tensor(running_var.astype(np.float64))
    inputs = [x, w, b] if affine else [x]

    def fn(xt, wt=None, bt=None):
        return F.batch_norm(xt, rm, rv, wt, bt, training=training, momentum=momentum, eps=eps)

    y, dy, grads = run(fn, inputs, rng)
    tensors = [("x", x)] + ([("weight", w), ("bias", b)] if affine else [])
    tensors += [("running_mean", running_mean), ("running_var", running_var)]
    tensors += attr_tensors(training=1 if training else 0, eps=eps, momentum=momentum)
    tensors += [("dy", dy), ("y", y), ("dx", grads[0])]
    if affine:
        tensors += [("dweight", grads[1]), ("dbias", grads[2])]
    tensors += [("running_mean_after", rm.numpy().astype(np.float32)),
                ("running_var_after", rv.numpy().astype(np.float32))]
    return name, "batch_norm", default_attr(), tensors


def dropout_identity_case(name, shape, training, p):
    """Only the identity cases compare with PyTorch (inference, or p = 0): its
    mask comes from its own generator; tests/test_ops_new.c tests the rest."""
    rng = rng_for(name)
    x = randn(rng, *shape)
    y, dy, grads = run(lambda t: F.dropout(t, p, training=bool(training)), [x], rng)
    return name, "dropout", default_attr(), \
        [("x", x)] + attr_tensors(training=training, dropout_p=p) + [("dy", dy), ("y", y), ("dx", grads[0])]


def unary_case(name, op, shape, fn, extremes=False):
    """extremes: large |x| mixed in (overflow of exp, saturation)."""
    rng = rng_for(name)
    x = randn(rng, *shape, scale=3.0)
    if extremes:
        big = np.array([1000, -1000, 100, -100, 88.8, -88.8, 30, -30, 15, -15, 1e-4, -1e-4, 0], dtype=np.float32)
        x.reshape(-1)[:big.size] = big
    y, dy, grads = run(fn, [x], rng)
    return name, op, default_attr(), [("x", x), ("dy", dy), ("y", y), ("dx", grads[0])]


def add_case(name, shape, fuse_relu=False):
    rng = rng_for(name)
    x = randn(rng, *shape)
    other = randn(rng, *shape)
    s = x + other
    other[np.abs(s) < 1e-3] += np.float32(0.01)  # no sum at the relu kink

    def fn(a, b):
        return torch.relu(a + b) if fuse_relu else a + b

    y, dy, grads = run(fn, [x, other], rng)
    return name, "add", default_attr(), \
        [("x", x), ("other", other)] + attr_tensors(fuse_relu=1 if fuse_relu else 0) + \
        [("dy", dy), ("y", y), ("dx", grads[0]), ("dother", grads[1])]


def mse_case(name, shape, denominator=0.0):
    rng = rng_for(name)
    x = randn(rng, *shape)
    target = randn(rng, *shape)
    d = denominator if denominator > 0 else x.size
    tt = torch.tensor(target.astype(np.float64))
    y, dy, grads = run(lambda t: F.mse_loss(t, tt, reduction="sum") / d, [x], rng)
    attr = default_attr()
    attr["loss_denominator"] = float(denominator)
    return name, "mse", attr, [("x", x), ("target", target), ("dy", dy), ("y", y), ("dx", grads[0])]


def all_cases():
    return [
        # conv 2-D
        conv_case("conv2d_basic", (2, 3, 7, 6), (4, 3, 3, 3)),
        conv_case("conv2d_pad1_stride2_nobias", (2, 3, 8, 7), (5, 3, 3, 3), bias=False, stride=2, pad=1),
        conv_case("conv2d_pad2_dilation2", (1, 2, 9, 8), (3, 2, 3, 3), pad=2, dilation=2),
        conv_case("conv2d_groups2_nonsquare", (2, 4, 7, 9), (6, 2, 2, 3), stride=(2, 1), pad=(1, 0), groups=2),
        conv_case("conv2d_mixed_nobias", (3, 4, 10, 11), (4, 2, 3, 2), bias=False, stride=(1, 2), pad=(2, 1),
                  dilation=(2, 1), groups=2),
        conv_case("conv2d_stride3_bigpad", (2, 2, 6, 5), (3, 2, 2, 2), stride=3, pad=(2, 1)),
        conv_case("conv2d_1x1", (3, 4, 5, 5), (6, 4, 1, 1)),
        conv_case("conv2d_depthwise", (2, 3, 6, 6), (6, 1, 3, 3), pad=1, groups=3),
        # large enough that im2col works in chunks of images: 386 KiB of columns
        # and outputs per image, so 5 images = 2 + 2 + 1 with ops_conv.c's 1 MiB
        conv_case("conv2d_chunked", (5, 8, 26, 26), (4, 8, 5, 5), pad=0),
        conv_case("conv2d_lenet_conv2", (2, 20, 13, 13), (16, 20, 5, 5)),
        # ResNet's 4x4 and 7x7 stages in small (ops_conv.c's tap-plane
        # forward): >= 32 output channels so the products run dptrain's own
        # gemm kernels, non-square inputs, fused ReLU / no bias
        conv_case("conv2d_small_plane_relu", (3, 16, 7, 6), (64, 16, 3, 3), stride=2, pad=1, fuse_relu=True),
        conv_case("conv2d_small_plane_s1_nobias", (2, 8, 5, 7), (32, 8, 3, 3), bias=False, pad=1),
        # conv 1-D and 3-D
        conv_case("conv1d_pad1_stride2", (2, 3, 11), (4, 3, 3), stride=2, pad=1),
        conv_case("conv1d_dilation3_groups2_nobias", (2, 4, 12), (6, 2, 4), bias=False, pad=2, dilation=3,
                  groups=2),
        conv_case("conv3d_basic", (2, 2, 5, 6, 4), (3, 2, 2, 3, 2), stride=(1, 2, 1), pad=(1, 0, 1)),
        conv_case("conv3d_dilation_groups2", (1, 4, 6, 5, 7), (4, 2, 3, 2, 3), stride=(1, 1, 2), pad=(1, 1, 0),
                  dilation=(2, 1, 1), groups=2),
        # max pool
        max_pool_case("max_pool2d_k2s2", (2, 3, 8, 8), 2, 2),
        max_pool_case("max_pool2d_k3s2p1", (2, 2, 9, 7), 3, 2, 1),
        max_pool_case("max_pool2d_nonsquare", (1, 3, 7, 6), (3, 2), (2, 1), (1, 1)),
        max_pool_case("max_pool2d_dilation2", (1, 2, 8, 9), 3, 1, 1, dilation=2),
        max_pool_case("max_pool2d_overlap", (2, 2, 6, 7), 3, 1, 0),
        max_pool_case("max_pool1d_k3s2p1", (2, 3, 11), 3, 2, 1),
        max_pool_case("max_pool3d", (1, 2, 5, 6, 5), (2, 3, 2), (2, 2, 1), (1, 1, 0)),
        # ceil_mode: H 8 -> 4 (a last window of 2 rows, floor gives 3), W 9 -> 4 (exact: as floor)
        max_pool_case("max_pool2d_ceil_k3s2", (2, 3, 8, 9), 3, 2, ceil_mode=True),
        # ceil_mode with pad 1: H 5 -> 3, W 7 -> 4, as floor: the rounded-up window (4, 5) would
        # start in the right padding, so it is dropped; then 6 -> 4 with kernel 3 pad 1 (floor 3)
        max_pool_case("max_pool2d_ceil_pad_rule", (2, 2, 5, 7), 2, 2, 1, ceil_mode=True),
        max_pool_case("max_pool2d_ceil_k3s2p1", (1, 2, 6, 6), 3, 2, 1, ceil_mode=True),
        max_pool_case("max_pool1d_ceil_dilation2", (2, 3, 10), 3, 2, 0, dilation=2, ceil_mode=True),
        # avg pool
        avg_pool_case("avg_pool2d_k2s2", (2, 3, 8, 8), 2, 2),
        avg_pool_case("avg_pool2d_k3s2p1_include", (2, 2, 9, 7), 3, 2, 1, count_include_pad=True),
        avg_pool_case("avg_pool2d_k3s2p1_exclude", (2, 2, 9, 7), 3, 2, 1, count_include_pad=False),
        avg_pool_case("avg_pool2d_nonsquare_exclude", (1, 3, 7, 6), (2, 3), (1, 2), (1, 1), count_include_pad=False),
        avg_pool_case("avg_pool2d_overlap", (2, 2, 6, 7), 3, 1, 0),
        avg_pool_case("avg_pool1d_p1_include", (2, 3, 11), 3, 2, 1, count_include_pad=True),
        avg_pool_case("avg_pool1d_p1_exclude", (2, 3, 11), 3, 2, 1, count_include_pad=False),
        avg_pool_case("avg_pool3d_p1_include", (1, 2, 5, 6, 5), (2, 3, 2), (2, 2, 1), (1, 1, 0),
                      count_include_pad=True),
        avg_pool_case("avg_pool3d_p1_exclude", (1, 2, 5, 6, 5), (2, 3, 2), (2, 2, 1), (1, 1, 0),
                      count_include_pad=False),
        # linear
        linear_case("linear_bias", 4, 7, 5),
        linear_case("linear_nobias", 3, 6, 4, bias=False),
        linear_case("linear_long_k", 4, 800, 24),
        # relu, flatten
        relu_case("relu_4d", (2, 3, 4, 5)),
        relu_case("relu_2d", (5, 7)),
        flatten_case("flatten_4d", (2, 3, 4, 5)),
        flatten_case("flatten_3d", (3, 2, 7)),
        # softmax cross-entropy
        xent_case("softmax_xent_basic", 6, 10),
        xent_case("softmax_xent_denominator", 5, 7, denominator=16.0),
        large_logits_case("softmax_xent_large_logits"),
        xent_case("softmax_xent_offset100", 4, 6, logit_scale=5.0, logit_offset=100.0, denominator=3.0),
    ] + new_cases() + smoothing_cases()


def smoothing_cases():
    """softmax_xent with torch's label_smoothing: torchvision's 0.1, a
    denominator, logits far from 0 (the smoothing term's mean), a large
    factor, one class in two."""
    return [
        xent_case("softmax_xent_smooth", 6, 10, label_smoothing=0.1),
        xent_case("softmax_xent_smooth_denominator", 5, 7, denominator=16.0, label_smoothing=0.25),
        xent_case("softmax_xent_smooth_offset100", 4, 6, logit_scale=5.0, logit_offset=100.0, denominator=3.0,
                  label_smoothing=0.1),
        xent_case("softmax_xent_smooth_large", 8, 2, logit_scale=3.0, label_smoothing=0.9),
    ]


def new_cases():
    """The ops beyond LeNet's (transposed conv, global pool, batch norm, dropout,
    sigmoid, tanh, add, mse)."""
    return [
        # transposed conv 2-D: the classic 2x upsampling, odd sizes, groups, dilation
        conv_transpose_case("conv_transpose2d_basic", (2, 3, 5, 4), (3, 4, 3, 3)),
        conv_transpose_case("conv_transpose2d_s2p1op1", (2, 4, 5, 6), (4, 3, 3, 3), stride=2, pad=1,
                            output_padding=1),
        conv_transpose_case("conv_transpose2d_s3_groups2_nobias", (3, 4, 4, 5), (4, 2, 2, 3), bias=False,
                            stride=3, pad=(1, 0), output_padding=(2, 1), groups=2),
        conv_transpose_case("conv_transpose2d_dilation_nonsquare", (2, 2, 6, 5), (2, 3, 3, 2), stride=(2, 1),
                            pad=(2, 1), output_padding=(1, 0), dilation=(2, 3)),
        # output_padding >= stride, allowed because the dilation is larger
        conv_transpose_case("conv_transpose2d_op_by_dilation", (1, 2, 5, 5), (2, 2, 2, 2), stride=1, pad=0,
                            output_padding=(1, 2), dilation=3),
        conv_transpose_case("conv_transpose2d_depthwise", (2, 3, 6, 6), (3, 1, 3, 3), stride=2, pad=1, groups=3),
        # 16 x 17 inputs: 272 positions per image, one image per chunk (gemm in place)
        conv_transpose_case("conv_transpose2d_wide", (2, 3, 16, 17), (3, 5, 4, 4), stride=2, pad=1),
        # transposed conv 1-D and 3-D
        conv_transpose_case("conv_transpose1d_s2p1op1", (2, 3, 7), (3, 4, 3), stride=2, pad=1, output_padding=1),
        conv_transpose_case("conv_transpose1d_s3_dil2_groups2_nobias", (2, 4, 6), (4, 3, 4), bias=False, stride=3,
                            pad=2, output_padding=2, dilation=2, groups=2),
        conv_transpose_case("conv_transpose3d_s2_groups2", (2, 4, 3, 4, 3), (4, 1, 2, 3, 2), stride=(2, 2, 1),
                            pad=(0, 1, 1), output_padding=(1, 1, 0), groups=2),
        conv_transpose_case("conv_transpose3d_s3_dil", (1, 2, 3, 3, 4), (2, 3, 3, 2, 2), stride=(3, 1, 2),
                            pad=(1, 0, 1), output_padding=(2, 0, 1), dilation=(1, 2, 1)),
        # global average pooling
        global_avg_pool_case("global_avg_pool1d", (2, 3, 7)),
        global_avg_pool_case("global_avg_pool2d", (3, 4, 5, 7)),
        global_avg_pool_case("global_avg_pool3d", (2, 2, 3, 4, 5)),
        # batch norm: training (batch statistics, running stats updated) and inference
        batch_norm_case("batch_norm_train_2d", (7, 5)),
        batch_norm_case("batch_norm_train_4d", (3, 4, 5, 6)),
        batch_norm_case("batch_norm_train_5d", (2, 3, 3, 4, 5), momentum=0.3, eps=1e-3),
        batch_norm_case("batch_norm_train_offset", (4, 3, 7, 7), offset=300.0, scale=0.5),
        batch_norm_case("batch_norm_train_noaffine", (5, 3, 4)),
        batch_norm_case("batch_norm_eval_4d", (3, 4, 5, 6), training=False),
        batch_norm_case("batch_norm_eval_2d", (6, 5), training=False, eps=1e-2),
        # dropout: only the identity behaviours are PyTorch's
        dropout_identity_case("dropout_eval", (3, 4, 5), training=0, p=0.5),
        dropout_identity_case("dropout_p0", (2, 3, 4, 5), training=1, p=0.0),
        # sigmoid, tanh (with inputs up to +-1000)
        unary_case("sigmoid_4d", "sigmoid", (2, 3, 4, 5), torch.sigmoid),
        unary_case("sigmoid_extremes", "sigmoid", (3, 9), torch.sigmoid, extremes=True),
        unary_case("tanh_4d", "tanh", (2, 3, 4, 5), torch.tanh),
        unary_case("tanh_extremes", "tanh", (3, 9), torch.tanh, extremes=True),
        # add, with and without the fused relu
        add_case("add_4d", (2, 3, 4, 5)),
        add_case("add_fuse_relu", (3, 4, 6), fuse_relu=True),
        # mean squared error
        mse_case("mse_mean", (4, 10)),
        mse_case("mse_denominator_4d", (2, 3, 4, 5), denominator=8.0),
    ] + imagenet_cases() + mobilenet_v3_cases() + convnext_cases() + efficientnet_cases()


def imagenet_cases():
    """What torchvision's MobileNetV2 adds: relu6, and depthwise 3x3
    convolutions (ops_conv_depthwise.c) with stride 1 and 2, fused ReLU,
    wide rows (40 columns: several vectors and a tail)."""
    return [
        relu6_case("relu6_4d", (2, 3, 4, 5)),
        relu6_case("relu6_2d", (5, 7)),
        conv_case("conv2d_depthwise_s1_wide", (2, 4, 9, 40), (4, 1, 3, 3), bias=False, pad=1, groups=4),
        conv_case("conv2d_depthwise_s2_relu", (2, 5, 11, 13), (5, 1, 3, 3), stride=2, pad=1, groups=5,
                  fuse_relu=True),
        conv_case("conv2d_depthwise_mult3_dil", (1, 2, 8, 9), (6, 1, 3, 2), stride=(1, 2), pad=(2, 0),
                  dilation=(2, 1), groups=2),
    ]


def mobilenet_v3_cases():
    """What torchvision's MobileNetV3 adds: hardswish, hardsigmoid and the
    squeeze-excitation block's channel scaling (in[1] is "other")."""
    return [
        hard_case("hardswish_4d", "hardswish", (2, 3, 4, 5), F.hardswish),
        hard_case("hardswish_2d", "hardswish", (5, 7), F.hardswish),
        hard_case("hardsigmoid_4d", "hardsigmoid", (2, 3, 4, 5), F.hardsigmoid),
        hard_case("hardsigmoid_2d", "hardsigmoid", (5, 7), F.hardsigmoid),
        scale_channels_case("scale_channels_4d", (2, 3, 4, 5)),
        scale_channels_case("scale_channels_1x1", (3, 8, 1, 1)),
        scale_channels_case("scale_channels_3d", (2, 4, 9)),
        concat_case("concat_4d", (2, 3, 4, 5), 5),
        concat_case("concat_1x1", (3, 8, 1, 1), 2),
        concat_case("concat_2d", (4, 6), 3),
    ]


def convnext_cases():
    """What torchvision's ConvNeXt adds: exact GELU and the layer norm over
    the channels at every position (eps 1e-6)."""
    return [
        gelu_case("gelu_4d", (2, 3, 4, 5)),
        gelu_case("gelu_2d", (5, 7)),
        layer_norm_case("layer_norm_4d", (2, 6, 3, 4)),
        layer_norm_case("layer_norm_2d", (4, 8)),
        layer_norm_case("layer_norm_3d_offset", (2, 5, 7), eps=1e-5, offset=20.0),
        layer_norm_case("layer_norm_4d_no_affine", (3, 4, 2, 3), affine=False),
        scale_channels_case("scale_channels_shared_4d", (3, 4, 2, 3), shared=True),
        scale_channels_case("scale_channels_shared_2d", (5, 6), shared=True),
    ]


def drop_path_identity_case(name, shape, training, p):
    """torchvision.ops.stochastic_depth(x, p, "row") where it is the identity
    (inference, or p = 0); its mask comes from PyTorch's generator, so
    tests/test_ops_properties.c tests the training mask."""
    from torchvision.ops import stochastic_depth
    rng = rng_for(name)
    x = randn(rng, *shape)
    y, dy, grads = run(lambda t: stochastic_depth(t, p, "row", training=bool(training)), [x], rng)
    return name, "drop_path", default_attr(), \
        [("x", x)] + attr_tensors(training=training, dropout_p=p) + [("dy", dy), ("y", y), ("dx", grads[0])]


def efficientnet_cases():
    """What torchvision's EfficientNet adds: SiLU (x sigmoid(x)), with large
    |x| (exp overflowing to inf: -0 and 0 gradients below -88.7) mixed in, and
    stochastic depth where it is the identity."""
    return [
        unary_case("silu_4d", "silu", (2, 3, 4, 5), F.silu, extremes=True),
        unary_case("silu_2d", "silu", (5, 7), F.silu),
        drop_path_identity_case("drop_path_eval", (3, 4, 5, 2), training=0, p=0.2),
        drop_path_identity_case("drop_path_p0", (2, 3, 4, 5), training=1, p=0.0),
    ]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "fixtures", "ops")
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    total = 0
    names = set()
    for name, op, attr, tensors in all_cases():
        assert name not in names, f"duplicate case {name}"
        names.add(name)
        total += write_case(out_dir, name, op, attr, tensors)
    print(f"wrote {len(names)} cases, {total} bytes, to {os.path.normpath(out_dir)}")


if __name__ == "__main__":
    main()
