#!/usr/bin/python3
"""make_graph_fixture.py - PyTorch reference for layer graphs (tests/test_graph.c).

Writes into tests/fixtures/network/ (format of make_fixtures.py, op name
"network"):

graph_params.bin  the small graph GRAPH below: input x (N, 2, 8, 8), labels,
                  and every parameter and buffer under dptrain's names
graph_step.bin    one training-mode pass (batch statistics, running
                  statistics updated, dropout p = 0): the mean cross-entropy
                  "loss", "logits", and "grad.NAME" of every trainable
                  parameter
graph_eval.bin    after that pass: the running statistics "after.NAME" and
                  the evaluation-mode logits "eval_logits" (running
                  statistics, no dropout)
counts.bin        parameter counts of d2l's ResNet-18 (13.6, resnet18(10, 1))
                  and of dptrain's AlexNet as PyTorch modules:
                  "MODEL.trainable" (sum of p.numel() over parameters()),
                  "MODEL.buffers" (running_mean + running_var elements),
                  "MODEL.tensors" (state_dict entries without
                  num_batches_tracked)
resnet18_names.txt  the ResNet-18 state_dict: "name dim0 dim1 ..." per line
                  (without num_batches_tracked), for the name/shape check

PyTorch computes in float64 from the float32 values, so the reference is
exact to float32.

usage: /usr/bin/python3 tools/make_graph_fixture.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import default_attr, write_case  # noqa: E402

BATCH = 6
CLASSES = 3

# GRAPH: the layers as tests/test_graph.c builds them (outputs numbered
# from 1; 0 is the input):
#  1 conv1 4x3x3 pad 1   2 bn1   3 relu   4 conv2 4x3x3 pad 1   5 bn2
#  6 route 0   7 shortcut 4x1x1   8 residual +5, relu
#  9 conv4 4x3x3 pad 1   10 relu (not fused: 11 reads 9)   11 residual +9
# 12 sigmoid   13 up: conv_transpose 3x3x3 stride 2 pad 1 output_padding 1
# 14 max pool 2   15 conv5 3x3x3 pad 1   16 relu (fused)   17 global avg pool
# 18 flatten   19 fc1 6   20 tanh   21 dropout 0   22 bn3 (features)   23 fc2 3
SHAPES = [("conv1.weight", (4, 2, 3, 3)), ("conv1.bias", (4,)),
          ("bn1.weight", (4,)), ("bn1.bias", (4,)), ("bn1.running_mean", (4,)), ("bn1.running_var", (4,)),
          ("conv2.weight", (4, 4, 3, 3)), ("conv2.bias", (4,)),
          ("bn2.weight", (4,)), ("bn2.bias", (4,)), ("bn2.running_mean", (4,)), ("bn2.running_var", (4,)),
          ("shortcut.weight", (4, 2, 1, 1)), ("shortcut.bias", (4,)),
          ("conv4.weight", (4, 4, 3, 3)), ("conv4.bias", (4,)),
          ("up.weight", (4, 3, 3, 3)), ("up.bias", (3,)),
          ("conv5.weight", (3, 3, 3, 3)), ("conv5.bias", (3,)),
          ("fc1.weight", (6, 3)), ("fc1.bias", (6,)),
          ("bn3.weight", (6,)), ("bn3.bias", (6,)), ("bn3.running_mean", (6,)), ("bn3.running_var", (6,)),
          ("fc2.weight", (CLASSES, 6)), ("fc2.bias", (CLASSES,))]
BUFFERS = [n for n, _ in SHAPES if "running" in n]


def graph(x, p, training):
    def bn(h, name):
        return F.batch_norm(h, p[name + ".running_mean"], p[name + ".running_var"], p[name + ".weight"],
                            p[name + ".bias"], training=training, momentum=0.1, eps=1e-5)

    h = F.relu(bn(F.conv2d(x, p["conv1.weight"], p["conv1.bias"], padding=1), "bn1"))
    h5 = bn(F.conv2d(h, p["conv2.weight"], p["conv2.bias"], padding=1), "bn2")
    h7 = F.conv2d(x, p["shortcut.weight"], p["shortcut.bias"])
    h8 = F.relu(h7 + h5)
    h9 = F.conv2d(h8, p["conv4.weight"], p["conv4.bias"], padding=1)
    h = torch.sigmoid(F.relu(h9) + h9)
    h = F.conv_transpose2d(h, p["up.weight"], p["up.bias"], stride=2, padding=1, output_padding=1)
    h = F.max_pool2d(h, 2, 2)
    h = F.relu(F.conv2d(h, p["conv5.weight"], p["conv5.bias"], padding=1))
    h = F.adaptive_avg_pool2d(h, 1).flatten(1)
    h = torch.tanh(F.linear(h, p["fc1.weight"], p["fc1.bias"]))
    h = F.dropout(h, p=0.0, training=training)
    h = bn(h, "bn3")
    return F.linear(h, p["fc2.weight"], p["fc2.bias"])


def graph_params(rng):
    params = {}
    for name, shape in SHAPES:
        if name.endswith("running_var"):
            value = 1.0 + 0.5 * rng.random(shape)
        elif name.endswith("running_mean"):
            value = 0.1 * rng.standard_normal(shape)
        elif name.startswith("bn") and name.endswith("weight"):
            value = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith("bias"):
            value = 0.1 * rng.standard_normal(shape)
        else:
            fan_in = int(np.prod(shape[1:]))
            value = rng.standard_normal(shape) / np.sqrt(fan_in)
        params[name] = value.astype(np.float32)
    return params


def write_graph(out_dir):
    rng = np.random.default_rng(4321)
    params = graph_params(rng)
    x = rng.standard_normal((BATCH, 2, 8, 8)).astype(np.float32)
    labels = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    tp = {n: torch.tensor(v, dtype=torch.float64, requires_grad=n not in BUFFERS) for n, v in params.items()}
    logits = graph(torch.tensor(x, dtype=torch.float64), tp, training=True)
    loss = F.cross_entropy(logits, torch.tensor(labels, dtype=torch.int64))
    loss.backward()
    with torch.no_grad():
        eval_logits = graph(torch.tensor(x, dtype=torch.float64), tp, training=False)

    def f32(t):
        return t.detach().numpy().astype(np.float32)

    write_case(out_dir, "graph_params", "network", default_attr(),
               [("x", x), ("labels", labels)] + [(n, params[n]) for n, _ in SHAPES])
    write_case(out_dir, "graph_step", "network", default_attr(),
               [("loss", np.array([loss.item()], dtype=np.float32)), ("logits", f32(logits))] +
               [("grad." + n, f32(tp[n].grad)) for n, _ in SHAPES if n not in BUFFERS])
    write_case(out_dir, "graph_eval", "network", default_attr(),
               [("eval_logits", f32(eval_logits))] + [("after." + n, f32(tp[n])) for n in BUFFERS])
    print(f"graph: loss {loss.item():.6f}")


class Residual(nn.Module):
    """d2l's Residual (7.6)."""

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


def resnet18(num_classes, in_channels=1):
    """d2l 13.6's resnet18."""
    def resnet_block(in_channels, out_channels, num_residuals, first_block=False):
        blk = []
        for i in range(num_residuals):
            if i == 0 and not first_block:
                blk.append(Residual(in_channels, out_channels, use_1x1conv=True, strides=2))
            else:
                blk.append(Residual(out_channels, out_channels))
        return nn.Sequential(*blk)

    net = nn.Sequential(nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1), nn.BatchNorm2d(64),
                        nn.ReLU())
    net.add_module("resnet_block1", resnet_block(64, 64, 2, first_block=True))
    net.add_module("resnet_block2", resnet_block(64, 128, 2))
    net.add_module("resnet_block3", resnet_block(128, 256, 2))
    net.add_module("resnet_block4", resnet_block(256, 512, 2))
    net.add_module("global_avg_pool", nn.AdaptiveAvgPool2d((1, 1)))
    net.add_module("fc", nn.Sequential(nn.Flatten(), nn.Linear(512, num_classes)))
    return net


def alexnet():
    """dptrain's AlexNet for 28x28 (src/nn/builtin_models.c)."""
    return nn.Sequential(
        nn.Conv2d(1, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 192, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(256 * 3 * 3, 1024), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(1024, 1024), nn.ReLU(), nn.Dropout(0.5), nn.Linear(1024, 10))


def write_counts(out_dir):
    tensors = []
    for name, net in (("resnet18", resnet18(10, 1)), ("alexnet", alexnet())):
        assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
        state = {k: v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
        trainable = sum(p.numel() for p in net.parameters())
        buffers = sum(v.numel() for k, v in state.items() if "running" in k)
        tensors += [(name + ".trainable", np.array([trainable], dtype=np.int32)),
                    (name + ".buffers", np.array([buffers], dtype=np.int32)),
                    (name + ".tensors", np.array([len(state)], dtype=np.int32))]
        print(f"{name}: {trainable} trainable, {buffers} in buffers, {len(state)} tensors")
        if name == "resnet18":
            with open(os.path.join(out_dir, "resnet18_names.txt"), "w") as f:
                for k, v in state.items():
                    f.write(" ".join([k] + [str(d) for d in v.shape]) + "\n")
    write_case(out_dir, "counts", "network", default_attr(), tensors)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "fixtures", "network")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    write_graph(out_dir)
    write_counts(out_dir)


if __name__ == "__main__":
    main()
