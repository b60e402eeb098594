#!/usr/bin/python3
"""torch_resnet18_cuda.py - PyTorch's images per second for d2l 13.6's
ResNet-18 on Fashion-MNIST (tools/make_graph_fixture.py's resnet18, the
network of models/resnet18.cfg) on one GPU, for bench/gpu_vs_pytorch.sh:
batch 256 (--batch-size), SGD lr 0.05, FP32 with TF32 off, the first
`--limit` training images on the GPU, one epoch after one warm-up epoch, one
synchronize per epoch; --variant eager, channels_last, graph or compile
(torch_variants_cuda.py) says how the step runs, --precision fp32 or bf16
(autocast) in what. Prints "resnet18: N
images/sec", then a line with the device's name and the peak GPU memory.
--device cpu is for gpu_check.sh's rehearsal on a machine without a GPU.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tools"))
from torch_lenet import load  # noqa: E402
from make_graph_fixture import resnet18  # noqa: E402
import torch_variants_cuda as variants  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--limit", type=int, default=12800)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--variant", choices=variants.VARIANTS, default="eager")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--precision", choices=variants.PRECISIONS, default="fp32")
    args = ap.parse_args()
    dev = torch.device(args.device)
    fmt = variants.setup(args.variant, dev)
    sync = variants.sync_of(dev)
    x, y = load(args.data, "train")
    x, y = x[:args.limit].to(dev).contiguous(memory_format=fmt), y[:args.limit].to(dev)
    net = resnet18(10, 1).to(dev).to(memory_format=fmt)
    model = torch.compile(net) if args.variant == "compile" else net
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    B = args.batch_size

    def step(X, Y):
        opt.zero_grad(set_to_none=True)
        with variants.autocast(dev, args.precision):
            loss = F.cross_entropy(model(X), Y)
        loss.backward()
        opt.step()

    graph = None
    if args.variant == "graph" and x.shape[0] >= B:
        static_x, static_y = x[:B].clone(memory_format=fmt), y[:B].clone()
        graph = variants.capture(step, (static_x, static_y), list(net.parameters()) + list(net.buffers()))
    for epoch in range(2):  # the first is the warm-up
        sync()
        start = time.perf_counter()
        for i in range(0, x.shape[0], B):
            if graph is not None and i + B <= x.shape[0]:
                static_x.copy_(x[i:i + B])
                static_y.copy_(y[i:i + B])
                graph.replay()
            else:
                step(x[i:i + B], y[i:i + B])
        sync()
        sec = time.perf_counter() - start
    print(f"resnet18: {x.shape[0] / sec:.0f} images/sec", flush=True)
    print(variants.report(dev), flush=True)


if __name__ == "__main__":
    sys.exit(main())
