#!/usr/bin/env python3
"""make_imagenet_models.py - writes models/NAME-imagenet.cfg for NAME in
resnet18, resnet34, resnet50, resnet101, resnet152, resnext50_32x4d,
resnext101_32x8d, wide_resnet50_2, wide_resnet101_2, mobilenet_v2,
mobilenet_v3_large and mobilenet_v3_small, (tools/imagenet_models_convnext.py)
convnext_tiny, convnext_small, convnext_base and convnext_large, (tools/
imagenet_models_efficientnet.py, at their weights' image sizes)
efficientnet_b0 to efficientnet_b7 and efficientnet_v2_s, _m and _l, RegNetX and RegNetY
(regnet_x_400mf ... regnet_x_32gf, regnet_y_400mf ... regnet_y_32gf:
tools/imagenet_models_regnet.py), and densenet121, densenet161,
densenet169 and densenet201 (tools/imagenet_models_densenet.py), and
squeezenet1_0 and squeezenet1_1 (tools/imagenet_models_squeezenet.py):
torchvision's networks (0.14's torchvision.models of those names, 1000
classes, 3x224x224 inputs) as dptrain model files, every
layer named as torchvision names its module, so that a checkpoint's tensors
are torchvision's state_dict keys (without num_batches_tracked).

The files are committed; this script is how they were made (re-running it
writes the same bytes). It needs no PyTorch: the layouts below are
torchvision's source read, and tests/torchvision_check.py checks the files
against torchvision itself (parameter names, shapes, logits and gradients).

Run: python3 tools/make_imagenet_models.py [models_dir]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import imagenet_models_convnext  # noqa: E402
import imagenet_models_densenet  # noqa: E402
import imagenet_models_regnet  # noqa: E402
import imagenet_models_squeezenet  # noqa: E402


def block(kind, **keys):
    lines = [f"[{kind}]"]
    for key, value in keys.items():
        lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def conv(name, filters, size, stride=1, pad=0, groups=1, label=None):
    keys = dict(name=name, filters=filters, size=size)
    if stride != 1:
        keys["stride"] = stride
    if pad:
        keys["pad"] = pad
    if groups != 1:
        keys["groups"] = groups
    keys["bias"] = 0
    if label:
        keys["label"] = label
    return block("conv", **keys)


def bn(name, label=None, **keys):
    return block("batchnorm", name=name, **keys, **({"label": label} if label else {}))


def net(name, init_note):
    return (f"# {init_note}\n"
            + block("net", name=name, channels=3, height=224, width=224, init="kaiming_fan_out"))


HEADER = """# {file}: torchvision 0.14's {what} for 3x224x224 images, 1000 classes
# (written by tools/make_imagenet_models.py; docs/models.md). Layer names are
# torchvision's module names, so checkpoint tensors are its state_dict keys.
"""


BLOCKS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


def resnet(depth, groups=1, width_per_group=64, arch=None, what=None):
    """torchvision's ResNet family: resnet{depth}, and with another
    bottleneck width (torchvision's width = planes * width_per_group / 64 *
    groups) ResNeXt (groups of 3x3 convolutions) and Wide ResNet (twice the
    width inside each bottleneck)."""
    basic = depth in (18, 34)
    blocks = BLOCKS[depth]
    expansion = 1 if basic else 4
    name = f"{arch or f'resnet{depth}'}-imagenet"
    what = what or f"ResNet-{depth}"
    out = [HEADER.format(file=name + ".cfg", what=f"{what} ({'basic' if basic else 'bottleneck'} blocks"
                         + ("" if basic else ", v1.5: stride on the 3x3") + ")")]
    out.append(net(name, "convolutions: kaiming_normal_(fan_out, relu) as torchvision; fc: PyTorch's default"))
    out.append("\n" + conv("conv1", 64, 7, stride=2, pad=3) + "\n" + bn("bn1") + "\n" + block("relu") + "\n"
               + block("maxpool", size=3, stride=2, pad=1, label="stem"))
    inplanes, previous = 64, "stem"
    for stage, (planes, count) in enumerate(zip([64, 128, 256, 512], blocks), start=1):
        for i in range(count):
            stride = 2 if stage > 1 and i == 0 else 1
            prefix = f"layer{stage}.{i}"
            downsample = stride != 1 or inplanes != planes * expansion
            out.append(f"\n# {prefix}\n")
            if basic:
                layers = [conv(f"{prefix}.conv1", planes, 3, stride=stride, pad=1), bn(f"{prefix}.bn1"), block("relu"),
                          conv(f"{prefix}.conv2", planes, 3, pad=1)]
                last_bn = f"{prefix}.bn2"
            else:
                width = planes * width_per_group // 64 * groups
                layers = [conv(f"{prefix}.conv1", width, 1), bn(f"{prefix}.bn1"), block("relu"),
                          conv(f"{prefix}.conv2", width, 3, stride=stride, pad=1, groups=groups), bn(f"{prefix}.bn2"),
                          block("relu"), conv(f"{prefix}.conv3", planes * expansion, 1)]
                last_bn = f"{prefix}.bn3"
            if downsample:
                layers += [bn(last_bn, label=f"{prefix}.main"), block("route", **{"from": previous}),
                           conv(f"{prefix}.downsample.0", planes * expansion, 1, stride=stride),
                           bn(f"{prefix}.downsample.1"),
                           block("residual", **{"from": f"{prefix}.main", "relu": 1, "label": prefix})]
            else:
                layers += [bn(last_bn), block("residual", **{"from": previous, "relu": 1, "label": prefix})]
            out.append("\n".join(layers))
            inplanes, previous = planes * expansion, prefix
    out.append("\n# head\n" + block("global_avgpool") + "\n" + block("flatten") + "\n"
               + block("linear", name="fc", out=1000, init="torch"))
    return name, "".join(out)


def mobilenet_v2():
    name = "mobilenet_v2-imagenet"
    out = [HEADER.format(file=name + ".cfg", what="MobileNetV2 (width 1.0: inverted residuals, depthwise 3x3, ReLU6)")]
    out.append(net(name, "convolutions: kaiming_normal_(fan_out) as torchvision; classifier: N(0, 0.01^2), bias 0"))
    out.append("\n" + conv("features.0.0", 32, 3, stride=2, pad=1) + "\n" + bn("features.0.1") + "\n"
               + block("relu6", label="features.0"))
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
    inp, index = 32, 1
    for t, c, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = inp * t
            prefix = f"features.{index}"
            residual = stride == 1 and inp == c
            layers, k = [], 0
            if t != 1:  # expand: 1x1 conv, bn, relu6
                layers += [conv(f"{prefix}.conv.0.0", hidden, 1), bn(f"{prefix}.conv.0.1"), block("relu6")]
                k = 1
            layers += [conv(f"{prefix}.conv.{k}.0", hidden, 3, stride=stride, pad=1, groups=hidden),
                       bn(f"{prefix}.conv.{k}.1"), block("relu6"), conv(f"{prefix}.conv.{k + 1}", c, 1)]
            if residual:
                layers += [bn(f"{prefix}.conv.{k + 2}"),
                           block("residual", **{"from": f"features.{index - 1}", "label": prefix})]
            else:
                layers += [bn(f"{prefix}.conv.{k + 2}", label=prefix)]
            out.append(f"\n# {prefix}: expand {t}, {inp} -> {c}, stride {stride}{', residual' if residual else ''}\n")
            out.append("\n".join(layers))
            inp, index = c, index + 1
    out.append(f"\n# features.{index}\n" + conv(f"features.{index}.0", 1280, 1) + "\n" + bn(f"features.{index}.1")
               + "\n" + block("relu6"))
    out.append("\n# head\n" + block("global_avgpool") + "\n" + block("flatten") + "\n" + block("dropout", p=0.2)
               + "\n" + block("linear", name="classifier.1", out=1000, init="normal", init_scale=0.01))
    return name, "".join(out)


def make_divisible(v, divisor=8):
    """torchvision's _make_divisible: v rounded to a multiple of divisor,
    never below 90% of v."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


# torchvision 0.14's _mobilenet_v3_conf (width 1.0, no dilation): input, kernel,
# expanded, output channels, squeeze-excitation, activation (hardswish or relu), stride
V3_LARGE = [(16, 3, 16, 16, 0, "relu", 1), (16, 3, 64, 24, 0, "relu", 2), (24, 3, 72, 24, 0, "relu", 1),
            (24, 5, 72, 40, 1, "relu", 2), (40, 5, 120, 40, 1, "relu", 1), (40, 5, 120, 40, 1, "relu", 1),
            (40, 3, 240, 80, 0, "hardswish", 2), (80, 3, 200, 80, 0, "hardswish", 1),
            (80, 3, 184, 80, 0, "hardswish", 1), (80, 3, 184, 80, 0, "hardswish", 1),
            (80, 3, 480, 112, 1, "hardswish", 1), (112, 3, 672, 112, 1, "hardswish", 1),
            (112, 5, 672, 160, 1, "hardswish", 2), (160, 5, 960, 160, 1, "hardswish", 1),
            (160, 5, 960, 160, 1, "hardswish", 1)]
V3_SMALL = [(16, 3, 16, 16, 1, "relu", 2), (16, 3, 72, 24, 0, "relu", 2), (24, 3, 88, 24, 0, "relu", 1),
            (24, 5, 96, 40, 1, "hardswish", 2), (40, 5, 240, 40, 1, "hardswish", 1),
            (40, 5, 240, 40, 1, "hardswish", 1), (40, 5, 120, 48, 1, "hardswish", 1),
            (48, 5, 144, 48, 1, "hardswish", 1), (48, 5, 288, 96, 1, "hardswish", 2),
            (96, 5, 576, 96, 1, "hardswish", 1), (96, 5, 576, 96, 1, "hardswish", 1)]

V3_BN = dict(eps=0.001, momentum=0.01)  # torchvision's partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)


def v3_conv_bn(prefix, filters, size, activation, stride=1, groups=1, label=None):
    """torchvision's Conv2dNormActivation: conv (no bias), batch norm, activation."""
    layers = [conv(f"{prefix}.0", filters, size, stride=stride, pad=(size - 1) // 2, groups=groups),
              bn(f"{prefix}.1", label=None if activation else label, **V3_BN)]
    if activation:
        layers.append(block(activation, **({"label": label} if label else {})))
    return layers


def squeeze_excitation(prefix, channels, scaled):
    """torchvision's SqueezeExcitation (scale_activation Hardsigmoid): the
    channel scale of output `scaled` from its average, scaled * it."""
    squeeze = make_divisible(channels // 4)
    return [block("global_avgpool"),
            block("conv", name=f"{prefix}.fc1", filters=squeeze, size=1, activation="relu"),
            block("conv", name=f"{prefix}.fc2", filters=channels, size=1, activation="hardsigmoid"),
            block("scale_channels", **{"from": scaled})]


def mobilenet_v3(arch, setting, last_channel):
    name = f"mobilenet_v3_{arch}-imagenet"
    out = [HEADER.format(file=name + ".cfg", what=f"MobileNetV3-{arch.capitalize()} (width 1.0: inverted "
                         "residuals, squeeze-excitation, hardswish; batch norm eps 0.001, momentum 0.01)")]
    out.append(net(name, "convolutions: kaiming_normal_(fan_out) as torchvision (biases 0); "
                   "classifier: N(0, 0.01^2), bias 0"))
    out.append("\n" + "\n".join(v3_conv_bn("features.0", 16, 3, "hardswish", stride=2, label="features.0")))
    for index, (inp, kernel, expanded, c, se, act, stride) in enumerate(setting, start=1):
        prefix = f"features.{index}.block"
        residual = stride == 1 and inp == c
        layers, j = [], 0
        if expanded != inp:  # expand: 1x1 conv, bn, activation
            layers += v3_conv_bn(f"{prefix}.0", expanded, 1, act)
            j = 1
        dw_label = f"features.{index}.depthwise" if se else None
        layers += v3_conv_bn(f"{prefix}.{j}", expanded, kernel, act, stride=stride, groups=expanded, label=dw_label)
        if se:
            layers += squeeze_excitation(f"{prefix}.{j + 1}", expanded, dw_label)
            j += 1
        project = v3_conv_bn(f"{prefix}.{j + 1}", c, 1, None, label=None if residual else f"features.{index}")
        layers += project
        if residual:
            layers.append(block("residual", **{"from": f"features.{index - 1}", "label": f"features.{index}"}))
        out.append(f"\n# features.{index}: {inp} -> {expanded} -> {c}, {kernel}x{kernel}, stride {stride}, {act}"
                   f"{', squeeze-excitation' if se else ''}{', residual' if residual else ''}\n")
        out.append("\n".join(layers))
    index = len(setting) + 1
    out.append(f"\n# features.{index}\n" + "\n".join(v3_conv_bn(f"features.{index}", 6 * setting[-1][3], 1,
                                                                  "hardswish")))
    out.append("\n# head\n" + block("global_avgpool") + "\n" + block("flatten") + "\n"
               + block("linear", name="classifier.0", out=last_channel, activation="hardswish", init="normal",
                       init_scale=0.01)
               + "\n" + block("dropout", p=0.2) + "\n"
               + block("linear", name="classifier.3", out=1000, init="normal", init_scale=0.01))
    return name, "".join(out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "models")
    networks = [resnet(18), resnet(34), resnet(50), resnet(101), resnet(152),
                resnet(50, 32, 4, "resnext50_32x4d", "ResNeXt-50 32x4d"),
                resnet(101, 32, 8, "resnext101_32x8d", "ResNeXt-101 32x8d"),
                resnet(50, 1, 128, "wide_resnet50_2", "Wide ResNet-50-2"),
                resnet(101, 1, 128, "wide_resnet101_2", "Wide ResNet-101-2"), mobilenet_v2(),
                mobilenet_v3("large", V3_LARGE, 1280), mobilenet_v3("small", V3_SMALL, 1024)]
    networks += imagenet_models_convnext.networks(block, HEADER)
    import imagenet_models_efficientnet  # its own module; it imports this one's helpers
    networks += imagenet_models_efficientnet.networks()
    networks += [imagenet_models_regnet.regnet(arch, (block, conv, bn, net, HEADER))
                 for arch in imagenet_models_regnet.REGNET if arch != "regnet_y_128gf"]
    networks += [imagenet_models_densenet.densenet(arch, (block, conv, bn, HEADER))
                 for arch in imagenet_models_densenet.DENSENET]
    networks += [imagenet_models_squeezenet.squeezenet(arch, (block, HEADER))
                 for arch in imagenet_models_squeezenet.SQUEEZENET]
    for name, text in networks:
        path = os.path.join(out_dir, name + ".cfg")
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {os.path.normpath(path)}: {text.count(chr(10))} lines")


if __name__ == "__main__":
    main()
