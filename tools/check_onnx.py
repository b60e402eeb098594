#!/usr/bin/env python3
"""check_onnx.py - checks a `dptrain export --onnx` file with tools no one
here wrote, against the logits dptrain itself computed.

  check_onnx.py pngs IDX COUNT DIR
      writes the first COUNT images of an IDX image file (plain or .gz) as
      8-bit gray PNGs DIR/00000.png ... (zlib + struct only), for
      `dptrain predict --json --logits`.
  check_onnx.py subset SRC_DIR COUNT DIR [TEST_COUNT]
      writes the first COUNT training and COUNT (or TEST_COUNT) test images
      and labels of the IDX files in SRC_DIR (plain or .gz) to DIR as plain
      IDX files: a small dataset for `dptrain train --data DIR`.
  check_onnx.py check MODEL.onnx IDX COUNT LOGITS.jsonl [MODEL.onnx IDX COUNT
                LOGITS.jsonl ...] [--torch] [--no-opencv]
      (IDX may also be a .npy file of float32 (N, C, H, W) inputs, fed as
      they are: e.g. normalised colour images.)
      1. onnx (Debian's python3-onnx): checker.check_model(full_check=True)
         and strict shape inference; the inferred output is (batch, classes)
         with a symbolic batch; batch norm's running statistics are not the
         initial 0 / 1 (the checkpoint trained them).
      2. OpenCV (python3-opencv): cv2.dnn.readNetFromONNX, forward on the
         COUNT images (x = pixel / 255, float32), and on the first image
         alone (the batch dimension is dynamic).
      3. PyTorch (--torch): the network rebuilt from the ONNX graph's nodes
         and initializers with torch.nn.functional, forward on the images.
      Each runtime's logits must agree with dptrain's (LOGITS.jsonl, one
      JSON object per image in order, "logits": [...]) to 1e-4 relative to
      the largest |logit| (max |a - b| <= 1e-4 * max |dptrain's|), and the
      predicted classes must be the same. Prints one line per runtime with
      the largest difference, then "MODEL.onnx: ok" or "MODEL.onnx: FAILED:
      why"; exit status 1 on any failure. Several models are checked in one
      process (one import of onnx, OpenCV and PyTorch), each on its own: an
      error in one (a file onnx refuses, a missing op) fails that model only.
  check_onnx.py props MODEL.onnx
      the model's metadata_props as onnx reads them, one KEY=VALUE line each
      (`dptrain export` writes "classes": the class names as a JSON array).
"""
import gzip
import json
import struct
import sys
import zlib

import numpy as np


def read_idx_images(path, count):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, n, rows, cols = struct.unpack(">IIII", data[:16])
    if magic != 0x803:
        sys.exit(f"{path}: not an IDX image file (magic {magic:#x})")
    if count > n:
        sys.exit(f"{path}: has {n} images, {count} asked")
    return np.frombuffer(data, np.uint8, count * rows * cols, 16).reshape(count, rows, cols)


def write_subset(src, train_count, out_dir, test_count):
    import os
    for kind, count in (("train", train_count), ("t10k", test_count)):
        for part, header in (("images-idx3", 16), ("labels-idx1", 8)):
            name = f"{kind}-{part}-ubyte"
            path = f"{src}/{name}"
            if not os.path.exists(path):
                path += ".gz"
            with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
                data = f.read()
            item = 1
            if part.startswith("images"):
                rows, cols = struct.unpack(">II", data[8:16])
                item = rows * cols
            n = struct.unpack(">I", data[4:8])[0]
            if count > n:
                sys.exit(f"{path}: has {n} items, {count} asked")
            with open(f"{out_dir}/{name}", "wb") as f:
                f.write(data[:4] + struct.pack(">I", count) + data[8:header] + data[header:header + count * item])


def png_gray8(pixels):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    h, w = pixels.shape
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def write_pngs(idx, count, out_dir):
    for i, img in enumerate(read_idx_images(idx, count)):
        with open(f"{out_dir}/{i:05d}.png", "wb") as f:
            f.write(png_gray8(img))


def compare(name, got, want, failures):
    scale = float(np.abs(want).max())
    diff = float(np.abs(got - want).max())
    same = int((got.argmax(1) == want.argmax(1)).sum())
    ok = diff <= 1e-4 * scale and same == len(want)
    print(f"  {name}: max |diff| {diff:.3g} (max |logit| {scale:.3g}, relative {diff / scale:.2e}), "
          f"same class {same}/{len(want)} {'ok' if ok else 'FAILED'}")
    if not ok:
        failures.append(name)


def torch_forward(model, x):
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper
    values = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    values[model.graph.input[0].name] = torch.from_numpy(x)

    def attrs(node):
        out = {}
        for a in node.attribute:
            out[a.name] = list(a.ints) if a.ints else (a.f if a.type == 1 else a.i)
        return out

    def sym_pads(a, dims):
        pads = a.get("pads", [0] * 2 * dims)
        if pads[:dims] != pads[dims:]:
            raise ValueError(f"asymmetric pads {pads}")
        return pads[:dims]

    with torch.no_grad():
        for node in model.graph.node:
            ins = [values[i] for i in node.input if i]
            a = attrs(node)
            op = node.op_type
            if op in ("Conv", "ConvTranspose"):
                dims = ins[1].dim() - 2
                bias = ins[2] if len(ins) > 2 else None
                args = dict(stride=a.get("strides", [1] * dims), padding=sym_pads(a, dims),
                            dilation=a.get("dilations", [1] * dims), groups=a.get("group", 1))
                if op == "Conv":
                    y = [F.conv1d, F.conv2d, F.conv3d][dims - 1](ins[0], ins[1], bias, **args)
                else:
                    y = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][dims - 1](
                        ins[0], ins[1], bias, output_padding=a.get("output_padding", [0] * dims), **args)
            elif op in ("MaxPool", "AveragePool"):
                dims = len(a["kernel_shape"])
                args = dict(kernel_size=a["kernel_shape"], stride=a.get("strides", [1] * dims),
                            padding=sym_pads(a, dims))
                if op == "MaxPool":
                    y = [F.max_pool1d, F.max_pool2d, F.max_pool3d][dims - 1](
                        ins[0], ceil_mode=bool(a.get("ceil_mode", 0)), **args)
                else:
                    y = [F.avg_pool1d, F.avg_pool2d, F.avg_pool3d][dims - 1](
                        ins[0], count_include_pad=bool(a.get("count_include_pad", 0)), **args)
            elif op == "GlobalAveragePool":
                y = ins[0].mean(dim=tuple(range(2, ins[0].dim())), keepdim=True)
            elif op == "Gemm":
                if a.get("transB") != 1 or a.get("transA", 0) != 0:
                    raise ValueError("Gemm other than transB = 1")
                y = F.linear(ins[0], ins[1], ins[2] if len(ins) > 2 else None)
            elif op == "BatchNormalization":
                y = F.batch_norm(ins[0], ins[3], ins[4], ins[1], ins[2], training=False, eps=a["epsilon"])
            elif op == "Relu":
                y = torch.relu(ins[0])
            elif op == "Sigmoid":
                y = torch.sigmoid(ins[0])
            elif op == "Tanh":
                y = torch.tanh(ins[0])
            elif op == "Add":
                y = ins[0] + ins[1]
            elif op == "Sub":
                y = ins[0] - ins[1]
            elif op == "Mul":  # ONNX's (numpy's) broadcasting: a squeeze-excitation's (N, C, 1, 1) scale
                y = ins[0] * ins[1]
            elif op == "Div":
                y = ins[0] / ins[1]
            elif op == "Sqrt":
                y = torch.sqrt(ins[0])
            elif op == "Erf":
                y = torch.erf(ins[0])
            elif op == "ReduceMean":  # opset 13: the axes as an attribute
                y = ins[0].mean(dim=tuple(a["axes"]), keepdim=bool(a.get("keepdims", 1)))
            elif op == "HardSigmoid":
                y = torch.clamp(a.get("alpha", 0.2) * ins[0] + a.get("beta", 0.5), 0, 1)
            elif op == "Concat":  # DenseNet's torch.cat of features
                y = torch.cat(ins, a["axis"])
            elif op == "Flatten":
                y = torch.flatten(ins[0], a.get("axis", 1))
            elif op == "Identity":
                y = ins[0]
            else:
                raise ValueError(f"op {op} not handled by the PyTorch rebuild")
            values[node.output[0]] = y
    return values[model.graph.output[0].name].numpy()


def check(path, idx, count, logits_path, use_torch, use_opencv):
    import onnx
    failures = []
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    out = inferred.graph.output[0].type.tensor_type.shape.dim
    in_dims = [d.dim_value for d in inferred.graph.input[0].type.tensor_type.shape.dim[1:]]
    with open(logits_path) as f:
        want = np.array([json.loads(line)["logits"] for line in f], dtype=np.float32)
    if len(want) != count:
        sys.exit(f"{logits_path}: {len(want)} objects, expected {count}")
    classes = want.shape[1]
    shape_ok = (len(out) == 2 and out[0].dim_param == "batch" and out[1].dim_value == classes
                and len(inferred.graph.value_info) >= len(model.graph.node) - 1)
    print(f"{path}: opset {model.opset_import[0].version}, {len(model.graph.node)} nodes, "
          f"check_model(full_check) ok, inferred output ({out[0].dim_param}, {out[1].dim_value}) "
          f"{'ok' if shape_ok else 'FAILED'}")
    if not shape_ok:
        failures.append("shape inference")
    from onnx import numpy_helper
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            mean, var = inits[node.input[3]], inits[node.input[4]]
            if np.all(mean == 0) or np.all(var == 1):
                print(f"  {node.name}: running statistics untrained (mean all 0 or var all 1) FAILED")
                failures.append(node.name)
    if idx.endswith(".npy"):  # the model's inputs themselves, float32 (N, C, H, W)
        x = np.load(idx).astype(np.float32)[:count]
        if list(x.shape[1:]) != in_dims or len(x) != count:
            sys.exit(f"{path}: {idx} holds {len(x)} inputs of {list(x.shape[1:])}, the model takes {in_dims}")
    else:
        images = read_idx_images(idx, count)
        x = images.astype(np.float32)[:, None, :, :] * np.float32(1.0 / 255.0)
        if in_dims[0] != 1:
            sys.exit(f"{path}: the check feeds gray images, the model takes {in_dims[0]} channels")
    if use_opencv:
        import cv2
        net = cv2.dnn.readNetFromONNX(path)
        net.setInput(x)
        got = net.forward().reshape(count, classes)
        compare("OpenCV " + cv2.__version__, got, want, failures)
        net.setInput(x[:1])
        compare("OpenCV, batch of 1", net.forward().reshape(1, classes), want[:1], failures)
    if use_torch:
        import torch
        compare("PyTorch " + torch.__version__ + " rebuilt from the ONNX weights",
                torch_forward(model, x).reshape(count, classes), want, failures)
    if failures:
        print(f"{path}: FAILED: {', '.join(failures)}")
        return 1
    print(f"{path}: ok")
    return 0


def check_each(specs, use_torch, use_opencv):
    """check() of every (MODEL.onnx, IDX, COUNT, LOGITS.jsonl); 1 when any failed."""
    status = 0
    for path, idx, count, logits_path in specs:
        try:
            status |= check(path, idx, int(count), logits_path, use_torch, use_opencv)
        except (Exception, SystemExit) as e:  # this model fails, the others are still checked
            why = e.code if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
            print(f"{path}: FAILED: {why}")
            status = 1
    return status


def main(argv):
    if len(argv) >= 5 and argv[1] == "pngs":
        write_pngs(argv[2], int(argv[3]), argv[4])
        return 0
    if len(argv) in (5, 6) and argv[1] == "subset":
        write_subset(argv[2], int(argv[3]), argv[4], int(argv[5] if len(argv) == 6 else argv[3]))
        return 0
    if len(argv) == 3 and argv[1] == "props":
        import onnx
        for prop in onnx.load(argv[2]).metadata_props:
            print(f"{prop.key}={prop.value}")
        return 0
    if argv[1:2] == ["check"]:
        flags = [a for a in argv[2:] if a in ("--torch", "--no-opencv")]
        args = [a for a in argv[2:] if a not in flags]
        if args and len(args) % 4 == 0:
            return check_each([args[i:i + 4] for i in range(0, len(args), 4)], "--torch" in flags,
                              "--no-opencv" not in flags)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
