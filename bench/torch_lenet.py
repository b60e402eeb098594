#!/usr/bin/python3
"""torch_lenet.py - the PyTorch peer of `dptrain train --model lenet`.

The network, initialisation, loss and update of d2l 12.5 (the PyTorch
column): conv 3x3 -> 20, ReLU, avg-pool 2/2, conv 5x5 -> 50, ReLU, avg-pool
2/2, linear 800 -> 128, ReLU, linear 128 -> 10, weights N(0, 0.01^2), biases
zero, summed cross-entropy, `p -= lr * grad / batch_size`. Data are read
from the same IDX .gz files into memory once; each epoch is a fresh random
permutation, batches of B with the last short batch kept, as dptrain does.

Prints one line per epoch: "epoch E: loss L, train acc A, test acc T, S sec/epoch",
where S is the training steps only (evaluation excluded), like dptrain.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    x = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


def lenet(X, params):
    h = F.avg_pool2d(F.relu(F.conv2d(X, params[0], params[1])), 2, 2)
    h = F.avg_pool2d(F.relu(F.conv2d(h, params[2], params[3])), 2, 2)
    h = h.reshape(h.shape[0], -1)
    h = F.relu(torch.mm(h, params[4]) + params[5])
    return torch.mm(h, params[6]) + params[7]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train_x, train_y = load(args.data, "train")
    test_x, test_y = load(args.data, "t10k")
    scale = 0.01
    params = [torch.randn(20, 1, 3, 3) * scale, torch.zeros(20),
              torch.randn(50, 20, 5, 5) * scale, torch.zeros(50),
              torch.randn(800, 128) * scale, torch.zeros(128),
              torch.randn(128, 10) * scale, torch.zeros(10)]
    for p in params:
        p.requires_grad_()
    B = args.batch_size
    for epoch in range(args.epochs):
        order = torch.randperm(train_x.shape[0])
        loss_sum, correct = 0.0, 0
        start = time.perf_counter()
        for i in range(0, train_x.shape[0], B):
            idx = order[i:i + B]
            X, y = train_x[idx], train_y[idx]
            y_hat = lenet(X, params)
            l = F.cross_entropy(y_hat, y, reduction="none").sum()
            l.backward()
            with torch.no_grad():
                for p in params:
                    p -= args.lr * p.grad / X.shape[0]
                    p.grad.zero_()
            loss_sum += l.item()
            correct += (y_hat.argmax(1) == y).sum().item()
        sec = time.perf_counter() - start
        with torch.no_grad():
            test_correct = sum((lenet(test_x[i:i + 1000], params).argmax(1) == test_y[i:i + 1000]).sum().item()
                               for i in range(0, test_x.shape[0], 1000))
        n = train_x.shape[0]
        print(f"epoch {epoch + 1}: loss {loss_sum / n:.4f}, train acc {correct / n:.3f}, "
              f"test acc {test_correct / test_x.shape[0]:.3f}, {sec:.2f} sec/epoch", flush=True)


if __name__ == "__main__":
    sys.exit(main())
