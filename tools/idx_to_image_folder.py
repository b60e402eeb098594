#!/usr/bin/python3
"""idx_to_image_folder.py IDX_DIR OUT [options]

Writes the (Fashion-)MNIST IDX files of IDX_DIR as an image folder in
torchvision's ImageFolder layout: OUT/train/CLASS/NNNNNN.EXT and
OUT/test/CLASS/NNNNNN.EXT, classes named 0..9 (or --names). Each image is
written as it is (28 x 28), or with --random-size MIN:MAX scaled (PIL's
bilinear) to a random size: the longer side uniform in [MIN, MAX], the
aspect ratio log-uniform between 3:4 and 4:3, drawn from --seed, so the
folder holds images of every size and shape (what dptrain's image pipeline
resizes back). --format jpeg (quality --quality, default 90), png, bmp or
ppm. --classes A-B keeps the images of labels A to B only (e.g. 5-9);
--limit-train / --limit-test keep the first N images (of those classes) of
each split. Needs python3-pil and python3-numpy.
"""
import argparse
import gzip
import math
import os
import random
import struct

import numpy as np
from PIL import Image

FASHION = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle-boot"]


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        magic = f.read(4)
        dims = [struct.unpack(">I", f.read(4))[0] for _ in range(magic[3])]
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def find(idx_dir, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(idx_dir, candidate)
        if os.path.exists(path):
            return path
    raise SystemExit("idx_to_image_folder.py: %s: no %s[.gz]" % (idx_dir, name))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("idx_dir")
    p.add_argument("out")
    p.add_argument("--random-size", default=None, help="MIN:MAX longer side")
    p.add_argument("--format", default="jpeg", choices=["jpeg", "png", "bmp", "ppm"])
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit-train", type=int, default=0)
    p.add_argument("--limit-test", type=int, default=0)
    p.add_argument("--names", choices=["digits", "fashion"], default="digits")
    p.add_argument("--classes", default="0-9", help="A-B: the labels kept")
    a = p.parse_args()
    first, last = (int(v) for v in a.classes.split("-"))
    rng = random.Random(a.seed)
    low = high = None
    if a.random_size:
        low, high = (int(v) for v in a.random_size.split(":"))
    ext = {"jpeg": "jpg", "png": "png", "bmp": "bmp", "ppm": "ppm"}[a.format]
    names = FASHION if a.names == "fashion" else [str(i) for i in range(10)]
    for split, prefix, limit in (("train", "train", a.limit_train), ("test", "t10k", a.limit_test)):
        images = read_idx(find(a.idx_dir, prefix + "-images-idx3-ubyte"))
        labels = read_idx(find(a.idx_dir, prefix + "-labels-idx1-ubyte"))
        kept = [i for i in range(len(labels)) if first <= labels[i] <= last]
        if limit:
            kept = kept[:limit]
        for c in set(int(labels[i]) for i in kept):
            os.makedirs(os.path.join(a.out, split, names[c]), exist_ok=True)
        for i in kept:
            im = Image.fromarray(images[i])
            if low is not None:
                longer = rng.randint(low, high)
                ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))  # width / height
                w, h = (longer, max(1, round(longer / ratio))) if ratio >= 1 else (max(1, round(longer * ratio)), longer)
                im = im.resize((w, h), Image.BILINEAR)
            if a.format == "ppm":
                im = im.convert("RGB")
            path = os.path.join(a.out, split, names[int(labels[i])], "%06d.%s" % (i, ext))
            if a.format == "jpeg":
                im.save(path, quality=a.quality)
            else:
                im.save(path)


if __name__ == "__main__":
    main()
