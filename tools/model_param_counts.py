#!/usr/bin/env python3
"""model_param_counts.py - builds the PyTorch equivalents of models/alexnet.cfg,
models/resnet18.cfg and the twenty-seven models/*-imagenet.cfg (torchvision 0.14's
resnet18, resnet34, resnet50, resnet101, resnet152, resnext50_32x4d,
resnext101_32x8d, wide_resnet50_2, wide_resnet101_2, mobilenet_v2,
mobilenet_v3_large, mobilenet_v3_small, convnext_tiny, convnext_small,
convnext_base and convnext_large themselves, 1000 classes, 3x224x224 inputs;
efficientnet_b0 to _b7 and efficientnet_v2_s, _m, _l, run at 224 too;
and the RegNetX and RegNetY models/regnet_*-imagenet.cfg: regnet_x_400mf ...
regnet_x_32gf, regnet_y_400mf ... regnet_y_32gf; and densenet121, densenet161,
densenet169, densenet201; and squeezenet1_0, squeezenet1_1) and prints their parameter counts, the numbers
tests/test_model_file.c asserts.

resnet18 is d2l's (13.6, "Concise Implementation for Multiple GPUs"):
d2l.Residual blocks, 1 input channel, 10 classes. alexnet is the 28x28
AlexNet-style network of models/alexnet.cfg. Both modules come from
tools/make_graph_fixture.py, which writes the same counts into
tests/fixtures/network/counts.bin for tests/test_graph.c. For each model it prints the
trainable parameters (sum of p.numel() over parameters()), the batch-norm
running statistics (running_mean + running_var; num_batches_tracked is not
counted: dptrain has no such buffer), and with --names every state_dict entry.

Run: /usr/bin/python3 tools/model_param_counts.py [--names]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the PyTorch modules are defined once, where the test fixtures are written
from make_graph_fixture import alexnet, resnet18  # noqa: E402


def report(name, net, input_shape=(1, 28, 28)):
    trainable = sum(p.numel() for p in net.parameters())
    running = sum(b.numel() for n, b in net.named_buffers() if n.endswith(("running_mean", "running_var")))
    out = net(torch.zeros(2, *input_shape))
    print(f"{name}: {trainable} trainable parameters, {running} running statistics, output {tuple(out.shape)}")
    if "--names" in sys.argv:
        for key, value in net.state_dict().items():
            if not key.endswith("num_batches_tracked"):
                print(f"  {key} {tuple(value.shape)}")


if __name__ == "__main__":
    torch.manual_seed(0)
    report("alexnet", alexnet().eval())
    report("resnet18", resnet18(10, 1).eval())
    import torchvision
    for name in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "resnext101_32x8d",
                 "wide_resnet50_2", "wide_resnet101_2", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small",
                 "convnext_tiny", "convnext_small", "convnext_base", "convnext_large",
                 "regnet_y_400mf", "regnet_y_800mf", "regnet_y_1_6gf", "regnet_y_3_2gf", "regnet_y_8gf",
                 "regnet_y_16gf", "regnet_y_32gf", "regnet_x_400mf", "regnet_x_800mf", "regnet_x_1_6gf",
                 "regnet_x_3_2gf", "regnet_x_8gf", "regnet_x_16gf", "regnet_x_32gf",
                 "densenet121", "densenet161", "densenet169", "densenet201", "squeezenet1_0", "squeezenet1_1"):
        net = getattr(torchvision.models, name)()
        entries = sum(1 for key in net.state_dict() if not key.endswith("num_batches_tracked"))
        report(f"{name}-imagenet (torchvision {torchvision.__version__}, {entries} tensors)", net.eval(),
               (3, 224, 224))
    # EfficientNet B0 to B7, V2 S, M, L (their files' inputs are their weights' crop sizes, 224 to 600; the
    # counts do not depend on the size, so the forward here runs at 224)
    for name in [f"efficientnet_b{k}" for k in range(8)] + [f"efficientnet_v2_{v}" for v in "sml"]:
        net = getattr(torchvision.models, name)()
        entries = sum(1 for key in net.state_dict() if not key.endswith("num_batches_tracked"))
        report(f"{name}-imagenet (torchvision {torchvision.__version__}, {entries} tensors)", net.eval(),
               (3, 224, 224))
