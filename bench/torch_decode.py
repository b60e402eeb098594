#!/usr/bin/python3
"""torch_decode.py FOLDER [passes] - the peer of bench/decode_bench.c: every
.jpg/.png of FOLDER (recursively, read into memory first) through what
torchvision's ImageFolder does per sample on one thread: PIL.Image.open +
convert("RGB"), then RandomResizedCrop(224) + RandomHorizontalFlip(), and
the result as a uint8 array (np.asarray: the bytes a batch needs); and the
evaluation's Resize(256) + CenterCrop(224). Prints images/s of each, by CPU
time and by the wall clock; its last line is
"torchvision: TRAIN EVAL TRAIN_WALL EVAL_WALL".
"""
import io
import os
import sys
import time

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T

torch.set_num_threads(1)
if len(sys.argv) < 2 or len(sys.argv) > 3 or not os.path.isdir(sys.argv[1]):
    sys.exit("usage: torch_decode.py FOLDER [passes] (a folder of .jpg/.png files)")
folder, passes = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
paths = sorted(os.path.join(d, f) for d, _, names in os.walk(folder) for f in names
               if f.endswith((".jpg", ".JPEG", ".png")))
blobs = [open(p, "rb").read() for p in paths]
train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
evaluation = T.Compose([T.Resize(256), T.CenterCrop(224)])


def run(transform):
    """images/s by the process's CPU time and by the wall clock"""
    start, start_wall = time.process_time(), time.perf_counter()
    for _ in range(passes):
        for blob in blobs:
            im = Image.open(io.BytesIO(blob)).convert("RGB")
            np.asarray(transform(im))
    n = passes * len(blobs)
    return n / (time.process_time() - start), n / (time.perf_counter() - start_wall)


torch.manual_seed(0)
run(train)  # warm up, as decode_bench does
tr, tr_wall = run(train)
ev, ev_wall = run(evaluation)
print("images/s by CPU time (by the wall clock):")
print("torchvision train (PIL decode + RandomResizedCrop 224 + flip): %7.1f (%7.1f)" % (tr, tr_wall))
print("torchvision eval (Resize 256 + CenterCrop 224):                %7.1f (%7.1f)" % (ev, ev_wall))
print("torchvision: %.1f %.1f %.1f %.1f" % (tr, ev, tr_wall, ev_wall))
