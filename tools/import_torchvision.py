#!/usr/bin/python3
"""import_torchvision.py - turns a PyTorch state_dict (torchvision's, timm's,
your own: `torch.save(model.state_dict(), FILE)`) into a dptrain checkpoint
of a model file's network, for `dptrain eval`, `predict`, `export` and
`inspect` (docs/training.md: pretrained weights).

usage: import_torchvision.py STATE_DICT.pth MODEL.cfg|NAME OUT.safetensors
           [--normalize MEAN,STD|imagenet|none] [--classes imagenet|FILE|none]
           [--transform "resize S[, bicubic]"|"squash[, bicubic]"|none] [--dptrain PATH]

The model's parameter table (names, shapes, in order) is the one `dptrain
inspect --model MODEL.cfg` prints; every tensor of the table must be in the
state_dict under the same name with the same shape (the models/*-imagenet.cfg
files name their layers as torchvision names its modules), and every tensor
of the state_dict must be in the table, except batch norm's
`num_batches_tracked` counters: dptrain has no such buffer (the count only
matters to PyTorch's batch norm with momentum=None; the files use 0.1), so
they are checked to be integer scalars of a batch norm in the model and
dropped. Tensors of another floating type are converted to float32. The
first missing, extra or misshaped tensor is named in one line on stderr
(with how many more there are), the exit status is 1, and nothing is written.

The output is a weights-only checkpoint (include/dptrain/checkpoint.h): the
tensors in the model's order and the metadata format, format_version,
weights_only = 1, model (MODEL.cfg as given; a name such as
resnet50-imagenet is looked up as --model is), model_text (the model file's
text, when MODEL is a file: eval, predict and export then need it nowhere),
model_fingerprint,
data.normalize (how predict scales the images: --normalize, default
imagenet: torchvision's mean 0.485,0.456,0.406 and std 0.229,0.224,0.225 on
pixels / 255; none for a network trained without it) and data.classes
(--classes: imagenet, the default for a 1000-class model, is torchvision's
list of ImageNet class names; FILE has one name per line; none leaves
them out) and data.transform (how predict makes a photo the input's size,
as `train` records an image folder's evaluation: --transform, default
"resize S" with S = round(256 / 224 x the input's larger side), 256 for
224: torchvision's Resize(256) + CenterCrop(224), the evaluation its
ImageNet weights are measured with; "squash" for Resize((H, W)); either
followed by ", bicubic" for weights evaluated after Pillow's BICUBIC resize
(torchvision's EfficientNets: "resize 256, bicubic" for B0); none
for a network of inputs already of its size, which predict resizes
whole). It is written to a temporary file and renamed.

dptrain is found as --dptrain PATH, else $DPTRAIN_BIN, else build/dptrain next
to this script's repository, else `dptrain` on the PATH.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

IMAGENET_NORMALIZE = "0.485,0.456,0.406,0.229,0.224,0.225"
FORMAT_VERSION = "2"  # checkpoint.h's DP_CHECKPOINT_VERSION


class ImportError_(Exception):
    """A refusal: one line, exit status 1."""


def find_dptrain(given):
    if given:
        return given
    if os.environ.get("DPTRAIN_BIN"):
        return os.environ["DPTRAIN_BIN"]
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "dptrain")
    return here if os.access(here, os.X_OK) else "dptrain"


def model_table(dptrain, model):
    """[(name, shape, trainable)], the fingerprint, the class count and the
    input's (height, width), from `dptrain inspect --model`."""
    try:
        run = subprocess.run([dptrain, "inspect", "--model", model], capture_output=True, text=True)
    except OSError as e:
        raise ImportError_(f"cannot run {dptrain} ({e.strerror}): give --dptrain PATH or set DPTRAIN_BIN")
    if run.returncode != 0:
        lines = run.stderr.strip().splitlines()
        raise ImportError_(lines[-1] if lines else f"{dptrain} inspect --model {model} failed")
    lines = run.stdout.splitlines()
    head = lines[0].split()
    fingerprint = head[head.index("fingerprint") + 1]
    classes = int(head[head.index("outputs,") - 1])
    height, width = (int(v) for v in head[head.index("input") + 1].rstrip(",").split("x")[1:])
    table = []
    for line in lines[1:]:
        name, rest = line.strip().split(" [", 1)
        dims, kind = rest.split("] ")
        table.append((name, [int(d) for d in dims.split(", ")] if dims else [], kind == "trainable"))
    return table, fingerprint, classes, (height, width)


def load_state_dict(path):
    import torch
    try:  # weights_only: a state_dict needs no arbitrary unpickling
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds for a file it cannot read
        text = str(e)
        if "Unsupported class " in text:  # a pickled object, such as the whole model torch.save(model, FILE) writes
            kind = text.split("Unsupported class ", 1)[1].split()[0]
            raise ImportError_(f"{path}: holds a pickled {kind}, not only tensors (a whole model saved with "
                               f"torch.save(model, FILE)?): save model.state_dict() instead")
        if "WeightsUnpickler error: " in text:  # torch's advice to unpickle anything is not what to do here
            text = text.split("WeightsUnpickler error: ", 1)[1]
        first = text.splitlines()[0] if text else ""
        raise ImportError_(f"{path}: cannot be read by torch.load ({type(e).__name__}: {first[:200]})")
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        # a training script's checkpoint: {"state_dict": {...}, "epoch": ...} or timm's {"model": ...}
        inner = [k for k, v in sd.items() if isinstance(v, dict) and v
                 and all(isinstance(t, torch.Tensor) for t in v.values())] if isinstance(sd, dict) else []
        hint = (f": it holds one under the key '{inner[0]}' (save that: torch.save(ck['{inner[0]}'], FILE))"
                if inner else "")
        raise ImportError_(f"{path}: not a state_dict (a dict of tensors, as torch.save(model.state_dict(), "
                           f"FILE) writes){hint}")
    return sd


def match(sd, table, path, model):
    """The state_dict's tensors in the table's order, as float32 numpy arrays."""
    import torch
    wanted = {name: shape for name, shape, _ in table}
    bn_prefixes = {name[:-len(".running_mean")] for name in wanted if name.endswith(".running_mean")}
    extra = []
    for key, value in sd.items():
        if key in wanted:
            continue
        prefix = key[:-len(".num_batches_tracked")]
        if key.endswith(".num_batches_tracked") and prefix in bn_prefixes:
            if value.dim() != 0 or value.dtype.is_floating_point:
                raise ImportError_(f"{path}: tensor '{key}' is {value.dtype} of shape {list(value.shape)}, expected "
                                   f"batch norm's integer scalar count")
            continue
        extra.append(key)
    missing = [name for name in wanted if name not in sd]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ImportError_(f"{path}: has no tensor '{missing[0]}', which {model} needs{more}")
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise ImportError_(f"{path}: tensor '{extra[0]}' is not a parameter of {model}{more}")
    arrays = []
    for name, shape, _ in table:
        value = sd[name]
        if list(value.shape) != shape:
            raise ImportError_(f"{path}: tensor '{name}' has shape {list(value.shape)}, {model} expects {shape}")
        if not value.dtype.is_floating_point:
            raise ImportError_(f"{path}: tensor '{name}' is {value.dtype}, expected floating point")
        arrays.append((name, value.detach().to(torch.float32).contiguous().numpy()))
    return arrays


def model_text(model):
    """The model file's text, as dptrain writes it into checkpoints (model_text:
    bytes >= 0x80 made '?' unless the file is UTF-8), so that the checkpoint
    needs the file nowhere; None when MODEL is a name dptrain looks up (a
    built-in network, or an installed model file)."""
    if not os.path.isfile(model):
        return None
    with open(model, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(chr(b) if b < 0x80 else "?" for b in raw)


def normalize_text(given):
    if given in (None, "imagenet"):
        return IMAGENET_NORMALIZE
    if given == "none":
        return ""
    values = given.split(",")
    try:
        [float(v) for v in values]
    except ValueError:
        values = []
    if not values or len(values) % 2:
        raise ImportError_(f"--normalize {given}: expected MEAN,STD or M1,M2,M3,S1,S2,S3, imagenet or none")
    return given


def transform_text(given, size):
    """data.transform: "resize S" (torchvision's Resize(S) + CenterCrop), "squash" or "" (none), then
    ", bicubic" when given so (Pillow's BICUBIC resize: the EfficientNets' and many timm weights' evaluation;
    image_folder.h dp_eval_transform_text)."""
    if given is None:  # dptrain's default S, image_transform.c's dp_eval_resize_default: 256 for 224
        q, r = divmod(max(size) * 256, 224)
        return f"resize {q + 1 if 2 * r > 224 or (2 * r == 224 and q % 2) else q}"
    if given == "none":
        return ""
    text, _, filter_ = given.partition(",")
    filter_ = filter_.strip()
    if filter_ not in ("", "bicubic", "bilinear"):
        raise ImportError_(f"--transform {given}: the filter '{filter_}' is not bicubic or bilinear")
    suffix = ", bicubic" if filter_ == "bicubic" else ""
    parts = text.split()
    if parts == ["squash"]:
        return "squash" + suffix
    if len(parts) == 2 and parts[0] == "resize" and parts[1].isdigit() and 1 <= int(parts[1]) <= 65535:
        return f"resize {int(parts[1])}{suffix}"
    raise ImportError_(f"--transform {given}: expected \"resize S\" (S from 1 to 65535) or squash, each optionally "
                       f"followed by \", bicubic\", or none")


def class_names(given, classes):
    if given == "none" or (given is None and classes != 1000):
        return None
    if given in (None, "imagenet"):
        if classes != 1000:
            raise ImportError_(f"--classes imagenet: the model has {classes} classes, ImageNet 1000")
        from torchvision.models._meta import _IMAGENET_CATEGORIES
        return list(_IMAGENET_CATEGORIES)
    try:
        with open(given, encoding="utf-8") as f:
            names = [line.rstrip("\r\n") for line in f]
    except OSError as e:
        raise ImportError_(f"--classes {given}: cannot read ({e.strerror})")
    if names and names[-1] == "":
        names.pop()
    if len(names) != classes or not all(names):
        raise ImportError_(f"--classes {given}: {len(names)} lines (empty ones not allowed), the model has "
                           f"{classes} classes")
    return names


def write_safetensors(path, arrays, metadata):
    """The safetensors file (F32 tensors in the given order, metadata strings),
    written to a temporary file in the same directory and renamed."""
    header = {"__metadata__": metadata}
    offset = 0
    for name, a in arrays:
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + 4 * a.size]}
        offset += 4 * a.size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=directory)
    except OSError as e:  # a folder that is not there or not writable: one line, as for the other refusals
        raise ImportError_(f"{path}: cannot write in {directory} ({e.strerror})")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for _, a in arrays:
                f.write(a.astype("<f4").tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:  # a full disk, OUT a folder: nothing left behind, one line
        os.unlink(tmp)
        raise ImportError_(f"{path}: cannot write ({e.strerror})")
    except BaseException:
        os.unlink(tmp)
        raise


def parse_args(argv):
    positional, options = [], {}
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        if a in ("--normalize", "--classes", "--transform", "--dptrain"):
            if i + 1 >= len(argv):
                raise ImportError_(f"{a} needs a value")
            options[a[2:]] = argv[i + 1]
            i += 2
            continue
        if a.startswith("--"):
            raise ImportError_(f"unknown option {a} (see --help)")
        positional.append(a)
        i += 1
    if len(positional) != 3:
        raise ImportError_("usage: import_torchvision.py STATE_DICT.pth MODEL.cfg|NAME OUT.safetensors [options]")
    return positional, options


def main(argv):
    (sd_path, model, out), options = parse_args(argv)
    normalize = normalize_text(options.get("normalize"))
    table, fingerprint, classes, size = model_table(find_dptrain(options.get("dptrain")), model)
    transform = transform_text(options.get("transform"), size)
    arrays = match(load_state_dict(sd_path), table, sd_path, model)
    metadata = {"format": "dptrain-checkpoint", "format_version": FORMAT_VERSION, "weights_only": "1",
                "model": model, "model_fingerprint": fingerprint, "data.normalize": normalize,
                "source": f"import_torchvision.py {os.path.basename(sd_path)}"}
    text = model_text(model)
    if text is not None:
        metadata["model_text"] = text
    if transform:
        metadata["data.transform"] = transform
    names = class_names(options.get("classes"), classes)
    if names:
        metadata["data.classes"] = json.dumps(names, ensure_ascii=False, separators=(",", ":"))
    write_safetensors(out, arrays, metadata)
    trainable = sum(a.size for (_, a), (_, _, t) in zip(arrays, table) if t)
    print(f"{out}: {len(arrays)} tensors of {model} ({trainable} trainable parameters) from {sd_path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except ImportError_ as e:
        sys.stderr.write(f"import_torchvision.py: {e}\n")
        sys.exit(1)
