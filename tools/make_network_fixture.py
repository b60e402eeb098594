#!/usr/bin/python3
"""make_network_fixture.py - PyTorch reference for whole built-in networks.

For each built-in model (lenet, lenet-paddle) writes
tests/fixtures/network/MODEL.bin in the format of make_fixtures.py (op name
"network"): the parameters under dptrain's names and layouts (conv weights
(OC, C, kH, kW), linear weights (OUT, IN) as torch.nn.Linear), a batch x
(N, 1, 28, 28) with labels, the mean cross-entropy loss, and the gradient of
the loss with respect to every parameter as "grad.NAME". PyTorch computes in
float64 from the float32 values, so the reference is exact to float32.

Also tests/fixtures/network/lenet-paddle-smooth.bin: the same for
lenet-paddle under torch.nn.CrossEntropyLoss(label_smoothing=0.1) (the
float32 0.1, "attr.label_smoothing"), on a batch of 7 images given as the
bytes a dataset holds ("pixels", int32 0..255; "x" = pixels x float32(1 /
255), dptrain's conversion), so that a trainer can take the batch as data.

usage: /usr/bin/python3 tools/make_network_fixture.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import default_attr, write_case  # noqa: E402

BATCH = 5


def lenet(x, p):
    h = F.avg_pool2d(F.relu(F.conv2d(x, p["conv1.weight"], p["conv1.bias"])), 2, 2)
    h = F.avg_pool2d(F.relu(F.conv2d(h, p["conv2.weight"], p["conv2.bias"])), 2, 2)
    h = F.relu(F.linear(h.flatten(1), p["fc1.weight"], p["fc1.bias"]))
    return F.linear(h, p["fc2.weight"], p["fc2.bias"])


def lenet_paddle(x, p):
    h = F.max_pool2d(F.relu(F.conv2d(x, p["conv1.weight"], p["conv1.bias"], padding=2)), 2, 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, p["conv2.weight"], p["conv2.bias"], padding=2)), 2, 2)
    return F.linear(h.flatten(1), p["fc.weight"], p["fc.bias"])


MODELS = {
    "lenet": (lenet, [("conv1.weight", (20, 1, 3, 3)), ("conv1.bias", (20,)),
                      ("conv2.weight", (50, 20, 5, 5)), ("conv2.bias", (50,)),
                      ("fc1.weight", (128, 800)), ("fc1.bias", (128,)),
                      ("fc2.weight", (10, 128)), ("fc2.bias", (10,))]),
    "lenet-paddle": (lenet_paddle, [("conv1.weight", (20, 1, 5, 5)), ("conv1.bias", (20,)),
                                    ("conv2.weight", (20, 20, 5, 5)), ("conv2.bias", (20,)),
                                    ("fc.weight", (10, 980)), ("fc.bias", (10,))]),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "fixtures", "network")
    os.makedirs(out_dir, exist_ok=True)
    for name, (forward, shapes) in MODELS.items():
        rng = np.random.default_rng(1234)
        # Scale 0.1 rather than d2l's 0.01, so every gradient is well away from 0.
        params = {n: (0.1 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes}
        x = rng.random((BATCH, 1, 28, 28)).astype(np.float32)
        labels = rng.integers(0, 10, BATCH).astype(np.int32)
        tp = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in params.items()}
        loss = F.cross_entropy(forward(torch.tensor(x, dtype=torch.float64), tp),
                               torch.tensor(labels, dtype=torch.int64))
        loss.backward()
        tensors = [("x", x), ("labels", labels)]
        tensors += [(n, params[n]) for n, _ in shapes]
        tensors.append(("loss", np.array([loss.item()], dtype=np.float32)))
        tensors += [("grad." + n, tp[n].grad.numpy().astype(np.float32)) for n, _ in shapes]
        size = write_case(out_dir, name, "network", default_attr(), tensors)
        print(f"{name}: loss {loss.item():.6f}, {size} bytes")
    smoothed_case(out_dir, "lenet-paddle-smooth", "lenet-paddle", 0.1)


def smoothed_case(out_dir, case, model, label_smoothing, batch=7):
    """The model's mean loss with label smoothing and its gradients, on a
    batch of dataset bytes."""
    forward, shapes = MODELS[model]
    rng = np.random.default_rng(4321)
    params = {n: (0.1 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes}
    pixels = rng.integers(0, 256, (batch, 1, 28, 28)).astype(np.int32)
    x = pixels.astype(np.float32) * (np.float32(1.0) / np.float32(255.0))
    labels = rng.integers(0, 10, batch).astype(np.int32)
    eps = np.float32(label_smoothing)
    tp = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in params.items()}
    loss = F.cross_entropy(forward(torch.tensor(x, dtype=torch.float64), tp),
                           torch.tensor(labels, dtype=torch.int64), label_smoothing=float(eps))
    loss.backward()
    tensors = [("x", x), ("pixels", pixels), ("labels", labels), ("attr.label_smoothing", np.array(eps))]
    tensors += [(n, params[n]) for n, _ in shapes]
    tensors.append(("loss", np.array([loss.item()], dtype=np.float32)))
    tensors += [("grad." + n, tp[n].grad.numpy().astype(np.float32)) for n, _ in shapes]
    size = write_case(out_dir, case, "network", default_attr(), tensors)
    print(f"{case}: loss {loss.item():.6f} (label smoothing {eps}), {size} bytes")


if __name__ == "__main__":
    main()
