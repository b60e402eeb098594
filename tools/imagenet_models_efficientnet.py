"""imagenet_models_efficientnet.py - torchvision 0.14's EfficientNet B0 to B7
and EfficientNetV2 S, M, L as dptrain model files, for
tools/make_imagenet_models.py (which writes them with the other networks).

The layouts are torchvision's source read (torchvision/models/efficientnet.py,
ops/misc.py's Conv2dNormActivation and SqueezeExcitation, ops/
stochastic_depth.py); tests/torchvision_check.py checks the files against
torchvision itself. Every layer is named as torchvision names its module:
    features.0            stem: Conv2dNormActivation(3, C, 3, stride 2), SiLU
    features.S.I.block.J  stage S's block I (MBConv: [expand 1x1 conv-bn-SiLU,]
                          depthwise conv-bn-SiLU, SqueezeExcitation (fc1 SiLU,
                          fc2 sigmoid, scale), project 1x1 conv-bn; FusedMBConv
                          (V2's first stages): [expand kxk conv-bn-SiLU, project
                          1x1 conv-bn] or one kxk conv-bn-SiLU), then, when the
                          block keeps its shape, stochastic depth on the branch
                          and the residual sum
    features.N            head conv: 1x1 conv-bn-SiLU
    classifier.1          the linear layer after dropout (classifier.0)
Stochastic depth's p of the k-th block (from 0) of all T blocks is
0.2 k / T, as torchvision's. The [net] size is the crop size of the
variant's torchvision weights (B0 224 ... B7 600, V2-S 384, V2-M/L 480).
"""
import math
import textwrap

from make_imagenet_models import block, conv, bn, make_divisible

# torchvision's _efficientnet_conf("efficientnet_b*") before width and depth
# scaling: expand ratio, kernel, stride, input channels, output channels, layers
V1_STAGES = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
             (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

# efficientnet_bK: width_mult, depth_mult, dropout, crop size; B5 to B7 take
# batch norm eps 0.001, momentum 0.01, the others PyTorch's defaults
V1_VARIANTS = {
    0: (1.0, 1.0, 0.2, 224), 1: (1.0, 1.1, 0.2, 240), 2: (1.1, 1.2, 0.3, 288), 3: (1.2, 1.4, 0.3, 300),
    4: (1.4, 1.8, 0.4, 380), 5: (1.6, 2.2, 0.4, 456), 6: (1.8, 2.6, 0.5, 528), 7: (2.0, 3.1, 0.5, 600),
}

# EfficientNetV2 (_efficientnet_conf("efficientnet_v2_*")): block ("fused" or
# "mb"), expand ratio, kernel, stride, input, output channels, layers; dropout;
# crop size. Batch norm eps 0.001 (momentum PyTorch's 0.1); head 1280 channels.
V2_VARIANTS = {
    "s": ([("fused", 1, 3, 1, 24, 24, 2), ("fused", 4, 3, 2, 24, 48, 4), ("fused", 4, 3, 2, 48, 64, 4),
           ("mb", 4, 3, 2, 64, 128, 6), ("mb", 6, 3, 1, 128, 160, 9), ("mb", 6, 3, 2, 160, 256, 15)], 0.2, 384),
    "m": ([("fused", 1, 3, 1, 24, 24, 3), ("fused", 4, 3, 2, 24, 48, 5), ("fused", 4, 3, 2, 48, 80, 5),
           ("mb", 4, 3, 2, 80, 160, 7), ("mb", 6, 3, 1, 160, 176, 14), ("mb", 6, 3, 2, 176, 304, 18),
           ("mb", 6, 3, 1, 304, 512, 5)], 0.3, 480),
    "l": ([("fused", 1, 3, 1, 32, 32, 4), ("fused", 4, 3, 2, 32, 64, 7), ("fused", 4, 3, 2, 64, 96, 7),
           ("mb", 4, 3, 2, 96, 192, 10), ("mb", 6, 3, 1, 192, 224, 19), ("mb", 6, 3, 2, 224, 384, 25),
           ("mb", 6, 3, 1, 384, 640, 7)], 0.4, 480),
}

STOCHASTIC_DEPTH = 0.2  # torchvision's EfficientNet(stochastic_depth_prob=0.2)

HEADER = """{what}
# (written by tools/make_imagenet_models.py; docs/models.md). Layer names are
# torchvision's module names, so checkpoint tensors are its state_dict keys.
# convolutions: kaiming_normal_(fan_out) as torchvision (biases 0); classifier.1: U(+-1/sqrt(1000)), bias 0
"""


def conv_bn_act(prefix, filters, size, bn_keys, stride=1, groups=1, silu=True, label=None):
    """torchvision's Conv2dNormActivation: conv (no bias, padding (k - 1) / 2),
    batch norm, SiLU (or none); the label on its last layer."""
    layers = [conv(f"{prefix}.0", filters, size, stride=stride, pad=(size - 1) // 2, groups=groups),
              bn(f"{prefix}.1", label=None if silu else label, **bn_keys)]
    if silu:
        layers.append(block("silu", **({"label": label} if label else {})))
    return layers


def squeeze_excitation(prefix, channels, squeeze, scaled):
    """torchvision's SqueezeExcitation(channels, squeeze, activation SiLU):
    the scale of output `scaled` from its average (fc1 SiLU, fc2 sigmoid),
    then scale * it."""
    return [block("global_avgpool"),
            block("conv", name=f"{prefix}.fc1", filters=squeeze, size=1, activation="silu"),
            block("conv", name=f"{prefix}.fc2", filters=channels, size=1, activation="sigmoid"),
            block("scale_channels", **{"from": scaled})]


def mbconv(prefix, kind, expand, kernel, stride, inp, out, bn_keys, label):
    """The layers of one MBConv or FusedMBConv block's branch (block.J), the
    label (or None) on the last."""
    expanded = make_divisible(inp * expand)
    layers, j = [], 0
    if kind == "fused":
        if expanded != inp:
            layers += conv_bn_act(f"{prefix}.block.0", expanded, kernel, bn_keys, stride=stride)
            layers += conv_bn_act(f"{prefix}.block.1", out, 1, bn_keys, silu=False, label=label)
        else:
            layers += conv_bn_act(f"{prefix}.block.0", out, kernel, bn_keys, stride=stride, label=label)
        return layers
    if expanded != inp:
        layers += conv_bn_act(f"{prefix}.block.0", expanded, 1, bn_keys)
        j = 1
    depthwise = f"{prefix}.depthwise"
    layers += conv_bn_act(f"{prefix}.block.{j}", expanded, kernel, bn_keys, stride=stride, groups=expanded,
                          label=depthwise)
    layers += squeeze_excitation(f"{prefix}.block.{j + 1}", expanded, max(1, inp // 4), depthwise)
    layers += conv_bn_act(f"{prefix}.block.{j + 2}", out, 1, bn_keys, silu=False, label=label)
    return layers


def efficientnet(arch, what, stages, last_channel, dropout, size, bn_keys):
    """stages: (block kind, expand, kernel, stride, input, output, layers),
    channels and layers already scaled."""
    name = f"{arch}-imagenet"
    what = textwrap.fill(f"{name}.cfg: torchvision 0.14's {what} for 3x{size}x{size} images (its weights' crop "
                         "size), 1000 classes", width=78, initial_indent="# ", subsequent_indent="# ")
    out = [HEADER.format(what=what)]
    out.append(block("net", name=name, channels=3, height=size, width=size, init="kaiming_fan_out"))
    out.append("\n# features.0: stem\n" + "\n".join(conv_bn_act("features.0", stages[0][4], 3, bn_keys, stride=2,
                                                              label="features.0")))
    total, k, previous = sum(s[6] for s in stages), 0, "features.0"
    for stage, (kind, expand, kernel, stride, inp, c, count) in enumerate(stages, start=1):
        for i in range(count):
            prefix = f"features.{stage}.{i}"
            block_in, block_stride = (inp, stride) if i == 0 else (c, 1)
            residual = block_stride == 1 and block_in == c
            p = STOCHASTIC_DEPTH * float(k) / total
            # without the residual sum the branch's last layer is the block's output
            layers = mbconv(prefix, kind, expand, kernel, block_stride, block_in, c, bn_keys,
                            None if residual else prefix)
            if residual:
                layers += [block("drop_path", p=f"{p:.9g}"),
                           block("residual", **{"from": previous, "label": prefix})]
            out.append(f"\n# {prefix}: {'FusedMBConv' if kind == 'fused' else 'MBConv'} {expand}, {block_in} -> {c},"
                       f" {kernel}x{kernel}, stride {block_stride}"
                       f"{f', residual, stochastic depth {p:.4g}' if residual else ''}\n")
            out.append("\n".join(layers))
            previous, k = prefix, k + 1
    head = len(stages) + 1
    out.append(f"\n# features.{head}: head conv\n"
               + "\n".join(conv_bn_act(f"features.{head}", last_channel, 1, bn_keys)))
    out.append("\n# head\n" + block("global_avgpool") + "\n" + block("flatten") + "\n" + block("dropout", p=dropout)
               + "\n" + block("linear", name="classifier.1", out=1000, init="uniform_fan_out"))
    return name, "".join(out)


def efficientnet_v1(index):
    width, depth, dropout, size = V1_VARIANTS[index]
    stages = [("mb", e, k, s, make_divisible(i * width), make_divisible(o * width), int(math.ceil(n * depth)))
              for e, k, s, i, o, n in V1_STAGES]
    bn_keys = dict(eps=0.001, momentum=0.01) if index >= 5 else {}
    what = f"EfficientNet-B{index} (MBConv blocks: depthwise convolutions, squeeze-excitation, SiLU, stochastic depth" \
           + ("; batch norm eps 0.001, momentum 0.01" if bn_keys else "") + ")"
    return efficientnet(f"efficientnet_b{index}", what, stages, 4 * stages[-1][5], dropout, size, bn_keys)


def efficientnet_v2(variant):
    stages, dropout, size = V2_VARIANTS[variant]
    what = f"EfficientNetV2-{variant.upper()} (FusedMBConv and MBConv blocks, SiLU, stochastic depth; " \
           "batch norm eps 0.001)"
    return efficientnet(f"efficientnet_v2_{variant}", what, stages, 1280, dropout, size, dict(eps=0.001))


def networks():
    """Every EfficientNet model file: (name, text)."""
    return [efficientnet_v1(i) for i in range(8)] + [efficientnet_v2(v) for v in ("s", "m", "l")]
