#!/usr/bin/python3
"""torchvision_check.py - the Python half of tests/cli_torchvision.sh:
torchvision 0.14's networks (Debian's python3-torchvision, randomly
initialised: nothing here needs pretrained weights) against dptrain's
models/*-imagenet.cfg with the same weights.

  torchvision_check.py make DIR NAME...
      for each NAME (resnet18, resnet34, resnet50, mobilenet_v2,
      mobilenet_v3_large, mobilenet_v3_small, convnext_tiny): the
      torchvision model with seeded random weights and batch-norm
      parameters and statistics (build()), saved as DIR/NAME.pth
      (torch.save of the state_dict); 2 random 224x224 RGB images as
      DIR/NAME-K.png and as the normalised inputs x = (pixel / 255 - mean) /
      std (torchvision's ImageNet mean and std: what the import writes as
      data.normalize) in DIR/NAME-x.npy (for tools/check_onnx.py); and the
      reference DIR/NAME-ref.npz: torchvision's logits of those inputs
      (float32, inference). For the networks of GRAD_SIZES also: 2 random
      images of that size with random labels, DIR/NAME-input.safetensors
      (for tests/torchvision_step), the model file's copy at that size
      with dropout and drop path (stochastic depth) p = 0, as in the
      reference, DIR/NAME-small.cfg, and in the reference the
      logits, loss and parameter gradients of the mean cross-entropy in
      inference mode and in training mode (batch statistics), and the
      running statistics after the training forward, computed by
      torchvision in float64 from the float32 weights and inputs
      (depthwise convolutions by their taps: depthwise_by_taps); for the
      ILL_CONDITIONED networks PyTorch's own float32 training gradients.
  torchvision_check.py structure NAME...
      for each NAME (resnet101, resnet152, resnext101_32x8d,
      wide_resnet50_2, wide_resnet101_2: the deeper and wider networks of
      the families whose arithmetic make and compare check), `dptrain
      inspect --model NAME-imagenet`'s tensor table against torchvision's
      state_dict: names, order, shapes, trainable or buffer.
  torchvision_check.py attributes NAME...
      for each NAME (the EfficientNets), what `structure` cannot see, from
      the model file's text against torchvision's modules: convolutions'
      strides, padding, groups, biases; batch norms' eps and momentum;
      dropout and stochastic depth probabilities; SiLU and sigmoid counts;
      the input size against the default weights' crop size.
  torchvision_check.py compare DIR NAME...
      DIR/NAME-predict.jsonl (`dptrain predict --json --logits` of the
      PNGs) and DIR/NAME-out.safetensors (tests/torchvision_step's) against
      the reference: every tensor within TOL (1e-4) relative to its largest
      |value| (a gradient: at least a thousandth of the network's largest);
      ILL_CONDITIONED's training gradients as a whole (below). One line per
      quantity with the worst difference, "NAME: ok" or "NAME: FAILED:
      what"; exit 1 on any failure.
"""
import json
import os
import re
import struct
import sys

import numpy as np

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
BATCH = 2
# the networks whose gradients are checked, at this input size (any size from
# 32 fits them; MobileNetV2's training-mode forward is better conditioned at
# 128: 1e-5 between float32 and float64 PyTorch, 9e-5 at 64); ResNet-34's
# blocks are ResNet-18's, its logits are checked at 224 only
GRAD_SIZES = {"resnet18": 64, "resnet50": 64, "resnext50_32x4d": 64, "mobilenet_v2": 128, "mobilenet_v3_large": 64,
              "mobilenet_v3_small": 64, "convnext_tiny": 64, "efficientnet_b0": 64}
TOL = 1e-4
# training-mode gradients that float32 cannot give within TOL of float64 at
# this batch: measured with PyTorch itself, 6e-5 (ResNet-50), 1.9e-3
# (ResNeXt-50 32x4d; dptrain's 2.0e-3), 2e-3 to 3e-2 (MobileNetV2), 3.4e-5
# (MobileNetV3-Large; dptrain's 3.4e-5), 2.2e-5 (MobileNetV3-Small;
# dptrain's 3.6e-5) and 4.2e-5 (EfficientNet-B0; dptrain's 3.5e-5: one
# tensor 1.7e-4 from float64, block features.1.0's projection batch norm's
# bias, which the next block's batch norm cancels) relative L2 distance, up to 0.2 in one tensor (batch norm's
# batch statistics over 2 images; MobileNetV2's linear bottlenecks feed a
# batch norm into a 1x1 conv into a batch norm, whose backward cancels; a
# ReLU6 input on the other side of 0 or 6 moves a depthwise channel's
# gradient by percents). Their check: the whole gradient within this
# relative L2 distance of float64's, per network at about 15x PyTorch
# float32's own distance (a wrong formula is off by order 1); inference-mode
# gradients and training-mode logits, loss and statistics still within TOL.
ILL_CONDITIONED_TOL = {"resnet50": 1e-3, "resnext50_32x4d": 0.03, "mobilenet_v2": 0.05, "mobilenet_v3_large": 5e-4,
                       "mobilenet_v3_small": 3.5e-4, "efficientnet_b0": 6e-4}
# RegNetX and RegNetY (tests/cli_torchvision_regnet.sh): the smallest of each fully
GRAD_SIZES.update({"regnet_y_400mf": 64, "regnet_x_400mf": 64})
# DenseNet-121 (tests/cli_torchvision_densenet.sh)
GRAD_SIZES.update({"densenet121": 64})
ILL_CONDITIONED_TOL.update({"densenet121": 0.015})  # dptrain 2.4e-3, PyTorch float32 1.1e-3
# SqueezeNet 1.0 and 1.1 (tests/cli_torchvision_squeezenet.sh): sizes where a ceil_mode max pool keeps a partial
# window (1.0 at 64: 14 -> 7, floor 6; 1.1 at 66: 29 -> 15, floor 14; at 64 all of 1.1's pools fit exactly)
GRAD_SIZES.update({"squeezenet1_0": 64, "squeezenet1_1": 66})
ILL_CONDITIONED = tuple(ILL_CONDITIONED_TOL)


def write_safetensors(path, arrays):
    header, offset = {}, 0
    for name, a in arrays:
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + 4 * a.size]}
        offset += 4 * a.size
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, a in arrays:
            f.write(np.ascontiguousarray(a, "<f4").tobytes())


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + end], "<f4").reshape(e["shape"])
    return out


def build(name, seed):
    """torchvision's network with seeded random weights, its batch norms'
    affine parameters and statistics random too: weights U(0.5, 1.5) (the
    last batch norm of each residual branch U(0.1, 0.3): deep networks
    condition better so, as with torchvision's zero_init_residual; and
    MobileNetV2's and V3's others U(1, 4), so that ReLU6 clips and
    hardswish's inputs reach its three pieces), biases N(0, 0.1^2),
    running means N(0, 0.1^2), running variances U(0.5, 1.5)."""
    import torch
    import torchvision
    torch.manual_seed(seed)
    net = getattr(torchvision.models, name)()
    gen = torch.Generator().manual_seed(seed + 1)
    if name.startswith("convnext"):
        return randomize_convnext(net, gen)
    if name == "mobilenet_v2":
        last = {id(block.conv[-1]) for block in net.features[1:18]}
    elif name.startswith("mobilenet_v3"):  # each inverted residual's projection batch norm
        last = {id(block.block[-1][1]) for block in net.features[1:-1]}
    elif name.startswith("efficientnet"):  # each MBConv's projection batch norm
        last = {id(block.block[-1][1]) for stage in net.features[1:-1] for block in stage}
    elif name.startswith("regnet"):  # each ResBottleneckBlock's f.c batch norm
        last = {id(block.f.c[1]) for stage in net.trunk_output for block in stage}
    elif name.startswith("densenet"):  # no residual branch
        last = set()
    elif name.startswith("squeezenet"):  # no batch norm: random conv biases (torchvision's are 0)
        with torch.no_grad():
            for m in net.modules():
                if isinstance(m, torch.nn.Conv2d):
                    m.bias.copy_(0.1 * torch.randn(m.out_channels, generator=gen))
        return net
    else:
        last = {id(getattr(block, "bn3", None) or block.bn2) for stage in (net.layer1, net.layer2, net.layer3,
                                                                        net.layer4) for block in stage}
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                c = m.num_features
                lo, hi = (0.1, 0.3) if id(m) in last else (1.0, 4.0) if name.startswith("mobilenet") else (0.5, 1.5)
                m.weight.copy_(lo + (hi - lo) * torch.rand(c, generator=gen))
                m.bias.copy_(0.1 * torch.randn(c, generator=gen))
                m.running_mean.copy_(0.1 * torch.randn(c, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(c, generator=gen))
    return net


def randomize_convnext(net, gen):
    """ConvNeXt (no batch norm): its layer norms' weights U(0.5, 1.5) and
    biases N(0, 0.1^2), and its layer scales U(0.2, 0.6) instead of 1e-6
    (which would make every block the identity but for 1e-6 and the test
    blind to them); convolutions and linear layers keep torchvision's
    trunc_normal_(std 0.02) from the seed, their biases N(0, 0.02^2)."""
    import torch
    with torch.no_grad():
        for module_name, m in net.named_modules():
            if isinstance(m, torch.nn.LayerNorm):
                c = m.normalized_shape[0]
                m.weight.copy_(0.5 + torch.rand(c, generator=gen))
                m.bias.copy_(0.1 * torch.randn(c, generator=gen))
            elif isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)) and m.bias is not None:
                m.bias.copy_(0.02 * torch.randn(m.bias.shape, generator=gen))
            if hasattr(m, "layer_scale"):
                m.layer_scale.copy_(0.2 + 0.4 * torch.rand(m.layer_scale.shape, generator=gen))
    return net


def depthwise_by_taps(conv):
    """conv's forward (a depthwise nn.Conv2d) as the sum of its kernel's taps,
    each a strided slice of the padded input times one weight per channel:
    PyTorch's own float64 grouped convolution takes seconds per layer on
    the CPU (a product per group); this is the same arithmetic, fast."""
    import torch.nn.functional as F

    def forward(x):
        (kh, kw), (sh, sw), (ph, pw) = conv.kernel_size, conv.stride, conv.padding
        xp = F.pad(x, (pw, pw, ph, ph))
        oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
        y = 0
        for i in range(kh):
            for j in range(kw):
                tap = xp[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
                y = y + tap * conv.weight[:, 0, i, j].view(1, -1, 1, 1)
        return y if conv.bias is None else y + conv.bias.view(1, -1, 1, 1)
    return forward


def passes(net, x, labels, dtype, modes=("eval", "train")):
    """{MODE}.{logits,loss,grad.NAME} and train.running.NAME, as numpy
    float64, and how many ReLU6 inputs were above 6 (of how many)."""
    import copy

    import torch
    out = {}
    clipped = {}
    for mode in modes:
        m = copy.deepcopy(net).to(dtype)
        m.train(mode == "train")
        for module in m.modules():
            if (dtype == torch.float64 and isinstance(module, torch.nn.Conv2d) and module.groups > 1
                    and module.groups == module.in_channels == module.out_channels and module.dilation == (1, 1)):
                module.forward = depthwise_by_taps(module)
        for module in m.modules():
            if isinstance(module, torch.nn.Dropout) or type(module).__name__ == "StochasticDepth":
                module.p = 0.0  # the model file's copy has dropout and drop path p = 0 too
        hits = [0, 0]

        def count(module, inputs):  # before the (in-place) ReLU6 runs
            hits[0] += int((inputs[0] > 6).sum())
            hits[1] += inputs[0].numel()
        hooks = [mod.register_forward_pre_hook(count) for mod in m.modules() if isinstance(mod, torch.nn.ReLU6)]
        logits = m(torch.from_numpy(x).to(dtype))
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels))
        loss.backward()
        for h in hooks:
            h.remove()
        clipped[mode] = hits
        out[f"{mode}.logits"] = logits.detach().double().numpy()
        out[f"{mode}.loss"] = np.array([loss.item()])
        for pname, p in m.named_parameters():
            out[f"{mode}.grad.{pname}"] = p.grad.double().numpy()
        if mode == "train":
            for bname, b in m.named_buffers():
                if bname.endswith(("running_mean", "running_var")):
                    out[f"train.running.{bname}"] = b.double().numpy()
    return out, clipped


def images(directory, name, rng, size, save_png):
    """BATCH random RGB images: the normalised inputs (N, 3, size, size) and labels."""
    from PIL import Image
    pixels = rng.integers(0, 256, (BATCH, size, size, 3), dtype=np.uint8)
    x = np.empty((BATCH, 3, size, size), np.float32)
    for i in range(BATCH):
        if save_png:
            Image.fromarray(pixels[i]).save(os.path.join(directory, f"{name}-{i}.png"))
        x[i] = ((pixels[i].astype(np.float32) / np.float32(255) - MEAN) / STD).transpose(2, 0, 1)
    return x, rng.integers(0, 1000, BATCH)


def make(directory, names):
    import torch
    torch.set_num_threads(2)
    models = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
    for k, name in enumerate(names):
        with open(os.path.join(models, f"{name}-imagenet.cfg")) as f:
            text = f.read()
        net = build(name, 100 + k)
        torch.save(net.state_dict(), os.path.join(directory, f"{name}.pth"))
        rng = np.random.default_rng(200 + k)
        x, labels = images(directory, name, rng, 224, True)
        np.save(os.path.join(directory, f"{name}-x.npy"), x)
        with torch.no_grad():  # torchvision's logits at 224 (float32, inference)
            logits224 = net.eval()(torch.from_numpy(x)).double().numpy()
        if name not in GRAD_SIZES:
            np.savez(os.path.join(directory, f"{name}-ref.npz"), logits224=logits224)
            print(f"{name}: made weights, {BATCH} images, torchvision's logits")
            continue
        size = GRAD_SIZES[name]
        # the gradient check's copy of the model file: its input size, dropout off (as in the reference)
        small = text.replace("height = 224\nwidth = 224\n", f"height = {size}\nwidth = {size}\n")
        with open(os.path.join(directory, f"{name}-small.cfg"), "w") as f:
            small = re.sub(r"\[drop_path\]\np = [0-9.e-]+\n", "[drop_path]\np = 0\n", small)  # stochastic depth off
            f.write(re.sub(r"\[dropout\]\np = [0-9.]+\n", "[dropout]\np = 0\n", small))
        xs, labels = images(directory, name, rng, size, False)
        write_safetensors(os.path.join(directory, f"{name}-input.safetensors"),
                          [("x", xs), ("labels", labels.astype(np.float32))])
        ref, clipped = passes(net, xs, labels, torch.float64)
        # PyTorch's own float32 training gradients, where they are far from float64's
        f32 = passes(net, xs, labels, torch.float32, ("train",))[0] if name in ILL_CONDITIONED else {}
        np.savez(os.path.join(directory, f"{name}-ref.npz"), logits224=logits224, **ref,
                 **{"f32." + key: v for key, v in f32.items() if ".grad." in key})
        note = "".join(f", relu6 inputs above 6 in {mode}: {h[0]} of {h[1]}" for mode, h in clipped.items() if h[1])
        if name == "mobilenet_v2" and not all(h[0] > 0 for h in clipped.values()):
            sys.exit(f"{name}: ReLU6 never clips ({clipped}): the comparison would not test it")
        print(f"{name}: made weights, {BATCH} images, torchvision's logits, the float64 reference at "
              f"{size}x{size}{note}")


def compare(directory, names):
    status = 0
    for name in names:
        ref = dict(np.load(os.path.join(directory, f"{name}-ref.npz")))
        out = read_safetensors(os.path.join(directory, f"{name}-out.safetensors")) if name in GRAD_SIZES else {}
        with open(os.path.join(directory, f"{name}-predict.jsonl")) as f:
            out["logits224"] = np.array([json.loads(line)["logits"] for line in f])
        failures = []
        keys = [k for k in ref if not k.startswith("f32.")]
        only = [k for k in keys if k not in out] + [k for k in out if k not in ref]
        if only:
            failures.append(f"tensors {only[:3]} in only one of dptrain's and torchvision's outputs")
        keys = [k for k in keys if k in out]
        # a gradient's scale: its tensor's largest |value|, at least 1e-3 of the
        # network's largest (some are 0 but for rounding: a batch norm's bias
        # whose output another batch norm normalises in training mode)
        floor = {mode: 1e-3 * max([float(np.abs(ref[k]).max()) for k in keys if k.startswith(mode + ".grad.")] + [0])
                 for mode in ("eval", "train")}
        groups = {}
        for key in keys:
            got = out[key].reshape(ref[key].shape).astype(np.float64)
            diff = float(np.abs(got - ref[key]).max())
            scale = float(np.abs(ref[key]).max())
            if ".grad." in key:
                scale = max(scale, floor[key.split(".")[0]])
            rel = diff / scale if scale > 0 else diff
            kind = "predict.logits (224x224)" if key == "logits224" else ".".join(key.split(".")[:2])
            g = groups.setdefault(kind, [0.0, "", 0])
            g[2] += 1
            if rel >= g[0]:
                g[0], g[1] = rel, key
            loose = key.startswith("train.grad.") and name in ILL_CONDITIONED
            if not loose and not rel <= TOL:
                failures.append(f"{key}: max |diff| {diff:.3g} of {scale:.3g}")
        for kind, (rel, key, count) in groups.items():
            print(f"  {name} {kind}: {count} tensors, worst relative difference {rel:.2e} ({key})")
        if name in ILL_CONDITIONED:  # the training gradients, as a whole, against PyTorch's own float32 error
            grads = [k for k in keys if k.startswith("train.grad.")]
            norm = np.sqrt(sum((ref[k] ** 2).sum() for k in grads))
            ours = np.sqrt(sum(((out[k].reshape(ref[k].shape) - ref[k]) ** 2).sum() for k in grads)) / norm
            theirs = np.sqrt(sum(((ref["f32." + k] - ref[k]) ** 2).sum() for k in grads)) / norm
            print(f"  {name} train.grad: relative L2 distance from float64 {ours:.2e}, PyTorch float32's {theirs:.2e}")
            if not ours <= ILL_CONDITIONED_TOL[name]:
                failures.append(f"training gradients {ours:.3g} from float64 (PyTorch float32's: {theirs:.3g})")
        if failures:
            print(f"{name}: FAILED: {'; '.join(failures[:4])}")
            status = 1
        else:
            print(f"{name}: ok")
    return status


def structure(names):
    """Each network's tensor table as `dptrain inspect --model NAME-imagenet`
    prints it (DPTRAIN_BIN) against torchvision's state_dict: the same
    names in the same order, the same shapes, parameters trainable and
    running statistics buffers. (torch's random initialisations are
    skipped: only the shapes count.)"""
    import subprocess

    import torch
    import torchvision
    for init in ("kaiming_normal_", "kaiming_uniform_", "normal_", "uniform_", "constant_", "zeros_", "ones_",
                 "trunc_normal_"):
        setattr(torch.nn.init, init, lambda tensor, *args, **kwargs: tensor)
    status = 0
    for name in names:
        net = getattr(torchvision.models, name)()
        trainable = {n for n, _ in net.named_parameters()}
        want = [f"{key} {list(t.shape)} {'trainable' if key in trainable else 'buffer'}"
                for key, t in net.state_dict().items() if not key.endswith("num_batches_tracked")]
        run = subprocess.run([os.environ["DPTRAIN_BIN"], "inspect", "--model", f"{name}-imagenet"],
                             capture_output=True, text=True)
        got = [line.strip() for line in run.stdout.splitlines()[1:]]
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        if run.returncode != 0 or got != want:
            status = 1
            print(f"{name}: FAILED: {len(got)} tensors, torchvision {len(want)}; the first that differs: "
                  f"{got[first] if first < len(got) else '(none)'} against "
                  f"{want[first] if first < len(want) else '(none)'} {run.stderr.strip()}")
        else:
            print(f"{name}: ok ({len(want)} tensors, {sum(p.numel() for p in net.parameters())} trainable "
                  f"parameters: torchvision's names, order and shapes)")
    return status


def cfg_blocks(path):
    """A model file's blocks: [(type, {key: value})], comments dropped."""
    blocks = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.startswith("["):
                blocks.append((line[1:-1], {}))
            elif "=" in line:
                key, value = (part.strip() for part in line.split("=", 1))
                blocks[-1][1][key] = value
    return blocks


def attributes(names):
    """What `structure` cannot see, from models/NAME-imagenet.cfg's text
    against torchvision's modules: every convolution's kernel, stride,
    padding, groups and bias; every batch norm's eps and momentum; the
    dropout and stochastic depth probabilities in order (the latter of the
    blocks that add their input back); how many SiLU and sigmoid
    activations; and [net]'s size against the default weights' crop size."""
    import torch
    import torchvision
    for init in ("kaiming_normal_", "kaiming_uniform_", "normal_", "uniform_", "constant_", "zeros_", "ones_"):
        setattr(torch.nn.init, init, lambda tensor, *args, **kwargs: tensor)
    models = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
    status = 0
    for name in names:
        net = getattr(torchvision.models, name)()
        blocks = cfg_blocks(os.path.join(models, f"{name}-imagenet.cfg"))
        want, got, want_p, got_p = [], [], [], []  # the probabilities apart: torchvision's blocks precede their layers
        for mname, m in net.named_modules():
            if isinstance(m, torch.nn.Conv2d):
                want.append(f"conv {mname} k{m.kernel_size[0]} s{m.stride[0]} p{m.padding[0]} g{m.groups} "
                            f"b{int(m.bias is not None)}")
            elif isinstance(m, torch.nn.BatchNorm2d):
                want.append(f"bn {mname} eps {m.eps:g} momentum {m.momentum:g}")
            elif isinstance(m, torch.nn.Dropout):
                want_p.append(f"dropout {m.p:g}")
            elif getattr(m, "use_res_connect", False) and hasattr(m, "stochastic_depth"):
                want_p.append(f"drop_path {m.stochastic_depth.p:.6g}")
        silu = sum(isinstance(m, torch.nn.SiLU) for m in net.modules())
        sigmoid = sum(isinstance(m, torch.nn.Sigmoid) for m in net.modules())
        weights = torchvision.models.get_model_weights(name).DEFAULT
        want.append(f"silu {silu} sigmoid {sigmoid} size {weights.transforms().crop_size[0]}")
        acts = {"silu": 0, "sigmoid": 0}
        for kind, keys in blocks:
            if kind == "conv":
                got.append(f"conv {keys['name']} k{keys['size']} s{keys.get('stride', 1)} p{keys.get('pad', 0)} "
                           f"g{keys.get('groups', 1)} b{keys.get('bias', 1)}")
            elif kind == "batchnorm":
                got.append(f"bn {keys['name']} eps {float(keys.get('eps', 1e-5)):g} "
                           f"momentum {float(keys.get('momentum', 0.1)):g}")
            elif kind in ("dropout", "drop_path"):
                got_p.append(f"{kind} {float(keys.get('p', 0.5)):{'.6g' if kind == 'drop_path' else 'g'}}")
            if kind in acts:
                acts[kind] += 1
            if keys.get("activation") in acts:
                acts[keys["activation"]] += 1
        got.append(f"silu {acts['silu']} sigmoid {acts['sigmoid']} size {blocks[0][1]['height']}")
        want, got = want_p + want, got_p + got
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        if got != want:
            status = 1
            print(f"{name}: FAILED: {len(got)} attributes, torchvision {len(want)}; the first that differs: "
                  f"{got[first] if first < len(got) else '(none)'} against {want[first] if first < len(want) else '(none)'}")
        else:
            print(f"{name}: ok ({want[-1]}; {len(want) - 1} convolutions, batch norms, dropout and stochastic depth "
                  "probabilities as torchvision's)")
    return status


def main(argv):
    if len(argv) >= 3 and argv[1] == "structure":
        return structure(argv[2:])
    if len(argv) >= 3 and argv[1] == "attributes":
        return attributes(argv[2:])
    if len(argv) >= 4 and argv[1] == "make":
        make(argv[2], argv[3:])
        return 0
    if len(argv) >= 4 and argv[1] == "compare":
        return compare(argv[2], argv[3:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
