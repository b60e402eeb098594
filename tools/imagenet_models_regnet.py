"""imagenet_models_regnet.py - torchvision 0.14's RegNetX and RegNetY
(regnet_x_400mf ... regnet_x_32gf, regnet_y_400mf ... regnet_y_32gf) as
dptrain model files, for tools/make_imagenet_models.py (which imports it
and writes models/regnet_*-imagenet.cfg).

The stage widths, depths and group widths are torchvision's
BlockParams.from_init_params, computed here without PyTorch (in doubles:
tools/model_param_counts.py and tests/cli_torchvision_regnet.sh check the
files against torchvision itself); the layers are torchvision's
ResBottleneckBlock: proj (a 1x1 conv and batch norm where the shape
changes), f.a (1x1), f.b (3x3, groups of group width), on RegNetY f.se
(SqueezeExcitation: average, 1x1 conv, ReLU, 1x1 conv, sigmoid, times
f.b's output), f.c (1x1, no activation), the sum, a ReLU. proj comes first,
as in torchvision's state_dict.
"""
import math

# torchvision 0.14's regnet_* builders: depth, w_0, w_a, w_m, group_width (RegNetY: se_ratio 0.25)
REGNET = {
    "regnet_y_400mf": (16, 48, 27.89, 2.09, 8, 0.25),
    "regnet_y_800mf": (14, 56, 38.84, 2.4, 16, 0.25),
    "regnet_y_1_6gf": (27, 48, 20.71, 2.65, 24, 0.25),
    "regnet_y_3_2gf": (21, 80, 42.63, 2.66, 24, 0.25),
    "regnet_y_8gf": (17, 192, 76.82, 2.19, 56, 0.25),
    "regnet_y_16gf": (18, 200, 106.23, 2.48, 112, 0.25),
    "regnet_y_32gf": (20, 232, 115.89, 2.53, 232, 0.25),
    "regnet_y_128gf": (27, 456, 160.83, 2.52, 264, 0.25),  # not written: 644M parameters
    "regnet_x_400mf": (22, 24, 24.48, 2.54, 16, None),
    "regnet_x_800mf": (16, 56, 35.73, 2.28, 16, None),
    "regnet_x_1_6gf": (18, 80, 34.01, 2.25, 24, None),
    "regnet_x_3_2gf": (25, 88, 26.31, 2.25, 48, None),
    "regnet_x_8gf": (23, 80, 49.56, 2.88, 120, None),
    "regnet_x_16gf": (22, 216, 55.59, 2.1, 128, None),
    "regnet_x_32gf": (23, 320, 69.86, 2.0, 168, None),
}


def make_divisible(v, divisor):
    """torchvision's _make_divisible (min_value = divisor)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def block_params(depth, w_0, w_a, w_m, group_width, bottleneck_multiplier=1.0):
    """BlockParams.from_init_params: (stage widths, depths, group widths)."""
    quant = 8
    widths_cont = [i * w_a + w_0 for i in range(depth)]
    capacity = [round(math.log(w / w_0) / math.log(w_m)) for w in widths_cont]
    block_widths = [int(round(w_0 * w_m ** c / quant) * quant) for c in capacity]
    stage_widths, depths = [], []
    for w in block_widths:
        if stage_widths and stage_widths[-1] == w:
            depths[-1] += 1
        else:
            stage_widths.append(w)
            depths.append(1)
    # _adjust_widths_groups_compatibilty
    bottleneck = [int(w * bottleneck_multiplier) for w in stage_widths]
    groups = [min(group_width, w) for w in bottleneck]
    stage_widths = [int(make_divisible(w, g) / bottleneck_multiplier) for w, g in zip(bottleneck, groups)]
    return stage_widths, depths, groups


def regnet(arch, helpers):
    """models/ARCH-imagenet.cfg's text; helpers: make_imagenet_models's
    (block, conv, bn, net, HEADER)."""
    block, conv, bn, net, header = helpers
    depth, w_0, w_a, w_m, group_width, se_ratio = REGNET[arch]
    widths, depths, group_widths = block_params(depth, w_0, w_a, w_m, group_width)
    name = f"{arch}-imagenet"
    kind = "Y" if se_ratio else "X"
    flops = arch.split("_")[-1].upper().replace("_", ".")
    out = [header.format(file=name + ".cfg", what=f"RegNet{kind}-{flops} (widths {', '.join(map(str, widths))}; "
                         f"depths {', '.join(map(str, depths))}; group width {group_widths[0]}"
                         + ("; squeeze-excitation" if se_ratio else "") + ")")]
    out.append(net(name, "convolutions: N(0, 2 / fan_out) as torchvision's RegNet"
                   + (" (squeeze-excitation biases: PyTorch's default)" if se_ratio else "")
                   + "; fc: N(0, 0.01^2), bias 0"))
    out.append("\n" + conv("stem.0", 32, 3, stride=2, pad=1) + "\n" + bn("stem.1") + "\n"
               + block("relu", label="stem"))
    width_in, previous = 32, "stem"
    for stage, (width, count, gw) in enumerate(zip(widths, depths, group_widths), start=1):
        for i in range(count):
            stride = 2 if i == 0 else 1
            prefix = f"trunk_output.block{stage}.block{stage}-{i}"
            proj = width_in != width or stride != 1
            w_b = width  # bottleneck_multiplier 1.0: int(round(width * 1.0))
            layers = []
            if proj:  # torchvision's proj (registered before f): the shortcut, then the route back for f
                layers += [conv(f"{prefix}.proj.0", width, 1, stride=stride), bn(f"{prefix}.proj.1",
                                                                                 label=f"{prefix}.proj"),
                           block("route", **{"from": previous})]
            layers += [conv(f"{prefix}.f.a.0", w_b, 1), bn(f"{prefix}.f.a.1"), block("relu"),
                       conv(f"{prefix}.f.b.0", w_b, 3, stride=stride, pad=1, groups=w_b // gw),
                       bn(f"{prefix}.f.b.1")]
            if se_ratio:
                squeeze = int(round(se_ratio * width_in))
                layers += [block("relu", label=f"{prefix}.f.b"), block("global_avgpool"),
                           block("conv", name=f"{prefix}.f.se.fc1", filters=squeeze, size=1, activation="relu",
                                 init="kaiming_fan_out_torch_bias"),
                           block("conv", name=f"{prefix}.f.se.fc2", filters=w_b, size=1, activation="sigmoid",
                                 init="kaiming_fan_out_torch_bias"),
                           block("scale_channels", **{"from": f"{prefix}.f.b"})]
            else:
                layers.append(block("relu"))
            layers += [conv(f"{prefix}.f.c.0", width, 1), bn(f"{prefix}.f.c.1"),
                       block("residual", **{"from": f"{prefix}.proj" if proj else previous, "relu": 1,
                                            "label": prefix})]
            out.append(f"\n# {prefix}: {width_in} -> {width}, stride {stride}, {w_b // gw} groups"
                       + (f", squeeze {int(round(se_ratio * width_in))}" if se_ratio else "")
                       + (", projection" if proj else "") + "\n")
            out.append("\n".join(layers))
            width_in, previous = width, prefix
    out.append("\n# head\n" + block("global_avgpool") + "\n" + block("flatten") + "\n"
               + block("linear", name="fc", out=1000, init="normal", init_scale=0.01))
    return name, "".join(out)
