#!/usr/bin/env bash
# cli_image_list.sh - `dptrain train` and `eval` on image lists
# (src/data/image_list.c; docs/data.md "Image lists"): the same images and
# labels given by a text or CSV file of PATH LABEL lines instead of class
# folders. On a random folder of 3 classes (48 training, 12 test images):
# - DIR/train.csv (a header, quoted paths) beside DIR/val.txt, listing the
#   folder's files in its index order, train to the same tensors and losses
#   as the folder itself (train/ and test/) on 2 devices; eval of the
#   list run's checkpoint (its data.dir the list's folder) gives the folder
#   run's last test accuracy;
# - a list given as --data (FOLDER/all.txt, the test split held out) trains
#   to the same tensors as the class folders alone (the hold-out hashes the
#   path below the list's folder, as below the folder's), also from another
#   working folder with a relative path; eval --resume needs no --data;
# - numbered labels (PaddleClas's lists): the classes are 0 .. the largest,
#   and eval reads the list's own numbers;
# - refused in one line, exit 1, nothing written: a line without a label, a
#   test label that is no training class, a file that is neither a folder
#   nor a .txt or .csv list.
source "$(dirname "$0")/testing.sh"
py=/usr/bin/python3
"$py" "$(dirname "$0")/random_image_folder.py" "$tmp/f" 48 12 3 20x20 >/dev/null && pass || fail "making the folder"

# the lists: every file of a split in the folder's index order (classes sorted, files sorted)
"$py" - "$tmp" <<'EOF' && pass || fail "writing the lists"
import os, sys
tmp = sys.argv[1]
def entries(top):
    return [(f"{c}/{n}", c) for c in sorted(os.listdir(top)) if os.path.isdir(f"{top}/{c}")
            for n in sorted(os.listdir(f"{top}/{c}"))]
os.makedirs(f"{tmp}/lists")
with open(f"{tmp}/lists/train.csv", "w") as f:
    f.write("image,label\n")
    for p, c in entries(f"{tmp}/f/train"):
        f.write(f'"../f/train/{p}",{c}\n')
with open(f"{tmp}/lists/val.txt", "w") as f:
    f.write("# path label\n")
    for p, c in entries(f"{tmp}/f/test"):
        f.write(f"../f/test/{p} {c}\n")
os.symlink(f"{tmp}/f/train", f"{tmp}/flat")   # class folders alone
with open(f"{tmp}/f/train/all.txt", "w") as f:
    for p, c in entries(f"{tmp}/f/train"):
        f.write(f"{p} {c}\n")
classes = sorted(c for c in os.listdir(f"{tmp}/f/train") if os.path.isdir(f"{tmp}/f/train/{c}"))
with open(f"{tmp}/f/train/numbers.txt", "w") as f:
    for p, c in entries(f"{tmp}/f/train"):
        if not p.endswith(".txt"):
            f.write(f"{p} {classes.index(c)}\n")
EOF
common=(train --model lenet-cifar --image-size 32 --num-classes 3 --epochs 2 --batch-size 16 --seed 4)

# 1. train.csv + val.txt against the folder's train/ and test/
train_run folder 2 --data "$tmp/f"
train_run lists 2 --data "$tmp/lists"
same_run folder lists
grep -q "(test 12)," "$tmp/lists.out" && pass || fail "lists: not 12 test images: $(grep training "$tmp/lists.out")"
[[ $(meta_value "$tmp/lists.st" data.dir) == "$tmp/lists" ]] && pass \
  || fail "data.dir: $(meta_value "$tmp/lists.st" data.dir)"
"$bin" eval --resume "$tmp/lists.st" >"$tmp/eval.out" 2>&1 && pass || fail "eval of the list run: $(cat "$tmp/eval.out")"
want=$(json_field "$(tail -1 "$tmp/folder.jsonl")" test_acc)
got=$(sed -n 's/^test acc: \([0-9.]*\) .*/\1/p' "$tmp/eval.out")
"$py" -c "import sys; sys.exit(abs(float('$want') - float('$got')) > 5e-5)" && pass \
  || fail "eval of the lists' run: test acc $got, the folder run's last $want"

# 2. a list as the data, the test split held out, against the class folders alone; from another folder
train_run flat 1 --data "$tmp/flat"
train_run all 1 --data "$tmp/f/train/all.txt"
same_run flat all
mkdir -p "$tmp/elsewhere/f/train" # a decoy: the list's paths are relative to the list, not to the working folder
(cd "$tmp" && "$bin" "${common[@]}" --devices 1 --data f/train/all.txt --save "$tmp/rel.st" >"$tmp/rel.out" 2>&1) \
  && pass || fail "a relative list path: $(tail -2 "$tmp/rel.out")"
same_tensors "$tmp/flat.st" "$tmp/rel.st" && pass || fail "a relative list path trained to other tensors"
(cd "$tmp/elsewhere" && "$bin" eval --resume "$tmp/all.st" >"$tmp/eval_all.out" 2>&1) && pass \
  || fail "eval of the held-out list run: $(cat "$tmp/eval_all.out")"
held=$(sed -n 's/.*(test \([0-9]*\) held out.*/\1/p' "$tmp/flat.out")
[[ -n $held ]] && grep -q "on $held images" "$tmp/eval_all.out" && pass \
  || fail "eval: not the folder's ${held:-?} held-out images: $(cat "$tmp/eval_all.out")"

# 3. numbered labels
train_run numbers 1 --data "$tmp/f/train/numbers.txt"
same_tensors "$tmp/flat.st" "$tmp/numbers.st" && pass || fail "numbered labels trained to other tensors"
"$bin" inspect "$tmp/numbers.st" 2>&1 | grep -q 'data.classes = \["0","1","2"\]' && pass \
  || fail "class names: $("$bin" inspect "$tmp/numbers.st" 2>&1 | grep data.classes)"

# 4. refused
printf 'c0/0.png c0\nc1/1.png\n' >"$tmp/f/train/nolabel.txt"
refused_run "nolabel.txt:2: 'c1/1.png' has no label (a text list's line is PATH LABEL)" "${common[@]}" \
  --data "$tmp/f/train/nolabel.txt"
mkdir -p "$tmp/bad" && cp "$tmp/lists/train.csv" "$tmp/bad/" && printf '../f/test/c0/x.png zebra\n' >"$tmp/bad/val.txt"
refused_run "val.txt:1: label 'zebra' is not one of the 3 classes" "${common[@]}" --data "$tmp/bad"
refused_run "is not a data directory (nor an image list: a .txt or .csv file)" "${common[@]}" \
  --data "$tmp/lists.out"
testing_finish cli_image_list
