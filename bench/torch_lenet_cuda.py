#!/usr/bin/python3
"""torch_lenet_cuda.py - the PyTorch CUDA peer of `dptrain train --model lenet
--devices cuda:0` for bench/gpu_vs_pytorch.sh.

d2l 12.5's LeNet (torch_lenet.py's network, initialisation N(0, 0.01^2),
summed cross-entropy, p -= lr * grad / batch_size), FP32 with TF32 off, the
whole data set on the GPU (uploaded once, as dptrain does), a random
permutation per epoch, batches of B with the last short batch kept, one
torch.cuda.synchronize() per epoch (the book's timing). With --compile the
step function goes through torch.compile (reported if it runs). --device cpu
and --limit N (the first N training images) are for gpu_check.sh's
rehearsal on a machine without a GPU.

Prints one line per epoch: "epoch E: loss L, train acc A, test acc T, S sec/epoch"
(S: the training steps only, as dptrain's epoch_sec). Epoch 1 includes
warm-up (cuDNN / compile); the caller takes the later epochs.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_lenet import load, lenet  # noqa: E402  (the same network and reader)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(args.seed)
    train_x, train_y = (t[:args.limit or None].to(dev) for t in load(args.data, "train"))
    test_x, test_y = (t.to(dev) for t in load(args.data, "t10k"))
    scale = 0.01
    params = [torch.randn(20, 1, 3, 3) * scale, torch.zeros(20),
              torch.randn(50, 20, 5, 5) * scale, torch.zeros(50),
              torch.randn(800, 128) * scale, torch.zeros(128),
              torch.randn(128, 10) * scale, torch.zeros(10)]
    params = [p.to(dev).requires_grad_() for p in params]
    net = torch.compile(lenet) if args.compile else lenet
    B = args.batch_size
    n = train_x.shape[0]
    for epoch in range(args.epochs):
        order = torch.randperm(n, device=dev)
        loss_sum = torch.zeros((), device=dev)
        correct = torch.zeros((), device=dev, dtype=torch.long)
        sync()
        start = time.perf_counter()
        for i in range(0, n, B):
            idx = order[i:i + B]
            X, y = train_x[idx], train_y[idx]
            y_hat = net(X, params)
            l = F.cross_entropy(y_hat, y, reduction="sum")
            l.backward()
            with torch.no_grad():
                for p in params:
                    p -= args.lr * p.grad / X.shape[0]
                    p.grad.zero_()
                loss_sum += l.detach()
                correct += (y_hat.argmax(1) == y).sum()
        sync()
        sec = time.perf_counter() - start
        with torch.no_grad():
            test_correct = sum((lenet(test_x[i:i + 1000], params).argmax(1) == test_y[i:i + 1000]).sum().item()
                               for i in range(0, test_x.shape[0], 1000))
        print(f"epoch {epoch + 1}: loss {loss_sum.item() / n:.4f}, train acc {correct.item() / n:.3f}, "
              f"test acc {test_correct / test_x.shape[0]:.3f}, {sec:.4f} sec/epoch", flush=True)


if __name__ == "__main__":
    sys.exit(main())
