"""torch_variants_cuda.py - what bench/torch_lenet_cuda.py and
bench/torch_resnet18_cuda.py share: PyTorch's training step run its fastest
ways on one GPU, chosen by --variant:

  eager          NCHW tensors, cuDNN's default algorithm choice;
  channels_last  channels-last tensors and torch.backends.cudnn.benchmark
                 (cuDNN times its algorithms per shape: PyTorch's best eager);
  graph          as channels_last, the whole training step (forward, loss,
                 backward, optimizer step) captured once as a CUDA graph with
                 torch.cuda.graph on static input and label tensors and
                 replayed per batch; warm-up steps on a side stream before the
                 capture, as PyTorch's CUDA-graph notes say (their parameter
                 updates undone); a last short batch runs eagerly;
  compile        torch.compile (default mode) of the network.

FP32 with TF32 off in every variant; with --precision bf16 the forward and
the loss run under torch.autocast(dtype=torch.bfloat16) (PyTorch's mixed
precision: convolutions and matrix products in bf16 on the tensor cores,
FP32 weights and optimizer, no loss scaling), the peer of dptrain's
--precision bf16. graph needs a GPU; channels_last and compile also run on
the CPU (gpu_check.sh's rehearsal), where their figures mean nothing.
"""
import contextlib
import os
import sys

import torch

VARIANTS = ("eager", "channels_last", "graph", "compile")
PRECISIONS = ("fp32", "bf16")


def autocast(dev, precision):
    """The forward's context: torch.autocast to bfloat16 for bf16, nothing for fp32. Its cache of cast
    weights is off: a CUDA graph's capture must not keep casts made outside it (PyTorch's CUDA-graph notes),
    and each weight is used once per forward here, so the cache would save nothing in the other variants."""
    if precision == "bf16":
        return torch.autocast(device_type=dev.type, dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


def setup(variant, dev):
    """TF32 off; cudnn.benchmark for channels_last and graph; the memory format of the variant's tensors.
    A CUDA device that PyTorch cannot use ends the program with one line, not CUDA's lazy-init traceback."""
    if dev.type == "cuda" and not torch.cuda.is_available():
        why = "was built without CUDA" if torch.version.cuda is None else "finds no GPU"
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: no GPU for --device {dev}: PyTorch {torch.__version__} "
                         f"{why} (--device cpu runs it on the CPU, where its figures mean nothing)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if variant == "graph" and dev.type != "cuda":
        raise SystemExit("--variant graph needs a CUDA device (CUDA graphs)")
    torch.backends.cudnn.benchmark = variant in ("channels_last", "graph")
    if dev.type == "cuda":
        torch.zeros(1, device=dev)  # the caching allocator exists only after CUDA's lazy init
        torch.cuda.reset_peak_memory_stats(dev)
    return torch.channels_last if variant in ("channels_last", "graph") else torch.contiguous_format


def sync_of(dev):
    return (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)


def capture(step, static_args, state, warmup=3):
    """step(*static_args) captured as a CUDA graph after `warmup` steps on a side stream; the tensors of
    `state` (parameters, optimizer buffers, sums) are restored after the warm-up, so the warm-up trains
    nothing. Returns the graph (replay() runs one step on whatever static_args hold then)."""
    saved = [t.detach().clone() for t in state]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step(*static_args)
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():
        for t, s in zip(state, saved):
            t.copy_(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(*static_args)
    return graph


def report(dev):
    """The device's name, the peak memory PyTorch's allocator handed out to tensors
    (torch.cuda.max_memory_allocated) and the most it held from the GPU (max_memory_reserved: its cache
    included, what dptrain's figure, the memory its backend took from the GPU, compares with)."""
    if dev.type != "cuda":
        return "device: cpu; peak GPU memory: n/a (no GPU)"
    return (f"device: {torch.cuda.get_device_name(dev)}; peak GPU memory: "
            f"{torch.cuda.max_memory_allocated(dev)} bytes (reserved {torch.cuda.max_memory_reserved(dev)} bytes)")
