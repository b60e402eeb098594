#!/usr/bin/python3
"""torch_layers.py - the PyTorch side of bench/layers_vs_pytorch.sh.

Reads the same layer list as bench/layer_bench.c (bench/layers.txt) and prints
"name fwd_ms bwd_ms" per layer: medians over repetitions (at least 5, about
SECONDS per direction), forward building the autograd graph as in training,
backward computing the gradients of the input and of every parameter.

Times are the thread's CPU time (time.thread_time), as layer_bench.c measures.

usage: torch_layers.py LAYERS_FILE [SECONDS] (run with 1 thread: --threads)
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def parse(path):
    for line in open(path):
        line = line.split("#", 1)[0].split()
        if not line:
            continue
        name, op, n, c, h, w = line[0], line[1], *map(int, line[2:6])
        opts = dict(s=1, p=0, bias=1, relu=0, k=1, out=0, g=1)
        opts.update({k: int(v) for k, v in (t.split("=") for t in line[6:])})
        yield name, op, (n, c, h, w), opts


def build(op, shape, o):
    """Returns (inputs that need grads, forward function)."""
    n, c, h, w = shape
    x = torch.rand(shape) * 2 - 1
    if op == "conv":
        conv = torch.nn.Conv2d(c, o["out"], o["k"], o["s"], o["p"], bias=bool(o["bias"]), groups=o["g"])
        f = (lambda x: torch.relu(conv(x))) if o["relu"] else conv
        return [x], f
    if op in ("avg_pool", "max_pool"):
        pool = F.avg_pool2d if op == "avg_pool" else F.max_pool2d
        return [x], lambda x: pool(x, o["k"], o["s"])
    if op == "linear":
        lin = torch.nn.Linear(c * h * w, o["out"])
        return [x.reshape(n, -1)], lin
    if op == "relu":
        return [x], torch.relu
    if op == "relu6":
        return [x], F.relu6
    if op == "batch_norm":
        bn = torch.nn.BatchNorm2d(c)
        bn.train()
        return [x], bn
    if op == "batch_norm_relu6":
        bn = torch.nn.BatchNorm2d(c)
        bn.train()
        return [x], lambda x: F.relu6(bn(x))
    if op == "add_relu":
        y = torch.rand(shape) * 2 - 1
        return [x, y], lambda x, y: torch.relu(x + y)
    if op == "global_avg_pool":
        return [x], lambda x: F.adaptive_avg_pool2d(x, 1)
    raise SystemExit(f"torch_layers.py: unknown op {op}")


def time_layer(inputs, f, budget):
    fwd, bwd, spent = [], [], 0.0
    dy = None
    while len(fwd) < 5 or (spent < budget and len(fwd) < 1000):
        xs = [t.detach().requires_grad_(True) for t in inputs]
        t0 = time.thread_time()
        y = f(*xs)
        t1 = time.thread_time()
        if dy is None:
            dy = torch.rand(y.shape) * 2 - 1
        t2 = time.thread_time()
        y.backward(dy)
        t3 = time.thread_time()
        fwd.append(1e3 * (t1 - t0))
        bwd.append(1e3 * (t3 - t2))
        spent += t3 - t0
    return statistics.median(fwd), statistics.median(bwd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("layers")
    ap.add_argument("seconds", nargs="?", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    for name, op, shape, opts in parse(args.layers):
        inputs, f = build(op, shape, opts)
        fwd, bwd = time_layer(inputs, f, args.seconds)
        print(f"{name} {fwd:.4f} {bwd:.4f}", flush=True)


if __name__ == "__main__":
    main()
