#!/usr/bin/python3
"""read_checkpoint.py - reads a dptrain checkpoint (or any F32 safetensors
file) with numpy alone, independently of dptrain's C reader.

usage: read_checkpoint.py FILE            print metadata and tensors like `dptrain inspect FILE`
       read_checkpoint.py FILE NAME       print tensor NAME's values, one per line (%.9g)

The format (safetensors): 8-byte little-endian header length N, N bytes of
UTF-8 JSON {"__metadata__": {str: str}, name: {"dtype", "shape",
"data_offsets": [begin, end]}, ...}, then the data; offsets are relative to
the data's start and the tensors tile it without gaps. Checked here too: a
bad file is one line on stderr and exit status 1.

In your own code, the whole loader is:
    tensors = load(path)      # {name: np.ndarray of float32}, plus metadata
It does not import torch; PyTorch users can also use safetensors.torch.load_file.
"""
import json
import sys

import numpy as np


class CheckpointError(Exception):
    pass


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise CheckpointError("duplicate key %r in the JSON header" % k)
    return dict(pairs)


def load(path):
    """Returns (metadata dict, [(name, float32 array)] in header order)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise CheckpointError("%d bytes, shorter than the 8-byte header length" % len(raw))
    n = int.from_bytes(raw[:8], "little")
    if n > len(raw) - 8:
        raise CheckpointError("header length %d is larger than the %d bytes after it" % (n, len(raw) - 8))
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError("bad JSON header: %s" % e)
    if not isinstance(header, dict):
        raise CheckpointError("the header is not a JSON object")
    data = memoryview(raw)[8 + n:]
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError("__metadata__ must map strings to strings")
    tensors, spans = [], []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise CheckpointError("tensor %r: expected exactly dtype, shape, data_offsets" % name)
        if entry["dtype"] != "F32":
            raise CheckpointError("tensor %r: dtype %r (only F32 is read)" % (name, entry["dtype"]))
        shape, (begin, end) = entry["shape"], entry["data_offsets"]
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise CheckpointError("tensor %r: bad shape %r" % (name, shape))
        if not (0 <= begin <= end <= len(data)) or 4 * int(np.prod(shape, dtype=np.int64)) != end - begin:
            raise CheckpointError("tensor %r: data_offsets %r do not fit shape %r and %d data bytes"
                                  % (name, [begin, end], shape, len(data)))
        values = np.frombuffer(data[begin:end], dtype="<f4").reshape(shape)
        tensors.append((name, values))
        spans.append((begin, end, name))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            raise CheckpointError("tensor %r starts at %d, expected %d (gap or overlap)" % (name, begin, at))
        at = end
    if at != len(data):
        raise CheckpointError("%d bytes after the last tensor" % (len(data) - at))
    return metadata, tensors


def sequential_sum(values):
    """float64 sum in element order starting from 0.0, as dptrain inspect adds."""
    flat = np.concatenate(([0.0], values.astype(np.float64).ravel()))
    return float(np.cumsum(flat)[-1])


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    try:
        metadata, tensors = load(argv[1])
    except (OSError, CheckpointError) as e:
        sys.stderr.write("read_checkpoint.py: %s: %s\n" % (argv[1], e))
        return 1
    if len(argv) == 3:
        found = [v for name, v in tensors if name == argv[2]]
        if not found:
            sys.stderr.write("read_checkpoint.py: %s: no tensor %r\n" % (argv[1], argv[2]))
            return 1
        for x in found[0].ravel():
            print("%.9g" % x)
        return 0
    print("metadata:")
    for key, value in metadata.items():
        if key == "model_text":  # a whole model file: its size in bytes, on one line, as dptrain inspect
            print("  %s = (%d bytes of model file text)" % (key, len(value.encode("utf-8"))))
        else:
            print("  %s = %s" % (key, value))
    if metadata.get("format") == "dptrain-checkpoint" and "data.classes" in metadata:
        # a checkpoint's class names (of an image folder): a JSON array
        print("classes:")
        for label, name in enumerate(json.loads(metadata["data.classes"])):
            print("  %d %s" % (label, name))
    if metadata.get("format") == "dptrain-checkpoint" and "cuda.conv_algorithms" in metadata:
        # the GPU convolution algorithms a resume installs: a JSON array of {"key", "algo"}
        print("cuda conv algorithms: %d stored" % len(json.loads(metadata["cuda.conv_algorithms"])))
    print("tensors:")
    for name, values in tensors:
        shape = ", ".join(str(d) for d in values.shape)
        print("  %s [%s] sum %.17g" % (name, shape, sequential_sum(values)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
