#!/usr/bin/python3
"""torch_lenet_cuda.py - the PyTorch CUDA peer of `dptrain train --model lenet
--devices cuda:0` for bench/gpu_vs_pytorch.sh.

d2l 12.5's LeNet (torch_lenet.py's network, initialisation N(0, 0.01^2),
summed cross-entropy, p -= lr * grad / batch_size), FP32 with TF32 off, the
whole data set on the GPU (uploaded once, as dptrain does), a random
permutation per epoch, batches of B with the last short batch kept, one
torch.cuda.synchronize() per epoch (the book's timing). --variant eager,
channels_last, graph or compile (torch_variants_cuda.py) says how the step
runs, --precision fp32 or bf16 (autocast) in what. --device cpu and --limit N (the first N training images) are for
gpu_check.sh's rehearsal on a machine without a GPU.

Prints one line per epoch: "epoch E: loss L, train acc A, test acc T, S sec/epoch"
(S: the training steps only, as dptrain's epoch_sec), then one line with the
device's name and the peak GPU memory. Epoch 1 includes warm-up (cuDNN's
benchmark, compiling, the graph's capture); the caller takes the later epochs.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_lenet import load, lenet  # noqa: E402  (the same network and reader)
import torch_variants_cuda as variants  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variant", choices=variants.VARIANTS, default="eager")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--precision", choices=variants.PRECISIONS, default="fp32")
    args = ap.parse_args()

    dev = torch.device(args.device)
    fmt = variants.setup(args.variant, dev)
    sync = variants.sync_of(dev)
    torch.manual_seed(args.seed)
    train_x, train_y = (t[:args.limit or None].to(dev) for t in load(args.data, "train"))
    train_x = train_x.contiguous(memory_format=fmt)
    test_x, test_y = (t.to(dev) for t in load(args.data, "t10k"))
    scale = 0.01
    params = [torch.randn(20, 1, 3, 3) * scale, torch.zeros(20),
              torch.randn(50, 20, 5, 5) * scale, torch.zeros(50),
              torch.randn(800, 128) * scale, torch.zeros(128),
              torch.randn(128, 10) * scale, torch.zeros(10)]
    params = [(p.contiguous(memory_format=fmt) if p.dim() == 4 else p).to(dev).requires_grad_() for p in params]
    net = torch.compile(lenet) if args.variant == "compile" else lenet
    B = args.batch_size
    n = train_x.shape[0]
    loss_sum = torch.zeros((), device=dev)
    correct = torch.zeros((), device=dev, dtype=torch.long)

    def step(X, y):
        with variants.autocast(dev, args.precision):
            y_hat = net(X, params)
            l = F.cross_entropy(y_hat, y, reduction="sum")
        grads = torch.autograd.grad(l, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(g, alpha=args.lr / X.shape[0])
            loss_sum.add_(l.detach())
            correct.add_((y_hat.argmax(1) == y).sum())

    graph = None
    if args.variant == "graph" and n >= B:
        static_x = torch.empty((B,) + tuple(train_x.shape[1:]), device=dev).contiguous(memory_format=fmt)
        static_y = torch.zeros(B, dtype=torch.long, device=dev)
        static_x.copy_(train_x[:B])
        static_y.copy_(train_y[:B])
        graph = variants.capture(step, (static_x, static_y), params + [loss_sum, correct])
    for epoch in range(args.epochs):
        order = torch.randperm(n, device=dev)
        loss_sum.zero_()
        correct.zero_()
        sync()
        start = time.perf_counter()
        for i in range(0, n, B):
            idx = order[i:i + B]
            if graph is not None and idx.shape[0] == B:
                static_x.copy_(train_x[idx])
                static_y.copy_(train_y[idx])
                graph.replay()
            else:
                step(train_x[idx], train_y[idx])
        sync()
        sec = time.perf_counter() - start
        with torch.no_grad():
            test_correct = sum((lenet(test_x[i:i + 1000], params).argmax(1) == test_y[i:i + 1000]).sum().item()
                               for i in range(0, test_x.shape[0], 1000))
        print(f"epoch {epoch + 1}: loss {loss_sum.item() / n:.4f}, train acc {correct.item() / n:.3f}, "
              f"test acc {test_correct / test_x.shape[0]:.3f}, {sec:.4f} sec/epoch", flush=True)
    print(variants.report(dev), flush=True)


if __name__ == "__main__":
    sys.exit(main())
