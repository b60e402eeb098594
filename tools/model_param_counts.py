#!/usr/bin/env python3
"""model_param_counts.py - builds the PyTorch equivalents of models/alexnet.cfg
and models/resnet18.cfg and prints their parameter counts, the numbers
tests/test_model_file.c asserts.

resnet18 is d2l's (13.6, "Concise Implementation for Multiple GPUs"):
d2l.Residual blocks, 1 input channel, 10 classes. alexnet is the 28x28
AlexNet-style network of models/alexnet.cfg. For each model it prints the
trainable parameters (sum of p.numel() over parameters()), the batch-norm
running statistics (running_mean + running_var; num_batches_tracked is not
counted: dptrain has no such buffer), and with --names every state_dict entry.

Run: /usr/bin/python3 tools/model_param_counts.py [--names]
"""
import sys

import torch
from torch import nn
from torch.nn import functional as F


class Residual(nn.Module):
    """d2l.Residual (PyTorch edition)."""

    def __init__(self, input_channels, num_channels, use_1x1conv=False, strides=1):
        super().__init__()
        self.conv1 = nn.Conv2d(input_channels, num_channels, kernel_size=3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(num_channels, num_channels, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2d(input_channels, num_channels, kernel_size=1, stride=strides) if use_1x1conv else None
        self.bn1 = nn.BatchNorm2d(num_channels)
        self.bn2 = nn.BatchNorm2d(num_channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        if self.conv3:
            x = self.conv3(x)
        return F.relu(y + x)


def resnet18(num_classes=10, in_channels=1):
    """d2l 13.6's resnet18."""

    def resnet_block(in_ch, out_ch, num_residuals, first_block=False):
        blk = []
        for i in range(num_residuals):
            if i == 0 and not first_block:
                blk.append(Residual(in_ch, out_ch, use_1x1conv=True, strides=2))
            else:
                blk.append(Residual(out_ch, out_ch))
        return nn.Sequential(*blk)

    net = nn.Sequential(nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1),
                        nn.BatchNorm2d(64), nn.ReLU())
    net.add_module("resnet_block1", resnet_block(64, 64, 2, first_block=True))
    net.add_module("resnet_block2", resnet_block(64, 128, 2))
    net.add_module("resnet_block3", resnet_block(128, 256, 2))
    net.add_module("resnet_block4", resnet_block(256, 512, 2))
    net.add_module("global_avg_pool", nn.AdaptiveAvgPool2d((1, 1)))
    net.add_module("fc", nn.Sequential(nn.Flatten(), nn.Linear(512, num_classes)))
    return net


class AlexNet28(nn.Module):
    """models/alexnet.cfg: AlexNet's layout with 3x3/1/1 convs for 28x28,
    1024-wide classifier; attribute names = dptrain's parameter names."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 3, padding=1)
        self.conv2 = nn.Conv2d(64, 192, 3, padding=1)
        self.conv3 = nn.Conv2d(192, 384, 3, padding=1)
        self.conv4 = nn.Conv2d(384, 256, 3, padding=1)
        self.conv5 = nn.Conv2d(256, 256, 3, padding=1)
        self.fc1 = nn.Linear(256 * 3 * 3, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (64, 14, 14)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (192, 7, 7)
        x = F.relu(self.conv3(x))
        x = F.relu(self.conv4(x))
        x = F.max_pool2d(F.relu(self.conv5(x)), 2)  # (256, 3, 3)
        x = F.dropout(F.relu(self.fc1(torch.flatten(x, 1))), 0.5, self.training)
        x = F.dropout(F.relu(self.fc2(x)), 0.5, self.training)
        return self.fc3(x)


def report(name, net):
    trainable = sum(p.numel() for p in net.parameters())
    running = sum(b.numel() for n, b in net.named_buffers() if n.endswith(("running_mean", "running_var")))
    out = net(torch.zeros(2, 1, 28, 28))
    print(f"{name}: {trainable} trainable parameters, {running} running statistics, output {tuple(out.shape)}")
    if "--names" in sys.argv:
        for key, value in net.state_dict().items():
            if not key.endswith("num_batches_tracked"):
                print(f"  {key} {tuple(value.shape)}")


if __name__ == "__main__":
    torch.manual_seed(0)
    report("alexnet", AlexNet28().eval())
    report("resnet18", resnet18().eval())
