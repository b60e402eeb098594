#!/usr/bin/python3
"""random_image_folder.py - an ImageFolder of random RGB PNGs for the CLI tests.

    random_image_folder.py DIR TRAIN TEST CLASSES HxW[,HxW...]

DIR/train/cK/I.png and DIR/test/cK/I.png: TRAIN and TEST images, image I in
class I % CLASSES with the size HxW number I % (the sizes given), its bytes
uniform in [0, 255] from numpy's default_rng(0), drawn split by split, image
by image (the same folder every time).
"""
import os
import sys

import numpy as np
from PIL import Image


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    root, counts, classes = sys.argv[1], (int(sys.argv[2]), int(sys.argv[3])), int(sys.argv[4])
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[5].split(",")]
    rng = np.random.default_rng(0)
    for split, count in zip(("train", "test"), counts):
        for i in range(count):
            folder = f"{root}/{split}/c{i % classes}"
            os.makedirs(folder, exist_ok=True)
            h, w = shapes[i % len(shapes)]
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(f"{folder}/{i}.png")


if __name__ == "__main__":
    main()
