#!/usr/bin/env bash
# cli_eval_mpi.sh - `dptrain eval` under mpirun (Open MPI on localhost; as
# root, --allow-run-as-root; --oversubscribe for more ranks than cores), as
# torchvision's --test-only under torchrun: every rank evaluates its share
# of the test set on its devices, the counts and the confusion matrix are
# summed over the ranks, rank 0 alone prints and writes.
# - LeNet (Paddle's) trained 1 epoch on a 1,200/301 cut of Fashion-MNIST;
#   eval --per-class --confusion in one process, then under mpirun with 1, 2
#   and 3 ranks x 1 and 2 devices, and 3 ranks x 2 devices at --batch-size 7
#   (uneven shards, a short last batch): the same output (the result line,
#   the top-5 line, and the table, printed once) and the same CSV bytes as
#   one process,
#   nothing on stderr, the CSV file alone in its folder (written once, by
#   rank 0; no temporary file left);
# - failures end the whole job, non-zero, with one line, nothing written:
#   a truncated checkpoint (every rank fails: rank 0 says it); a --confusion
#   path that cannot be written (rank 0 checks it before the evaluation);
#   the checkpoint missing on rank 1 only (mpirun -wdir: the same options;
#   rank 0 says "rank 1 of 2: ..."); ranks started with different options;
#   rank 1's trainer failing after the ranks agreed to start (a bad
#   DPTRAIN_GRAD_LIVENESS on rank 1 alone: it names itself and ends the job,
#   no hang);
# - --image-size 24 of a global-pooling network trained at 16 on an image
#   folder: 2 ranks x 1 and 2 devices print one process's line; LeNet at
#   40 refused in one line by rank 0.
source "$(dirname "$0")/testing.sh"
command -v mpirun >/dev/null || { echo "cli_eval_mpi: mpirun not found (openmpi-bin)"; echo "cli_eval_mpi: 0 passed, 1 failed"; exit 1; }
mpi=(timeout 60 mpirun --allow-run-as-root --oversubscribe)

small_data "$tmp/small" 1200 301
"$bin" train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 50 --lr 0.1 --devices 2 --seed 1 \
  --save "$tmp/ck.st" --quiet >/dev/null 2>&1 && pass || fail "training"
eval_args=(eval --resume "$tmp/ck.st" --data "$tmp/small" --per-class)
mkdir "$tmp/one"
"$bin" "${eval_args[@]}" --devices 1 --confusion "$tmp/one/c.csv" >"$tmp/one.out" 2>"$tmp/one.err" && pass \
  || fail "eval in one process: $(cat "$tmp/one.out" "$tmp/one.err")"
cat "$tmp/one.out"
[[ $(grep -c '^test acc: [0-9.]* ([0-9]*/301 correct) on 301 images' "$tmp/one.out") -eq 1 && -s "$tmp/one/c.csv" ]] \
  && pass || fail "one process: no result line or no CSV: $(cat "$tmp/one.out")"
# 10 outputs: the top-5 line too, which the runs below must print alike (their counts summed over the ranks)
[[ $(sed -n 2p "$tmp/one.out") =~ ^top-5\ acc:\ [0-9.]+\ \(([0-9]+)/301\ in\ the\ top\ 5\)$ ]] \
  && [[ ${BASH_REMATCH[1]} -gt $(sed -nE 's/^test acc: [0-9.]+ \(([0-9]+)\/301 correct\).*/\1/p' "$tmp/one.out") ]] \
  && pass || fail "one process: no top-5 line above the correct count: $(cat "$tmp/one.out")"
# same_as_one NAME MPIRUN_ARGS... -- EVAL_ARGS...: eval under mpirun prints and writes what one process does
same_as_one() {
  local name=$1 margs=() ; shift
  while [[ $1 != -- ]]; do margs+=("$1"); shift; done
  shift
  mkdir "$tmp/$name"
  "${mpi[@]}" "${margs[@]}" "$bin" "${eval_args[@]}" "$@" --confusion "$tmp/$name/c.csv" >"$tmp/$name.out" \
    2>"$tmp/$name.err" && pass || fail "$name: exit $?: $(cat "$tmp/$name.out" "$tmp/$name.err")"
  cmp "$tmp/one.out" "$tmp/$name.out" && pass || fail "$name: the output differs from one process's: $(cat "$tmp/$name.out")"
  cmp "$tmp/one/c.csv" "$tmp/$name/c.csv" && pass || fail "$name: the CSV differs from one process's"
  [[ ! -s "$tmp/$name.err" ]] && pass || fail "$name: stderr: $(cat "$tmp/$name.err")"
  [[ "$(ls -A "$tmp/$name")" == c.csv ]] && pass || fail "$name: files written: $(ls -A "$tmp/$name")"
}
for np in 1 2 3; do
  for d in 1 2; do same_as_one "np$np-d$d" -np $np -- --devices $d; done
done
same_as_one "np3-d2-b7" -np 3 -- --devices 2 --batch-size 7

# Each rank evaluates its share alone: rank 0 and rank 1 read the same relative paths in folders of their own
# (mpirun -wdir), rank 1's test labels all moved by one class; 2 ranks x 1 device take images 0..150 and
# 151..300 of the one batch of 301, so the job counts what one process counts on the first 151 labels of the
# true file followed by the last 150 of the moved one.
labels=t10k-labels-idx1-ubyte
for w in r0 r1 spliced; do mkdir -p "$tmp/$w/d" && cp "$tmp/ck.st" "$tmp/$w/" && cp "$tmp/small"/*-images-* "$tmp/small/train-labels-idx1-ubyte" "$tmp/$w/d/"; done
cp "$tmp/small/$labels" "$tmp/r0/d/"
{ head -c 8 "$tmp/small/$labels"; tail -c +9 "$tmp/small/$labels" | tr '\000-\011' '\001-\011\000'; } >"$tmp/r1/d/$labels"
{ head -c $((8 + 151)) "$tmp/small/$labels"; tail -c +$((9 + 151)) "$tmp/r1/d/$labels"; } >"$tmp/spliced/d/$labels"
share=(eval --resume ck.st --data d --devices 1 --per-class --confusion c.csv)
(cd "$tmp/spliced" && "$bin" "${share[@]}" >out 2>&1) && pass || fail "one process, spliced labels: $(cat "$tmp/spliced/out")"
"${mpi[@]}" -np 1 -wdir "$tmp/r0" "$bin" "${share[@]}" : -np 1 -wdir "$tmp/r1" "$bin" "${share[@]}" >"$tmp/r0/out" 2>&1 \
  && pass || fail "2 ranks, each its own labels: $(cat "$tmp/r0/out")"
cmp "$tmp/spliced/out" "$tmp/r0/out" && cmp "$tmp/spliced/c.csv" "$tmp/r0/c.csv" && ! cmp -s "$tmp/one.out" "$tmp/r0/out" \
  && pass || fail "2 ranks did not count each rank's share: $(cat "$tmp/r0/out") vs one process $(cat "$tmp/spliced/out")"
[[ ! -e "$tmp/r1/c.csv" ]] && pass || fail "rank 1 wrote the CSV"

# fails JOB_NAME MESSAGE MPIRUN_ARGS...: the job ended non-zero, one dptrain line naming MESSAGE, no result
fails() {
  local name=$1 message=$2 status; shift 2
  "$@" >"$tmp/f.out" 2>"$tmp/f.err"
  status=$?
  [[ $status -ne 0 && $status -ne 124 ]] && pass || fail "$name: exit $status"
  [[ $(grep -c '^dptrain:' "$tmp/f.err") -eq 1 ]] && grep -q "^dptrain: $message" "$tmp/f.err" && pass \
    || fail "$name: not one line '$message': $(cat "$tmp/f.err")"
  ! grep -q "test acc" "$tmp/f.out" && pass || fail "$name: a result printed: $(cat "$tmp/f.out")"
}
head -c 100 "$tmp/ck.st" >"$tmp/bad.st"
fails "a truncated checkpoint" "$tmp/bad.st: header length" \
  "${mpi[@]}" -np 2 "$bin" eval --resume "$tmp/bad.st" --data "$tmp/small" --devices 1
fails "--confusion in a missing folder" "eval: --confusion $tmp/no/c.csv" \
  "${mpi[@]}" -np 2 "$bin" "${eval_args[@]}" --devices 1 --confusion "$tmp/no/c.csv"
[[ ! -e "$tmp/no" ]] && pass || fail "--confusion in a missing folder: $tmp/no made"
mkdir "$tmp/w0" "$tmp/w1" && cp "$tmp/ck.st" "$tmp/w0/ck.st"
fails "the checkpoint missing on rank 1" "rank 1 of 2: ck.st: cannot open" \
  "${mpi[@]}" -np 1 -wdir "$tmp/w0" "$bin" eval --resume ck.st --data "$tmp/small" --devices 1 --confusion c.csv : \
  -np 1 -wdir "$tmp/w1" "$bin" eval --resume ck.st --data "$tmp/small" --devices 1 --confusion c.csv
[[ "$(ls -A "$tmp/w0")" == ck.st && -z "$(ls -A "$tmp/w1")" ]] && pass \
  || fail "the checkpoint missing on rank 1: files written: $(ls -A "$tmp/w0" "$tmp/w1")"
fails "different options" "rank 1's options differ from rank 0's" \
  "${mpi[@]}" -np 1 "$bin" "${eval_args[@]}" --devices 1 : -np 1 "$bin" "${eval_args[@]}" --devices 2
fails "rank 1's trainer fails alone" "rank 1 of 2: DPTRAIN_GRAD_LIVENESS=bogus" \
  "${mpi[@]}" -np 1 "$bin" "${eval_args[@]}" --devices 1 : -np 1 -x DPTRAIN_GRAD_LIVENESS=bogus "$bin" \
  "${eval_args[@]}" --devices 1

# --image-size under mpirun: a global-pooling network trained at 16 x 16 on a folder of random RGB images,
# evaluated at 24 x 24: 2 ranks x 1 and 2 devices print what one process prints; LeNet at 40 is refused in one line
"${PYTHON:-/usr/bin/python3}" "$(dirname "$0")/random_image_folder.py" "$tmp/folder" 32 21 3 20x30,21x29,22x28,23x27,24x26,25x30,26x29 && pass \
  || fail "making the image folder"
printf '[net]\nchannels = 3\nheight = 16\nwidth = 16\n[conv]\nname = conv\nfilters = 8\nsize = 3\n%b' \
  'activation = relu\n[global_avgpool]\n[flatten]\n[linear]\nname = fc\nout = 3\n' >"$tmp/pool.cfg"
"$bin" train --model "$tmp/pool.cfg" --data "$tmp/folder" --epochs 1 --batch-size 8 --seed 1 --save "$tmp/pool.st" \
  --quiet >/dev/null 2>&1 && pass || fail "training the pooling network"
sized=(eval --resume "$tmp/pool.st" --data "$tmp/folder" --image-size 24)
"$bin" "${sized[@]}" --devices 1 >"$tmp/sized.out" 2>&1 && grep -q "^test acc: .*, input 24x24 (resize 27)$" \
  "$tmp/sized.out" && pass || fail "--image-size 24 in one process: $(cat "$tmp/sized.out")"
for d in 1 2; do
  "${mpi[@]}" -np 2 "$bin" "${sized[@]}" --devices $d >"$tmp/sized-$d.out" 2>&1 \
    && cmp -s "$tmp/sized.out" "$tmp/sized-$d.out" && pass \
    || fail "--image-size 24, 2 ranks x $d devices: $(cat "$tmp/sized-$d.out") against one process's $(cat "$tmp/sized.out")"
done
fails "LeNet at 40" "eval: --image-size 40: model lenet-paddle's layer" \
  "${mpi[@]}" -np 2 "$bin" eval --resume "$tmp/ck.st" --data "$tmp/small" --devices 1 --image-size 40
testing_finish cli_eval_mpi
