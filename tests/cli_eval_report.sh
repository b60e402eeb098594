#!/usr/bin/env bash
# cli_eval_report.sh - `dptrain eval --per-class` and `--confusion FILE.csv`:
# - LeNet (Paddle's) trained 2 epochs on a 1,200/300 cut of Fashion-MNIST,
#   evaluated on 1 and 2 devices: the outputs and the CSV files are
#   byte-identical, and (check_report below) the matrix (a header of
#   Fashion-MNIST's names, a row per true class) sums to the 300 images, its
#   diagonal to the main line's correct count, each class's row of the
#   table is the matrix's (images, correct, recall, precision or "-", the
#   class most often taken for and how often), the mean recall is theirs,
#   and the top-5 line after the main line counts at least its correct
#   answers;
# - an image folder with classes named `a,b`, `say "hi"`, ` lead`, an
#   accented name in decomposed UTF-8 (as macOS writes folder names), a
#   Chinese one and one of 42 characters, and a model of 8 outputs: the
#   checkpoint's names (sorted, as ImageFolder's) quoted as CSV wants them
#   (read back by Python's csv module), the two outputs beyond them named
#   "(output 6)" and "(output 7)" (no images: recall "-"), the table's
#   columns aligned on a terminal (Python's unicodedata widths), the long
#   name cut to 28 columns;
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
cmp "$tmp/c1.csv" "$tmp/c2.csv" && cmp "$tmp/e1.out" "$tmp/e2.out" && pass \
  || fail "the confusion matrix or the table differs between 1 and 2 devices"
# check_report CSV OUT IMAGES NAME...: the CSV's matrix, eval's main line and its table agree, the columns aligned
cat >"$tmp/check_report.py" <<'PY'
import csv, math, re, sys, unicodedata
csv_path, out_path, images, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
k = len(names)
rows = list(csv.reader(open(csv_path, newline="", encoding="utf-8")))
assert rows[0] == ["true \\ predicted"] + names, rows[0]
assert [r[0] for r in rows[1:]] == names, [r[0] for r in rows[1:]]
m = [[int(v) for v in r[1:]] for r in rows[1:]]
assert sum(map(sum, m)) == images, (sum(map(sum, m)), images)
out = open(out_path, encoding="utf-8").read().splitlines()
correct = int(re.match(r"test acc: [0-9.]+ \((\d+)/%d correct\)" % images, out[0]).group(1))
# more than 5 outputs: the top-5 line, at least the correct answers, then the table as without it
top5 = re.fullmatch(r"top-5 acc: ([0-9.]+) \((\d+)/%d in the top 5\)" % images, out[1])
assert top5 and correct <= int(top5.group(2)) <= images, out[1]
assert top5.group(1) == "%.4f" % (int(top5.group(2)) / images), out[1]
out = out[:1] + out[2:]
assert sum(m[i][i] for i in range(k)) == correct, (sum(m[i][i] for i in range(k)), correct)
def width(s):  # terminal columns: wide East Asian 2, combining marks 0
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)
def cut(s, w):  # the name as a column of w shows it
    if width(s) <= w: return s
    kept = ""
    for c in s:
        if width(kept + c) > w - 3: break
        kept += c
    return kept + "..."
def upto(line, columns):  # the line's first `columns` columns, which must end at a character
    at = 0
    for i, c in enumerate(line):
        if at == columns: return line[:i], line[i:]
        at += width(c)
    assert at == columns, (line, columns)
    return line, ""
header = out[1]
images_end = width(header[:header.index(" images") + len(" images")])
w = images_end - len("class ") - 9  # the name column: then " %8s"
assert header.startswith("class name") and w >= 4, header
table = out[2:2 + k]
recalls = []
for i, line in enumerate(table):
    head, rest = upto(line, images_end)
    assert head[:6] == "%-5d " % i, (i, line)
    name, num = head[6:6 + len(head) - 6 - 9], head[-9:]
    assert upto(head, 6 + w)[1] == num and num[0] == " ", ("not aligned", line, header)
    assert upto(head, 6 + w)[0][6:].rstrip(" ") == cut(names[i], w), (line, cut(names[i], w))
    f = [rest[0:9], rest[9:17], rest[17:27], rest[27:29], rest[29:]]  # " %8s %7s %9s  %s"
    assert all(c[0] == " " and c[-1] != " " for c in f[:3]) and f[3] == "  " and f[4][:1] != " ", ("columns", line)
    images_i, right, recall, precision, taken = int(num), int(f[0]), f[1].strip(), f[2].strip(), f[4]
    col = sum(m[j][i] for j in range(k))
    assert images_i == sum(m[i]) and right == m[i][i], (line, sum(m[i]), m[i][i])
    assert recall == ("-" if images_i == 0 else "%.4f" % (right / images_i)), (line, recall)
    assert precision == ("-" if col == 0 else "%.4f" % (right / col)), (line, col)
    others = [(m[i][j], -j) for j in range(k) if j != i and m[i][j] > 0]
    want = "-" if not others else "%s (%d)" % (cut(names[-max(others)[1]], w), max(others)[0])
    assert taken == want, (line, want)
    if images_i: recalls.append(right / images_i)
mean = re.fullmatch(r"mean recall \(balanced accuracy\): ([0-9.]+) over the (\d+) class(es)? with images", out[2 + k])
assert mean and mean.group(1) == "%.4f" % (sum(recalls) / len(recalls)) and int(mean.group(2)) == len(recalls), out[2 + k]
assert len(out) == 3 + k, out[3 + k:]
print("%s: matrix, table and main line agree: %d of %d on the diagonal, names %d columns" % (out_path, correct, images, w))
PY
check_report() { $py "$tmp/check_report.py" "$@"; }
check_report "$tmp/c2.csv" "$tmp/e2.out" 300 "T-shirt/top" Trouser Pullover Dress Coat Sandal Shirt Sneaker Bag \
  "Ankle boot" && pass || fail "the matrix and the table disagree"

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

# class names CSV must quote, or of any width on a terminal, from an image folder's checkpoint; 8 outputs, 6 classes
pgm() { # FILE K N: a 12x12 gray image of class K (a bright band at rows 2K, 2K+1), N varies it
  local y x v
  { echo P2; echo 12 12; echo 255
    for ((y = 0; y < 12; y++)); do for ((x = 0; x < 12; x++)); do
      if ((y / 2 == $2)); then v=$((180 + (x * 7 + $3 * 13) % 70)); else v=$(((x * 5 + y * 3 + $3 * 11) % 40)); fi
      printf '%d ' $v; done; echo; done; } >"$1"
}
long='a very long class name of forty-two chars'
classes=(' lead' "$long" 'a,b' $'cafe\xcc\x81' 'say "hi"' $'\xe7\x8c\xab') # sorted by bytes, as ImageFolder's
for ((k = 0; k < 6; k++)); do
  mkdir -p "$tmp/imgs/train/${classes[k]}" "$tmp/imgs/test/${classes[k]}"
  for ((n = 0; n < 6; n++)); do pgm "$tmp/imgs/train/${classes[k]}/$n.pgm" $k $n; done
  for ((n = 6; n < 9; n++)); do pgm "$tmp/imgs/test/${classes[k]}/$n.pgm" $k $n; done
done
printf '[net]\nchannels = 1\nheight = 12\nwidth = 12\n\n[flatten]\n\n[linear]\nname = fc\nout = 8\n' >"$tmp/m8.cfg"
"$bin" train --model "$tmp/m8.cfg" --data "$tmp/imgs" --epochs 2 --batch-size 6 --lr 0.1 --devices 1 --quiet \
  --save "$tmp/f.st" >/dev/null 2>&1 && pass || fail "training on the folder"
"$bin" eval --resume "$tmp/f.st" --devices 1 --per-class --confusion "$tmp/f.csv" >"$tmp/f.out" 2>"$tmp/f.err" && pass \
  || fail "eval of the folder: $(cat "$tmp/f.out" "$tmp/f.err")"
cat "$tmp/f.out" "$tmp/f.csv"
head -1 "$tmp/f.csv" | grep -qxF "true \\ predicted,\" lead\",$long,\"a,b\",${classes[3]},\"say \"\"hi\"\"\",${classes[5]},(output 6),(output 7)" \
  && pass || fail "the header's quoting: $(head -1 "$tmp/f.csv")"
check_report "$tmp/f.csv" "$tmp/f.out" 18 "${classes[@]}" "(output 6)" "(output 7)" && pass \
  || fail "the folder's matrix and table disagree"
grep -qF "1     a very long class name of...  " "$tmp/f.out" && pass || fail "the long name: $(cat "$tmp/f.out")"

# a path that cannot be written: refused before the evaluation
"$bin" eval --resume "$tmp/ck.st" --data "$tmp/small" --confusion "$tmp/no/c.csv" >"$tmp/x.out" 2>"$tmp/x.err"
[[ $? -eq 1 && $(wc -l <"$tmp/x.err") -eq 1 && ! -s "$tmp/x.out" && ! -e "$tmp/no" ]] \
  && grep -q "^dptrain: eval: --confusion $tmp/no/c.csv" "$tmp/x.err" && pass || fail "a missing folder: $(cat "$tmp/x.err" "$tmp/x.out")"
testing_finish cli_eval_report
