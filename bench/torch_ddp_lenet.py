#!/usr/bin/python3
"""torch_ddp_lenet.py - the PyTorch DistributedDataParallel peer of
`dptrain train --devices 2`: d2l 12.5's LeNet (same layers, N(0, 0.01^2)
weights, zero biases), gloo backend, WORLD processes with 1 thread each on
this machine. Each global batch of B examples (a shared seeded permutation
per epoch, last short batch kept) is split across the ranks as dptrain
splits it across devices; every rank's loss is its shard's summed loss / B,
and DDP sums (averages x WORLD, undone below) the gradients, so the update
is d2l's `p -= lr * grad / B`, as in dptrain.

Prints from rank 0: "epoch E: test acc A, S sec/epoch" (training steps only).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_lenet import load  # noqa: E402


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        s = 0.01
        self.conv1 = nn.Conv2d(1, 20, 3)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(800, 128)
        self.fc2 = nn.Linear(128, 10)
        for m in (self.conv1, self.conv2, self.fc1, self.fc2):
            nn.init.normal_(m.weight, std=s)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        h = F.avg_pool2d(F.relu(self.conv1(x)), 2, 2)
        h = F.avg_pool2d(F.relu(self.conv2(h)), 2, 2)
        h = F.relu(self.fc1(h.flatten(1)))
        return self.fc2(h)


def worker(rank, args):
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(args.seed)
    model = nn.parallel.DistributedDataParallel(LeNet())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * args.world)  # DDP averages: undo the / WORLD
    train_x, train_y = load(args.data, "train")
    test_x, test_y = load(args.data, "t10k")
    B, n = args.batch_size, train_x.shape[0]
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        order = torch.randperm(n, generator=g)
        dist.barrier()
        start = time.perf_counter()
        for i in range(0, n, B):
            idx = order[i:i + B]
            size = idx.shape[0]
            base, extra = divmod(size, args.world)
            lo = rank * base + min(rank, extra)
            shard = idx[lo:lo + base + (1 if rank < extra else 0)]
            loss = F.cross_entropy(model(train_x[shard]), train_y[shard], reduction="sum") / size
            opt.zero_grad()
            loss.backward()
            opt.step()
        sec = time.perf_counter() - start
        if rank == 0:
            with torch.no_grad():
                acc = sum((model.module(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
                          for i in range(0, test_x.shape[0], 1000)) / test_x.shape[0]
            print(f"epoch {epoch + 1}: test acc {acc:.3f}, {sec:.2f} sec/epoch", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--port", type=int, default=29517)
    args = ap.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
