#!/usr/bin/env bash
# cli_eval_report.sh - `dptrain eval --per-class` and `--confusion FILE.csv`:
# - LeNet (Paddle's) trained 2 epochs on a 1,200/300 cut of Fashion-MNIST,
#   evaluated on 1 and 2 devices: the CSV files are byte-identical, the
#   matrix (a header of Fashion-MNIST's names, a row per true class) sums to
#   the 300 images, its diagonal to the main line's correct count, each
#   class's row sum and diagonal entry are the table's images and correct,
#   and the table's mean recall is theirs;
# - an image folder with classes named `a,b`, `say "hi"` and ` lead`: the
#   checkpoint's names (sorted, as ImageFolder's) quoted as CSV wants them (read back by Python's csv
#   module), the table names them;
# - on two emulated GPUs (a build with CUDA): the matrix from the devices'
#   logits sums to the images, its diagonal to that run's count;
# - --confusion in a folder that does not exist: one line, exit 1, before
#   any evaluation, nothing written.
source "$(dirname "$0")/testing.sh"
py=/usr/bin/python3

small_data "$tmp/small" 1200 300
"$bin" train --model lenet-paddle --data "$tmp/small" --epochs 2 --batch-size 50 --lr 0.1 --devices 2 --seed 1 \
  --save "$tmp/ck.st" --quiet >/dev/null 2>&1 && pass || fail "training"
for d in 1 2; do
  "$bin" eval --resume "$tmp/ck.st" --data "$tmp/small" --devices $d --per-class --confusion "$tmp/c$d.csv" \
    >"$tmp/e$d.out" 2>&1 && pass || fail "eval on $d devices: $(cat "$tmp/e$d.out")"
done
cat "$tmp/e2.out" "$tmp/c2.csv"
cmp "$tmp/c1.csv" "$tmp/c2.csv" && pass || fail "the confusion matrix differs between 1 and 2 devices"
correct=$(sed -nE 's/^test acc: [0-9.]+ \(([0-9]+)\/300 correct\).*/\1/p' "$tmp/e2.out")
$py - "$tmp/c2.csv" "$tmp/e2.out" "$correct" <<'PY' && pass || fail "the matrix and the table disagree"
import csv, re, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
names = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
assert rows[0] == ["true \\ predicted"] + names, rows[0]
assert [r[0] for r in rows[1:]] == names, [r[0] for r in rows[1:]]
m = [[int(v) for v in r[1:]] for r in rows[1:]]
assert sum(map(sum, m)) == 300, sum(map(sum, m))
assert sum(m[i][i] for i in range(10)) == int(sys.argv[3]), (sum(m[i][i] for i in range(10)), sys.argv[3])
table = [l for l in open(sys.argv[2]) if re.match(r"^\d+ ", l)]
assert len(table) == 10, table
recalls = []
for i, line in enumerate(table):
    nums = re.search(r"\s(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s\s", line)
    images, right, recall, precision = int(nums.group(1)), int(nums.group(2)), nums.group(3), nums.group(4)
    assert images == sum(m[i]) and right == m[i][i], (line, sum(m[i]), m[i][i])
    col = sum(m[j][i] for j in range(10))
    assert precision == ("-" if col == 0 else "%.4f" % (m[i][i] / col)), (line, col)
    if images: recalls.append(right / images)
mean = re.search(r"mean recall \(balanced accuracy\): ([0-9.]+)", open(sys.argv[2]).read()).group(1)
assert mean == "%.4f" % (sum(recalls) / len(recalls)), mean
print("matrix, table and main line agree: %d of 300 on the diagonal" % int(sys.argv[3]))
PY

# on two emulated GPUs (a build with CUDA): each shard's logits downloaded from the device; the matrix sums to
# the images, its diagonal to that run's count
emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e "$emu" ]]; then
  DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2 "$bin" eval --resume "$tmp/ck.st" --data "$tmp/small" \
    --devices cuda:0,cuda:1 --batch-size 64 --confusion "$tmp/cg.csv" >"$tmp/eg.out" 2>&1 && pass \
    || fail "eval on emulated GPUs: $(cat "$tmp/eg.out")"
  gcorrect=$(sed -nE 's/^test acc: [0-9.]+ \(([0-9]+)\/300 correct\).*/\1/p' "$tmp/eg.out")
  $py -c 'import csv, sys
m = [[int(v) for v in r[1:]] for r in list(csv.reader(open(sys.argv[1])))[1:]]
assert sum(map(sum, m)) == 300 and sum(m[i][i] for i in range(10)) == int(sys.argv[2]), (m, sys.argv[2])' \
    "$tmp/cg.csv" "$gcorrect" && pass || fail "the emulated GPUs' matrix: $(cat "$tmp/cg.csv")"
  cmp -s "$tmp/cg.csv" "$tmp/c1.csv" && echo "emulated GPUs: the CPU's matrix" || echo "emulated GPUs: another matrix (GPU arithmetic)"
fi

# class names CSV must quote, from an image folder's checkpoint
pgm() { # FILE K N: an 8x8 gray image of class K, N varies it
  local y x v
  { echo P2; echo 8 8; echo 255
    for ((y = 0; y < 8; y++)); do for ((x = 0; x < 8; x++)); do
      if ((y / 2 == $2)); then v=$((180 + (x * 7 + $3 * 13) % 70)); else v=$(((x * 5 + y * 3 + $3 * 11) % 40)); fi
      printf '%d ' $v; done; echo; done; } >"$1"
}
k=0
for name in 'a,b' 'say "hi"' ' lead'; do
  mkdir -p "$tmp/imgs/train/$name" "$tmp/imgs/test/$name"
  for ((n = 0; n < 8; n++)); do pgm "$tmp/imgs/train/$name/$n.pgm" $k $n; done
  for ((n = 8; n < 11; n++)); do pgm "$tmp/imgs/test/$name/$n.pgm" $k $n; done
  k=$((k + 1))
done
printf '[net]\nchannels = 1\nheight = 8\nwidth = 8\n\n[flatten]\n\n[linear]\nname = fc\nout = 3\n' >"$tmp/m3.cfg"
"$bin" train --model "$tmp/m3.cfg" --data "$tmp/imgs" --epochs 2 --batch-size 6 --lr 0.1 --devices 1 --quiet \
  --save "$tmp/f.st" >/dev/null 2>&1 && pass || fail "training on the folder"
"$bin" eval --resume "$tmp/f.st" --devices 1 --per-class --confusion "$tmp/f.csv" >"$tmp/f.out" 2>&1 && pass \
  || fail "eval of the folder: $(cat "$tmp/f.out")"
head -1 "$tmp/f.csv" | grep -qxF 'true \ predicted," lead","a,b","say ""hi"""' && pass \
  || fail "the header's quoting: $(head -1 "$tmp/f.csv")"
$py -c 'import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
assert rows[0][1:] == [" lead", "a,b", "say \"hi\""] and [r[0] for r in rows[1:]] == rows[0][1:], rows
assert sum(int(v) for r in rows[1:] for v in r[1:]) == 9' "$tmp/f.csv" && pass || fail "Python reads other names back"
grep -q '^2     say "hi" ' "$tmp/f.out" && grep -q '^0      lead ' "$tmp/f.out" && pass || fail "the table: $(cat "$tmp/f.out")"

# a path that cannot be written: refused before the evaluation
"$bin" eval --resume "$tmp/ck.st" --data "$tmp/small" --confusion "$tmp/no/c.csv" >"$tmp/x.out" 2>"$tmp/x.err"
[[ $? -eq 1 && $(wc -l <"$tmp/x.err") -eq 1 && ! -s "$tmp/x.out" && ! -e "$tmp/no" ]] \
  && grep -q "^dptrain: eval: --confusion $tmp/no/c.csv" "$tmp/x.err" && pass || fail "a missing folder: $(cat "$tmp/x.err" "$tmp/x.out")"
testing_finish cli_eval_report
