#!/usr/bin/python3
"""gradient_image_folder.py - an ImageFolder of colour gradients for the CLI tests of the augmentations.

    gradient_image_folder.py DIR SEED MIN MAX

DIR/train/cK/I.{png,jpg} (30 per class) and DIR/test/cK/I.{png,jpg} (6 per
class), 3 classes: image I of class K is an H x W RGB gradient (H and W in
[MIN, MAX], drawn from numpy's default_rng(SEED)) whose slope depends on K,
with noise; odd I are PNGs, even ones JPEGs. The same folder every time.
"""
import os
import sys

import numpy as np
from PIL import Image


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    root, rng = sys.argv[1], np.random.default_rng(int(sys.argv[2]))
    low, high = int(sys.argv[3]), int(sys.argv[4])
    for split, count in (("train", 30), ("test", 6)):
        for c in range(3):
            os.makedirs(f"{root}/{split}/c{c}", exist_ok=True)
            for i in range(count):
                h, w = rng.integers(low, high + 1, 2)
                y, x = np.mgrid[0:h, 0:w]
                a = (60 * c + 2 * x + (3 - c) * y + rng.integers(0, 40, (h, w))) % 256
                im = Image.fromarray(np.stack([a, (a * 3) % 256, 255 - a], 2).astype(np.uint8), "RGB")
                im.save(f"{root}/{split}/c{c}/{i}." + ("png" if i % 2 else "jpg"))


if __name__ == "__main__":
    main()
