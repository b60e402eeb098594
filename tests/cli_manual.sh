#!/usr/bin/env bash
# cli_manual.sh - the manual runs as written: every `sh` and `console` block
# of docs/*.md (tests/manual_blocks.py: the conventions, which docs/README.md
# states for the pages' writers), each page in a fresh folder made here, so
# a command of a page that stops working, or a line of output a page quotes
# that the program no longer prints, fails this test. What the folder holds
# and what the test changes (docs/README.md says the same):
# - build/dptrain is this build's dptrain behind a wrapper: train, eval and
#   launch read small data (--data absent or Fashion-MNIST's folder: 256
#   training and 50 test images of it, also as small/); train runs 1 epoch
#   where no --epochs is given (a --resume: its checkpoint's); ResNet and
#   AlexNet models train on 32 images, in batches of 32 where the line
#   reads IDX or CIFAR data (a line on an image folder keeps its own
#   --batch-size or the default, so a batch larger than the folder fails
#   as in a reader's run); lines on cuda:N run on the CUDA emulator
#   (build/lib/libdptrain_cuda_emu.so, 2 GPUs) with --limit 32 --batch-size
#   32 --epochs 1, and say SKIPPED without it (a build without CUDA), as
#   launch and mpirun do without Open MPI;
#   output is line-buffered as on a terminal;
# - the files the pages use by name: ck.safetensors (lenet-paddle, 2 epochs
#   of Adam on 10,000 images, as inference.md says), ankle_boot.png and
#   pullover.pgm (Fashion-MNIST's first two test images), my.cfg (a small
#   network of 1x28x28 images, 10 outputs), mypictures/ (an image folder:
#   3 classes of 28x28 PNGs, 90 training and 10 test images each),
#   cifar-10-batches-bin/ (CIFAR-10's files with 256 and 50 records of
#   noise), and models/, examples/, tools/, scripts/, tests/ of the source;
# - `make install PREFIX=DIR` is `cmake --install` of this build, paths
#   under /opt/ are under the page's folder, mpirun is run as root with
#   --allow-run-as-root --oversubscribe, HOME is the page's folder's .home.
# MANUAL_PAGES="FILE..." runs other pages (the mutation check); MANUAL_SHOW=1
# also prints what each console command printed (to write a page's lines).
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$(dirname "$bin")" && pwd)
emu="$build/lib/libdptrain_cuda_emu.so"
t=$tmp/template
mkdir -p "$t/build" "$t/.bin"

small_data "$t/small" 256 50
small_data "$tmp/ten" 10000 2
ln -s "$build/lib" "$t/build/lib"
for dir in models examples tools scripts tests; do ln -s "$src/$dir" "$t/$dir"; done
cat >"$t/build/dptrain" <<WRAP
#!/usr/bin/env bash
# the manual's dptrain: this build's, on small data (tests/cli_manual.sh)
args=() command=\$1 data=0 data_dir= prev= epochs=0 resume=0 heavy=0 cuda=0 after_dashes=0
for a in "\$@"; do
  [[ \$a == -- ]] && after_dashes=1
  if [[ \$a == /usr/share/datasets/fashion-mnist ]]; then a="$t/small"; fi
  [[ \$a == --data || \$a == --data=* ]] && data=1
  [[ \$prev == --data ]] && data_dir=\$a
  [[ \$a == --data=* ]] && data_dir=\${a#--data=}
  prev=\$a
  [[ \$a == --epochs || \$a == --epochs=* ]] && epochs=1
  [[ \$a == --resume || \$a == --resume=* ]] && resume=1
  [[ \$a =~ (resnet|alexnet) ]] && heavy=1
  [[ \$a == *cuda:* ]] && cuda=1
  args+=("\$a")
done
if [[ \$command == train || \$command == eval || \$command == launch ]]; then
  ((data)) || args+=(--data "$t/small")
fi
if [[ \$command == train || (\$command == launch && \$after_dashes == 1) ]]; then
  ((epochs || resume)) || args+=(--epochs 1)
  ((heavy)) && args+=(--limit 32)
  # batches of 32 on the stand-in data (IDX, CIFAR); a line on an image folder (a reader's photos) keeps its
  # own batch size, or the default, which must fit that folder as it would in the reader's run
  if ((heavy)) && { [[ -z \$data_dir ]] || compgen -G "\$data_dir/*-idx[13]-ubyte*" >/dev/null ||
       compgen -G "\$data_dir/*.bin" >/dev/null; }; then args+=(--batch-size 32); fi
fi
if [[ \$command == launch ]] && ! command -v mpirun >/dev/null; then
  echo "cli_manual: SKIPPED (no mpirun): dptrain \$*"; exit 0
fi
if ((cuda)); then
  if [[ ! -e "$emu" ]]; then echo "cli_manual: SKIPPED (no CUDA emulator in this build): dptrain \$*"; exit 0; fi
  export DPTRAIN_CUDA_MODULE="$emu" DPTRAIN_CUDA_EMU_GPUS=2
  [[ \$command == train ]] && args+=(--limit 32 --batch-size 32 --epochs 1)
fi
exec stdbuf -oL -eL "$bin" "\${args[@]}"
WRAP
cat >"$t/.bin/mpirun" <<WRAP
#!/usr/bin/env bash
[[ -n "$(command -v mpirun)" ]] || { echo "cli_manual: SKIPPED (no mpirun): mpirun \$*"; exit 0; }
root=(); [[ \$(id -u) -eq 0 ]] && root=(--allow-run-as-root)
exec "$(command -v mpirun)" "\${root[@]}" --oversubscribe "\$@"
WRAP
chmod +x "$t/build/dptrain" "$t/.bin/mpirun"

# the files the pages name
/usr/bin/python3 - "$t" "$tmp/ten" <<'PY'
import os, random, struct, sys, zlib
t = sys.argv[1]
def idx(folder, name):
    b = open(os.path.join(folder, name), "rb").read()
    return b[16:] if "images" in name else b[8:]
images = idx(os.path.join(t, "small"), "t10k-images-idx3-ubyte")
train_images, train_labels = idx(sys.argv[2], "train-images-idx3-ubyte"), idx(sys.argv[2], "train-labels-idx1-ubyte")
def png(path, pixels, w=28, h=28):
    raw = b"".join(b"\0" + pixels[y * w:(y + 1) * w] for y in range(h))
    chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
png(os.path.join(t, "ankle_boot.png"), images[:784])
open(os.path.join(t, "pullover.pgm"), "wb").write(b"P5\n28 28\n255\n" + images[784:1568])
# mypictures: 3 classes of Fashion-MNIST's training images (T-shirt, trouser, pullover)
names, counts = ["shirt", "trouser", "pullover"], {}
for i in range(len(train_labels)):
    k = train_labels[i]
    if k < 3 and counts.get(k, 0) < 100:
        split = "train" if counts.get(k, 0) < 90 else "test"
        d = os.path.join(t, "mypictures", split, names[k])
        os.makedirs(d, exist_ok=True)
        png(os.path.join(d, "%03d.png" % i), train_images[784 * i:784 * (i + 1)])
        counts[k] = counts.get(k, 0) + 1
# CIFAR-10's binary files: a label byte and 3x32x32 pixel bytes per record, noise
rng = random.Random(1)
d = os.path.join(t, "cifar-10-batches-bin")
os.makedirs(d)
for name, n in (("data_batch_1.bin", 256), ("test_batch.bin", 50)):
    open(os.path.join(d, name), "wb").write(b"".join(bytes([i % 10]) + rng.randbytes(3072) for i in range(n)))
open(os.path.join(t, "my.cfg"), "w").write(
    "# my.cfg - a small network of 1x28x28 images (tests/cli_manual.sh)\n[net]\nchannels = 1\nheight = 28\n"
    "width = 28\n\n[conv]\nname = conv1\nfilters = 8\nsize = 5\nactivation = relu\n\n[maxpool]\nsize = 2\n\n"
    "[flatten]\n\n[linear]\nname = fc\nout = 10\n")
PY
[[ -s $t/ankle_boot.png && -d $t/mypictures/test/trouser && -s $t/cifar-10-batches-bin/test_batch.bin ]] && pass \
  || fail "making the pages' files"
"$bin" train --data "$tmp/ten" --model lenet-paddle --optimizer adam --epochs 2 --batch-size 64 --devices 2 \
  --save "$t/ck.safetensors" --quiet >/dev/null 2>"$tmp/err" && pass || fail "the checkpoint: $(cat "$tmp/err")"

pages=${MANUAL_PAGES:-$(ls "$src"/docs/*.md)}
/usr/bin/python3 "$src/tests/manual_blocks.py" "$t" "$build" $pages >"$tmp/manual.out" 2>&1
status=$?
cat "$tmp/manual.out"
counts=$(sed -nE 's/^manual_blocks: ([0-9]+) passed, ([0-9]+) failed$/\1 \2/p' "$tmp/manual.out")
[[ -n $counts ]] && passed=$((passed + ${counts% *})) failed=$((failed + ${counts#* })) \
  || fail "manual_blocks.py ended with status $status before its count"
testing_finish cli_manual
