"""imagenet_models_densenet.py - torchvision 0.14's DenseNet-121, -161, -169
and -201 (densenet121 ... densenet201) as dptrain model files, for
tools/make_imagenet_models.py (which imports it and writes
models/densenet*-imagenet.cfg).

torchvision's DenseNet-BC: features.conv0 (7x7/2), norm0, relu0, pool0
(3x3/2 max pool); four dense blocks, whose dense layer i reads the
concatenation of the block's input and the i - 1 layers' outputs before
it (norm1, relu1, 1x1 conv1 to bn_size x growth channels, norm2, relu2,
3x3 conv2 to growth channels; drop_rate 0), written as a [concat] of the
running concatenation and the layer's new channels; a transition after
each block but the last (norm, relu, 1x1 conv to half the channels, 2x2/2
average pool); norm5, a ReLU, global average pooling and the linear
classifier. Initialisation as torchvision's: convolutions kaiming_normal_
with its defaults (N(0, 2 / fan_in): init = kaiming_fan_in), the
classifier PyTorch's default weights with zero bias (torch_zero_bias).
"""

# torchvision 0.14's densenet* builders: growth_rate, block_config, num_init_features (bn_size 4)
DENSENET = {
    "densenet121": (32, (6, 12, 24, 16), 64),
    "densenet161": (48, (6, 12, 36, 24), 96),
    "densenet169": (32, (6, 12, 32, 32), 64),
    "densenet201": (32, (6, 12, 48, 32), 64),
}
BN_SIZE = 4


def densenet(arch, helpers):
    """models/ARCH-imagenet.cfg's text; helpers: make_imagenet_models's
    (block, conv, bn, HEADER)."""
    block, conv, bn, header = helpers
    growth, blocks, features = DENSENET[arch]
    name = f"{arch}-imagenet"
    out = [header.format(file=name + ".cfg", what=f"DenseNet-{arch[8:]} (growth rate {growth}, dense blocks of "
                         f"{', '.join(map(str, blocks))} layers, {features} initial features)")]
    out.append("# convolutions: kaiming_normal_ (N(0, 2 / fan_in)) as torchvision's DenseNet; classifier: "
               "PyTorch's default weights, bias 0\n"
               + block("net", name=name, channels=3, height=224, width=224, init="kaiming_fan_in"))
    out.append("\n" + conv("features.conv0", features, 7, stride=2, pad=3) + "\n" + bn("features.norm0") + "\n"
               + block("relu") + "\n" + block("maxpool", size=3, stride=2, pad=1, label="features.pool0"))
    previous = "features.pool0"
    for b, count in enumerate(blocks, start=1):
        for i in range(1, count + 1):
            prefix = f"features.denseblock{b}.denselayer{i}"
            out.append(f"\n# {prefix}: {features} -> {features + growth} channels\n")
            out.append("\n".join([bn(f"{prefix}.norm1"), block("relu"), conv(f"{prefix}.conv1", BN_SIZE * growth, 1),
                                  bn(f"{prefix}.norm2"), block("relu"), conv(f"{prefix}.conv2", growth, 3, pad=1),
                                  block("concat", **{"from": previous, "label": prefix})]))
            features, previous = features + growth, prefix
        if b < len(blocks):
            prefix = f"features.transition{b}"
            out.append(f"\n# {prefix}: {features} -> {features // 2} channels, half the height and width\n")
            out.append("\n".join([bn(f"{prefix}.norm"), block("relu"), conv(f"{prefix}.conv", features // 2, 1),
                                  block("avgpool", size=2, stride=2, label=prefix)]))
            features, previous = features // 2, prefix
    out.append("\n# head\n" + bn("features.norm5") + "\n" + block("relu") + "\n" + block("global_avgpool") + "\n"
               + block("flatten") + "\n" + block("linear", name="classifier", out=1000, init="torch_zero_bias"))
    return name, "".join(out)
