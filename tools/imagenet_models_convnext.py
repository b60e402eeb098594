"""imagenet_models_convnext.py - torchvision 0.14's ConvNeXt (convnext_tiny,
convnext_small, convnext_base, convnext_large) as dptrain model files, for
tools/make_imagenet_models.py (which imports this module and writes
models/convnext_*-imagenet.cfg).

torchvision's layout (torchvision/models/convnext.py), module for module:
  features.0      stem: Conv2d(3, C1, 4, stride 4) (features.0.0) and
                  LayerNorm2d(C1, eps 1e-6) (features.0.1)
  features.1,3,5,7  stages of CNBlocks; block features.S.I:
                  block.0 depthwise Conv2d(C, C, 7, padding 3, groups C),
                  (block.1 Permute to channels-last), block.2 LayerNorm(C,
                  eps 1e-6), block.3 Linear(C, 4C), block.4 GELU, block.5
                  Linear(4C, C), (block.6 Permute back); then layer_scale
                  (C, 1, 1) times it, StochasticDepth(p, "row"), plus the
                  block's input
  features.2,4,6  downsampling: LayerNorm2d (features.S.0), Conv2d(C, 2C, 2,
                  stride 2) (features.S.1)
  classifier      AdaptiveAvgPool2d(1), LayerNorm2d (classifier.0),
                  Flatten (classifier.1), Linear (classifier.2)
In the model file the Linear layers on channels-last data are 1x1
convolutions whose weights are stored as the Linear's (weight_shape =
linear: [4C, C] and [C, 4C], torchvision's state_dict shapes), LayerNorm2d
and nn.LayerNorm over channels-last data are both [layernorm] (a layer norm
over the channels at every position), layer_scale is [layer_scale] (the
tensor features.S.I.layer_scale) and StochasticDepth is [drop_path] with
torchvision's probability for the block: stochastic_depth_prob (0.1 Tiny,
0.4 Small, 0.5 Base and Large) * block index / (blocks - 1).
Initialisation as torchvision's: trunc_normal_(std 0.02) of every Conv2d and
Linear weight (truncated at +-2, 100 standard deviations: a normal
distribution for every practical purpose; [net] init = normal, init_scale =
0.02), biases 0, layer norms weight 1 and bias 0, layer scales 1e-6.
"""

# torchvision 0.14's block settings: (channels, blocks) per stage, and stochastic_depth_prob
SETTINGS = {
    "tiny": ([(96, 3), (192, 3), (384, 9), (768, 3)], 0.1),
    "small": ([(96, 3), (192, 3), (384, 27), (768, 3)], 0.4),
    "base": ([(128, 3), (256, 3), (512, 27), (1024, 3)], 0.5),
    "large": ([(192, 3), (384, 3), (768, 27), (1536, 3)], 0.5),
}
EPS = "1e-6"
LAYER_SCALE = "1e-6"


def convnext(size, block, header):
    """(name, text) of models/convnext_SIZE-imagenet.cfg; block and header
    are make_imagenet_models.py's block() and HEADER."""
    stages, sd_prob = SETTINGS[size]
    name = f"convnext_{size}-imagenet"
    widths = ", ".join(str(c) for c, _ in stages)
    depths = ", ".join(str(n) for _, n in stages)
    out = [header.format(file=name + ".cfg", what=f"ConvNeXt-{size.capitalize()} (channels {widths}, blocks "
                         f"{depths}; layer norms eps 1e-6, GELU, layer scale 1e-6, stochastic depth {sd_prob})")]
    out.append("# convolutions and linear layers: trunc_normal_(std 0.02) as torchvision (at +-2: a normal), "
               "biases 0\n" + block("net", name=name, channels=3, height=224, width=224, init="normal",
                                    init_scale=0.02))
    first = stages[0][0]
    out.append("\n# features.0: stem (4x4 patches)\n"
               + block("conv", name="features.0.0", filters=first, size=4, stride=4) + "\n"
               + block("layernorm", name="features.0.1", eps=EPS, label="features.0"))
    total = sum(n for _, n in stages)
    block_id, previous = 0, "features.0"
    for stage, (channels, count) in enumerate(stages):
        index = 2 * stage + 1
        for i in range(count):
            prefix = f"features.{index}.{i}"
            p = sd_prob * block_id / (total - 1.0)
            out.append(f"\n# {prefix}: CNBlock({channels}), stochastic depth {p:.6g}\n" + "\n".join([
                block("conv", name=f"{prefix}.block.0", filters=channels, size=7, pad=3, groups=channels),
                block("layernorm", name=f"{prefix}.block.2", eps=EPS),
                block("conv", name=f"{prefix}.block.3", filters=4 * channels, size=1, weight_shape="linear",
                      activation="gelu"),
                block("conv", name=f"{prefix}.block.5", filters=channels, size=1, weight_shape="linear"),
                block("layer_scale", name=prefix, init=LAYER_SCALE),
                block("drop_path", p=f"{p:.9g}"),
                block("residual", **{"from": previous, "label": prefix})]))
            previous, block_id = prefix, block_id + 1
        if stage + 1 < len(stages):
            down = f"features.{index + 1}"
            out.append(f"\n# {down}: downsampling to {stages[stage + 1][0]} channels\n"
                       + block("layernorm", name=f"{down}.0", eps=EPS) + "\n"
                       + block("conv", name=f"{down}.1", filters=stages[stage + 1][0], size=2, stride=2, label=down))
            previous = down
    out.append("\n# head: avgpool, classifier.0 (LayerNorm2d), classifier.1 (Flatten), classifier.2\n"
               + block("global_avgpool") + "\n" + block("layernorm", name="classifier.0", eps=EPS) + "\n"
               + block("flatten") + "\n" + block("linear", name="classifier.2", out=1000))
    return name, "".join(out)


def networks(block, header):
    return [convnext(size, block, header) for size in ("tiny", "small", "base", "large")]
