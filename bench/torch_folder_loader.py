#!/usr/bin/python3
"""torch_folder_loader.py DIR [WORKERS] [BATCH] [EPOCHS] [SIZE]

torchvision 0.14's side of bench/loader_vs_torchvision.sh: ImageFolder(DIR/train)
with RandomResizedCrop(SIZE) + RandomHorizontalFlip + ToTensor + Normalize
(ImageNet's mean and std), a DataLoader of BATCH with WORKERS worker processes
(default: the cores), shuffled, EPOCHS epochs of float batches. Prints images/s
and the peak resident memory of the main process plus its workers (their
resident sets summed, sampled every 20 ms from /proc: workers are processes).
"""
import os
import sys
import threading
import time

import torch
import torchvision
from torchvision import transforms


def tree_rss_kb(pid):
    """Resident KB of pid and every descendant, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
        todo.extend(children.get(p, []))
    return total


def main():
    if len(sys.argv) < 2 or len(sys.argv) > 6 or not os.path.isdir(os.path.join(sys.argv[1], "train")):
        sys.exit("usage: torch_folder_loader.py DIR [WORKERS] [BATCH] [EPOCHS] [SIZE] (DIR/train: an ImageFolder)")
    root = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else os.cpu_count()
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    size = int(sys.argv[5]) if len(sys.argv) > 5 else 224
    torch.set_num_threads(1)
    tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    data = torchvision.datasets.ImageFolder(os.path.join(root, "train"), tf)
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True, num_workers=workers)
    peak = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss_kb(os.getpid()))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    images, checksum, start = 0, 0.0, time.perf_counter()
    for _ in range(epochs):
        for x, _y in loader:
            images += x.shape[0]
            checksum += float(x[0, 0, 0, 0])
    seconds = time.perf_counter() - start
    stop.set()
    watcher.join()
    print("torchvision: %.1f img/s, peak RSS %.1f MB (%d images, %d workers, batch %d, %dx%d, checksum %.3f)"
          % (images / seconds, peak[0] / 1024.0, images, workers, batch, size, size, checksum))


if __name__ == "__main__":
    main()
