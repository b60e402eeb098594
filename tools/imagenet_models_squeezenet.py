"""imagenet_models_squeezenet.py - torchvision 0.14's SqueezeNet 1.0 and 1.1
(squeezenet1_0, squeezenet1_1) as dptrain model files, for
tools/make_imagenet_models.py (which imports it and writes
models/squeezenet1_*-imagenet.cfg).

torchvision's SqueezeNet: features.0 (7x7/2 conv to 96 channels in 1.0,
3x3/2 to 64 in 1.1), ReLU, 3x3/2 max pools with ceil_mode=True, and Fire
modules: a 1x1 squeeze conv + ReLU, then a 1x1 (expand1x1) and a 3x3
(expand3x3, pad 1) conv of it, each + ReLU, concatenated on channels
(expand1x1's first: a [concat] from the expand1x1 output). The classifier:
Dropout(0.5), a 1x1 conv to the classes (classifier.1: the head, no linear
layer), ReLU, global average pooling, flatten. Initialisation as
torchvision's: convolutions kaiming_uniform_ with its defaults
(U(+-sqrt(6 / fan_in)): init = kaiming_uniform), the final conv N(0, 0.01^2);
biases 0.
"""

# torchvision 0.14's SqueezeNet features: ("conv", filters, size) for features.0, "pool", or
# (squeeze, expand1x1, expand3x3) for a Fire module; one entry per index of features
SQUEEZENET = {
    "squeezenet1_0": [("conv", 96, 7), "relu", "pool", (16, 64, 64), (16, 64, 64), (32, 128, 128), "pool",
                      (32, 128, 128), (48, 192, 192), (48, 192, 192), (64, 256, 256), "pool", (64, 256, 256)],
    "squeezenet1_1": [("conv", 64, 3), "relu", "pool", (16, 64, 64), (16, 64, 64), "pool", (32, 128, 128),
                      (32, 128, 128), "pool", (48, 192, 192), (48, 192, 192), (64, 256, 256), (64, 256, 256)],
}


def fire(prefix, squeeze, expand1x1, expand3x3, block):
    """torchvision's Fire: squeeze (1x1) + ReLU, then cat([relu(expand1x1), relu(expand3x3)], 1)."""
    return [block("conv", name=f"{prefix}.squeeze", filters=squeeze, size=1, activation="relu",
                  label=f"{prefix}.squeeze"),
            block("conv", name=f"{prefix}.expand1x1", filters=expand1x1, size=1, activation="relu",
                  label=f"{prefix}.expand1x1"),
            block("route", **{"from": f"{prefix}.squeeze"}),
            block("conv", name=f"{prefix}.expand3x3", filters=expand3x3, size=3, pad=1, activation="relu"),
            block("concat", **{"from": f"{prefix}.expand1x1", "label": prefix})]


def squeezenet(arch, helpers):
    """models/ARCH-imagenet.cfg's text; helpers: make_imagenet_models's (block, HEADER)."""
    block, header = helpers
    name = f"{arch}-imagenet"
    version = arch[len("squeezenet"):].replace("_", ".")
    out = [header.format(file=name + ".cfg", what=f"SqueezeNet {version} (Fire modules; 3x3/2 max pools with "
                         "ceil_mode; a 1x1 conv head, no linear layer)")]
    out.append("# convolutions: kaiming_uniform_ (U(+-sqrt(6 / fan_in))) as torchvision's SqueezeNet; the final conv "
               "N(0, 0.01^2); biases 0\n"
               + block("net", name=name, channels=3, height=224, width=224, init="kaiming_uniform"))
    channels = 3
    for index, layer in enumerate(SQUEEZENET[arch]):
        prefix = f"features.{index}"
        if layer == "relu":
            out.append(block("relu"))
        elif layer == "pool":
            out.append(f"\n# {prefix}\n" + block("maxpool", size=3, stride=2, ceil_mode=1))
        elif layer[0] == "conv":
            _, filters, size = layer
            out.append(f"\n# {prefix}\n" + block("conv", name=prefix, filters=filters, size=size, stride=2))
            channels = filters
        else:
            squeeze, e1, e3 = layer
            out.append(f"\n# {prefix}: Fire, {channels} -> {squeeze} -> {e1} + {e3} channels\n")
            out.append("\n".join(fire(prefix, squeeze, e1, e3, block)))
            channels = e1 + e3
    out.append("\n# head: dropout, the final conv to the classes, ReLU, average pooling\n" + block("dropout", p=0.5)
               + "\n" + block("conv", name="classifier.1", filters=1000, size=1, activation="relu", init="normal",
                              init_scale=0.01)
               + "\n" + block("global_avgpool") + "\n" + block("flatten"))
    return name, "".join(out)
