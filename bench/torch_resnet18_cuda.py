#!/usr/bin/python3
"""torch_resnet18_cuda.py - PyTorch's images per second for d2l 13.6's
ResNet-18 on Fashion-MNIST (tools/make_graph_fixture.py's resnet18, the
network of models/resnet18.cfg) on one GPU, for bench/gpu_vs_pytorch.sh:
batch 256, SGD lr 0.05, FP32 with TF32 off, the first `--limit` training
images on the GPU, one epoch after one warm-up epoch, one synchronize per
epoch. Prints "resnet18: N images/sec". --device cpu is for gpu_check.sh's
rehearsal on a machine without a GPU.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--limit", type=int, default=12800)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    x, y = load(args.data, "train")
    x, y = x[:args.limit].to(dev), y[:args.limit].to(dev)
    net = resnet18(10, 1).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    B = args.batch_size
    for epoch in range(2):  # the first is the warm-up
        sync()
        start = time.perf_counter()
        for i in range(0, x.shape[0], B):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x[i:i + B]), y[i:i + B])
            loss.backward()
            opt.step()
        sync()
        sec = time.perf_counter() - start
    print(f"resnet18: {x.shape[0] / sec:.0f} images/sec", flush=True)


if __name__ == "__main__":
    sys.exit(main())
