#!/usr/bin/python3
"""torch_resnet50_step.py - PyTorch's side of bench/resnet50_vs_pytorch.sh
(the CPU) and bench/resnet50_gpu_vs_pytorch.sh (one GPU): training steps of
torchvision's resnet50 (or mobilenet_v2), batch B of 3x224x224 random
images, SGD with momentum, the same as `dptrain train --model
models/resnet50-imagenet.cfg --optimizer momentum`.

usage: torch_resnet50_step.py [--model resnet50] [--batch 32] [--steps 3]
           [--warmup 1] [--threads 2] [--device cpu] [--variant eager]
           [--precision fp32] [--freeze-backbone]
On the CPU prints: "pytorch MODEL: B images, S steps, X ms/step (wall), Y
ms/step (CPU time of the process), Z images/s" after W warm-up steps (not
timed). With --device cuda:N the images are on the GPU, --variant (eager,
channels_last, graph: bench/torch_variants_cuda.py) says how the step runs
and --precision (fp32 without TF32, bf16 under autocast) in what; the steps
are timed between two synchronizes, and a second line gives the device's
name and its peak GPU memory. --freeze-backbone fine-tunes the head alone,
as torchvision users do and `dptrain train --freeze-backbone` does: every
parameter but the last linear layer's requires_grad_(False), the frozen
batch norms in eval mode (their running statistics), the optimizer over
the head's parameters.
"""
import argparse
import os
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_variants_cuda as variants  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--variant", choices=("eager", "channels_last", "graph"), default="eager")
    p.add_argument("--precision", choices=variants.PRECISIONS, default="fp32")
    p.add_argument("--freeze-backbone", action="store_true")
    a = p.parse_args()
    dev = torch.device(a.device)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    fmt = variants.setup(a.variant, dev) if dev.type == "cuda" else torch.contiguous_format
    sync = variants.sync_of(dev)
    net = getattr(torchvision.models, a.model)().train().to(dev).to(memory_format=fmt)
    if a.freeze_backbone:
        head = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
        for m in net.modules():
            if m is not head and isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.eval()
        for p_ in net.parameters():
            p_.requires_grad_(False)
        head.requires_grad_(True)
    opt = torch.optim.SGD([p_ for p_ in net.parameters() if p_.requires_grad], lr=0.01, momentum=0.9)
    x = torch.rand(a.batch, 3, 224, 224, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (a.batch,), device=dev)

    def step(x, y):
        opt.zero_grad(set_to_none=a.variant != "graph")
        with variants.autocast(dev, a.precision):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    run = lambda: step(x, y)  # noqa: E731
    if a.variant == "graph":
        # the momentum buffers exist after a first step: made before the capture, and kept in its state
        step(x, y)
        state = list(net.parameters()) + list(net.buffers()) + [
            s["momentum_buffer"] for s in opt.state.values() if s.get("momentum_buffer") is not None]
        graph = variants.capture(step, (x, y), state)
        run = graph.replay
    for _ in range(a.warmup):
        run()
    sync()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(a.steps):
        run()
    sync()
    wall, cpu = (time.perf_counter() - wall) / a.steps, (time.process_time() - cpu) / a.steps
    print(f"pytorch {a.model}: {a.batch} images, {a.steps} steps, {1e3 * wall:.0f} ms/step (wall), "
          f"{1e3 * cpu:.0f} ms/step (CPU time of the process), {a.batch / wall:.1f} images/s", flush=True)
    if dev.type == "cuda":
        print(variants.report(dev), flush=True)


if __name__ == "__main__":
    main()
