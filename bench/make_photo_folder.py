#!/usr/bin/python3
"""make_photo_folder.py OUT N [--test-fraction F] [--quality Q] [--seed S] [--classes C]

An ImageFolder of N distinct JPEG photographs of about 500 x 375 (or 375 x
500) pixels, made from the real photographs that Debian's opencv-doc
package ships (/usr/share/doc/opencv-doc/examples/data/*.jpg: baboon,
fruits, building, the stereo and calibration scenes, ...): each output is
a random crop of one of them (30-100% of its area, aspect ratio 3:4 to
4:3), scaled to 500 on its longer side (+-8%), maybe mirrored, saved at
quality Q (default 90, 4:2:0). Writes OUT/train/CLASS/NNNNNN.jpg and, for a
fraction F (default 0.1) of them, OUT/test/CLASS/NNNNNN.jpg; classes are
the source photographs modulo C (default 10). Deterministic for a seed.
Needs python3-pil and opencv-doc (apt-get install opencv-doc).
"""
import argparse
import glob
import os
import random
import sys

from PIL import Image

SOURCE = "/usr/share/doc/opencv-doc/examples/data"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("n", type=int)
    p.add_argument("--test-fraction", type=float, default=0.1)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--classes", type=int, default=10)
    a = p.parse_args()
    sources = []
    for path in sorted(glob.glob(os.path.join(SOURCE, "*.jpg"))):
        with Image.open(path) as im:
            if min(im.size) >= 200:  # photographs, not icons
                sources.append(im.convert("RGB"))
    if not sources:
        sys.exit("make_photo_folder: no photographs in %s (apt-get install opencv-doc)" % SOURCE)
    rng = random.Random(a.seed)
    for i in range(a.n):
        k = i % len(sources)
        src = sources[k]
        w, h = src.size
        for _ in range(20):
            area = w * h * rng.uniform(0.3, 1.0)
            ratio = rng.choice((4 / 3, 3 / 4)) * rng.uniform(0.9, 1.1)
            cw, ch = int(round((area * ratio) ** 0.5)), int(round((area / ratio) ** 0.5))
            if cw <= w and ch <= h:
                break
        else:
            cw, ch = w, h
        left, top = rng.randint(0, w - cw), rng.randint(0, h - ch)
        crop = src.crop((left, top, left + cw, top + ch))
        longer = 500 * rng.uniform(0.92, 1.08)
        scale = longer / max(cw, ch)
        im = crop.resize((max(1, round(cw * scale)), max(1, round(ch * scale))), Image.BILINEAR)
        if rng.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        split = "test" if rng.random() < a.test_fraction else "train"
        folder = os.path.join(a.out, split, "class%02d" % (k % a.classes))
        os.makedirs(folder, exist_ok=True)
        im.save(os.path.join(folder, "%06d.jpg" % i), "JPEG", quality=a.quality)
    print("make_photo_folder: %d images from %d photographs in %s" % (a.n, len(sources), a.out))


main()
