#!/usr/bin/python3
"""torch_resnet50_step.py - PyTorch's side of bench/resnet50_vs_pytorch.sh:
training steps of torchvision's resnet50 (or mobilenet_v2) on the CPU, batch
B of 3x224x224 random images, SGD with momentum, the same as
`dptrain train --model models/resnet50-imagenet.cfg --optimizer momentum`.

usage: torch_resnet50_step.py [--model resnet50] [--batch 32] [--steps 3]
           [--warmup 1] [--threads 2]
Prints: "pytorch MODEL: B images, S steps, X ms/step (wall), Y ms/step (CPU
time of the process), Z images/s" after W warm-up steps (not timed).
"""
import argparse
import time

import torch
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = getattr(torchvision.models, a.model)().train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(a.batch, 3, 224, 224)
    y = torch.randint(0, 1000, (a.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(a.steps):
        step()
    wall, cpu = (time.perf_counter() - wall) / a.steps, (time.process_time() - cpu) / a.steps
    print(f"pytorch {a.model}: {a.batch} images, {a.steps} steps, {1e3 * wall:.0f} ms/step (wall), "
          f"{1e3 * cpu:.0f} ms/step (CPU time of the process), {a.batch / wall:.1f} images/s")


if __name__ == "__main__":
    main()
