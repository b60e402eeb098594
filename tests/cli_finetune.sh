#!/usr/bin/env bash
# cli_finetune.sh - `dptrain train --init FILE` and `--freeze LAYERS` end to
# end, on the first Fashion-MNIST images (LeNet, and tiny_resnet.cfg for
# batch norm), from a checkpoint trained here:
# - --init with --freeze conv1,conv2 (adam, 2 devices): conv1's and conv2's
#   tensors are byte for byte the file's after training, fc1 and fc2
#   changed; the optimizer's state is 8 tensors (fc1, fc2: 2 states each),
#   model.freeze is recorded; the first lines say what was loaded and what
#   is frozen; the same with adamw and a strong decay (--weight-decay 0.5:
#   the decay, applied even where the gradient is 0, must not reach the
#   frozen tensors), and with --sync ps too: the parameter server's run is
#   the allreduce's, byte for byte (parameters and optimizer state);
# - --init with another --normalize: this run's applies (saved), with a
#   warning; `dptrain eval` reads a frozen run's checkpoint;
# - with batch norm: frozen layers' running statistics stay the file's,
#   byte for byte, a trained layer's change;
# - on the CUDA emulator (builds with CUDA): cuda:0 with step graphs and 2
#   emulated GPUs keep the frozen tensors, cuda:0 within 1e-5 of cpu:0;
# - a resume keeps the freeze: 1 epoch + a resume without --freeze (or with
#   the same layers spelled otherwise) = 2 epochs straight, byte for byte;
#   a resume with another --freeze is refused naming a tensor;
# - `dptrain launch --restarts 1` of a fine-tuning job (--init, --freeze)
#   whose rank is killed in epoch 2: the restart resumes from the save
#   (launch drops --init) and ends byte for byte where 2 epochs straight do,
#   with --fresh-head too (the head the model's own: not the run without it);
# - 1 device, 2 devices, 2 MPI ranks with --freeze conv1: 2 ranks = 2
#   devices bit for bit (overlapped sums), 1 device within 1e-5 of each
#   tensor's largest value (training.md's tolerance), conv1 the file's in
#   all three;
# - refused, one line on stderr, exit 1, no checkpoint or metrics written:
#   --init with --resume (also where the resumed checkpoint's model does not
#   fit this data), a tensor of another shape (named with both
#   shapes), a tensor the file lacks, an unknown --freeze name, a prefix that
#   is not whole components (conv for conv1), a list freezing everything,
#   an --init file that does not exist; --num-classes of a built-in
#   network, below the data's classes, of a model file without a linear
#   layer;
# - --num-classes 12 of models/lenet.cfg trains as the file with out = 12
#   does, byte for byte, and the checkpoint holds that text (eval reads it);
#   --image-size 32 of tiny_resnet.cfg on a folder of 28 x 28 PNGs as the
#   file at 32 x 32 does; refused: a built-in network, a value that is no
#   size, a size the model's layers do not fit.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
# st_differ A B NAME...: the NAMEs whose tensors differ between checkpoints A and B (or are missing)
st_differ() {
  "$py" - "$@" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    h = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + h]), b, 8 + h
(ha, ba, oa), (hb, bb, ob) = load(sys.argv[1]), load(sys.argv[2])
for name in sys.argv[3:]:
    if name not in ha or name not in hb:
        print(name); continue
    (s, e), (t, f) = ha[name]["data_offsets"], hb[name]["data_offsets"]
    if ba[oa + s:oa + e] != bb[ob + t:ob + f]: print(name)
EOF
}
# st_meta FILE KEY; st_names FILE PREFIX: the tensors whose names start with PREFIX, sorted
st_meta() { "$py" -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); h=struct.unpack("<Q",b[:8])[0]; print(json.loads(b[8:8+h]).get("__metadata__",{}).get(sys.argv[2],""))' "$1" "$2"; }
st_names() { "$py" -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); h=struct.unpack("<Q",b[:8])[0]; print(" ".join(sorted(k for k in json.loads(b[8:8+h]) if k.startswith(sys.argv[2]))))' "$1" "$2"; }
mpi=(mpirun --allow-run-as-root --oversubscribe)

small_data "$tmp/fm" 3000 500
common=(train --data "$tmp/fm" --batch-size 100 --seed 1)
lenet=(conv1.weight conv1.bias conv2.weight conv2.bias fc1.weight fc1.bias fc2.weight fc2.bias)
"$bin" "${common[@]}" --model lenet --lr 0.1 --optimizer momentum --limit 2000 --epochs 1 --devices 1 \
  --quiet --save "$tmp/pre.st" >"$tmp/pre.out" 2>&1 && pass || fail "pretraining: $(tail -3 "$tmp/pre.out")"

# --init + --freeze: the frozen tensors are the file's, the others trained
"$bin" "${common[@]}" --model lenet --optimizer adam --lr 0.002 --limit 2000 --epochs 1 --devices 2 \
  --init "$tmp/pre.st" --freeze conv1,conv2 --save "$tmp/ft.st" >"$tmp/ft.out" 2>&1 \
  && pass || fail "--init --freeze: $(tail -3 "$tmp/ft.out")"
[[ -z "$(st_differ "$tmp/pre.st" "$tmp/ft.st" conv1.weight conv1.bias conv2.weight conv2.bias)" ]] && pass \
  || fail "frozen tensors changed: $(st_differ "$tmp/pre.st" "$tmp/ft.st" conv1.weight conv1.bias conv2.weight conv2.bias)"
[[ "$(st_differ "$tmp/pre.st" "$tmp/ft.st" fc1.weight fc1.bias fc2.weight fc2.bias | wc -l)" == 4 ]] && pass \
  || fail "fc1 and fc2 did not all train"
expected="optimizer.fc1.bias.exp_avg optimizer.fc1.bias.exp_avg_sq optimizer.fc1.weight.exp_avg optimizer.fc1.weight.exp_avg_sq optimizer.fc2.bias.exp_avg optimizer.fc2.bias.exp_avg_sq optimizer.fc2.weight.exp_avg optimizer.fc2.weight.exp_avg_sq"
[[ "$(st_names "$tmp/ft.st" optimizer.)" == "$expected" ]] && pass || fail "optimizer state: $(st_names "$tmp/ft.st" optimizer.)"
[[ "$(st_meta "$tmp/ft.st" model.freeze)" == conv1,conv2 && -z "$(st_meta "$tmp/pre.st" model.freeze)" ]] && pass \
  || fail "model.freeze: '$(st_meta "$tmp/ft.st" model.freeze)', before '$(st_meta "$tmp/pre.st" model.freeze)'"
grep -q "^initialised from $tmp/pre.st (parameters and batch norm statistics, 1 epoch of lenet)$" "$tmp/ft.out" && pass \
  || fail "no 'initialised from' line: $(head -4 "$tmp/ft.out")"
grep -q "^frozen: conv1,conv2 (2 layers; 103818 of 129068 parameters train)$" "$tmp/ft.out" && pass \
  || fail "no 'frozen:' line: $(head -4 "$tmp/ft.out")"
# adamw: its decoupled decay leaves the frozen tensors alone; --sync ps the same run as allreduce
for sync in allreduce ps; do
  "$bin" "${common[@]}" --model lenet --optimizer adamw --lr 0.002 --weight-decay 0.5 --limit 2000 --epochs 1 \
    --devices 2 --sync $sync --init "$tmp/pre.st" --freeze conv1,conv2 --save "$tmp/ftw-$sync.st" >"$tmp/ftw.out" 2>&1 \
    && pass || fail "adamw --init --freeze --sync $sync: $(tail -3 "$tmp/ftw.out")"
  [[ -z "$(st_differ "$tmp/pre.st" "$tmp/ftw-$sync.st" conv1.weight conv1.bias conv2.weight conv2.bias)" ]] && pass \
    || fail "adamw --sync $sync: frozen tensors changed: $(st_differ "$tmp/pre.st" "$tmp/ftw-$sync.st" conv1.weight conv1.bias conv2.weight conv2.bias)"
  [[ "$(st_differ "$tmp/pre.st" "$tmp/ftw-$sync.st" fc1.weight fc1.bias fc2.weight fc2.bias | wc -l)" == 4 \
     && "$(st_names "$tmp/ftw-$sync.st" optimizer.)" == "$expected" ]] && pass \
    || fail "adamw --sync $sync: fc1 and fc2 did not all train, or the state is not theirs: $(st_names "$tmp/ftw-$sync.st" optimizer.)"
done
same_tensors "$tmp/ftw-allreduce.st" "$tmp/ftw-ps.st" && pass || fail "adamw with --freeze: --sync ps differs from allreduce"

# the new run's normalisation applies, with a warning; a frozen run's checkpoint evaluates as any other
"$bin" "${common[@]}" --model lenet --limit 500 --epochs 1 --quiet --init "$tmp/pre.st" --normalize 0.3,0.3 \
  --save "$tmp/norm.st" >"$tmp/norm.out" 2>&1 && pass || fail "--init --normalize: $(tail -3 "$tmp/norm.out")"
grep -qF "warning: --init $tmp/pre.st: trained with --normalize (none), this run has 0.300000012,0.300000012" \
  "$tmp/norm.out" && pass || fail "no warning about the normalisation: $(cat "$tmp/norm.out")"
[[ "$(st_meta "$tmp/norm.st" data.normalize)" == 0.300000012,0.300000012 ]] && pass \
  || fail "data.normalize: $(st_meta "$tmp/norm.st" data.normalize)"
"$bin" eval --resume "$tmp/ft.st" --data "$tmp/fm" >"$tmp/eval.out" 2>&1 && grep -q "^test acc: " "$tmp/eval.out" \
  && pass || fail "eval of a frozen run's checkpoint: $(cat "$tmp/eval.out")"

# batch norm: the frozen layers' running statistics stay the file's
bn=(--model "$src/tests/models/tiny_resnet.cfg" --lr 0.1 --optimizer momentum --limit 1000 --epochs 1 --devices 2 --quiet)
"$bin" "${common[@]}" "${bn[@]}" --save "$tmp/bn-pre.st" >"$tmp/bn.out" 2>&1 && pass || fail "tiny_resnet: $(tail -3 "$tmp/bn.out")"
"$bin" "${common[@]}" "${bn[@]}" --init "$tmp/bn-pre.st" --freeze stem,stem_bn,block.conv1,block.bn1 \
  --save "$tmp/bn-ft.st" >"$tmp/bn.out" 2>&1 && pass || fail "tiny_resnet --freeze: $(tail -3 "$tmp/bn.out")"
frozen_bn=(stem.weight stem_bn.weight stem_bn.bias stem_bn.running_mean stem_bn.running_var block.conv1.weight
           block.bn1.running_mean block.bn1.running_var)
[[ -z "$(st_differ "$tmp/bn-pre.st" "$tmp/bn-ft.st" "${frozen_bn[@]}")" ]] && pass \
  || fail "frozen batch norm changed: $(st_differ "$tmp/bn-pre.st" "$tmp/bn-ft.st" "${frozen_bn[@]}")"
[[ "$(st_differ "$tmp/bn-pre.st" "$tmp/bn-ft.st" block.bn2.running_mean block.bn2.running_var block.bn2.weight | wc -l)" == 3 ]] \
  && pass || fail "block.bn2 (trained) did not change"

# the CUDA backend (a build with CUDA: its emulator), the same frozen run on cuda:0 (steps captured as a
# graph) and on 2 emulated GPUs: the frozen tensors stay the file's, cuda:0 within 1e-5 of cpu:0
emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e $emu ]]; then
  small_data "$tmp/emu" 96 8
  gpu=(train --data "$tmp/emu" --limit 96 --batch-size 24 --lr 0.1 --seed 3 --model "$src/tests/models/tiny_resnet.cfg"
       --epochs 1 --init "$tmp/bn-pre.st" --freeze stem,stem_bn,block.conv1)
  for devices in cpu:0 cuda:0 cuda:0,cuda:1; do
    DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2 "$bin" "${gpu[@]}" --devices $devices --save "$tmp/gpu-$devices.st" \
      >"$tmp/gpu.out" 2>&1 && pass || fail "$devices: $(tail -3 "$tmp/gpu.out")"
    [[ -z "$(st_differ "$tmp/bn-pre.st" "$tmp/gpu-$devices.st" stem.weight stem_bn.running_mean stem_bn.running_var \
      block.conv1.weight)" ]] && pass || fail "$devices: frozen tensors changed"
    [[ $devices != cuda:0 ]] || grep -q "^cuda graph: [1-9][0-9]* steps launched as graphs" "$tmp/gpu.out" && pass \
      || fail "cuda:0: no step graph: $(tail -2 "$tmp/gpu.out")"
  done
  worst=$(close_checkpoints "$tmp/gpu-cuda:0.st" "$tmp/gpu-cpu:0.st" 1e-5) && pass || fail "cuda:0 vs cpu:0: $worst"
  echo "--freeze on the CUDA emulator: cuda:0 vs cpu:0: $worst"
else
  echo "cli_finetune: no CUDA emulator in this build (built without CUDA): no GPU runs"
fi

# a resume keeps the freeze
ft=("${common[@]}" --model lenet --optimizer adam --lr 0.002 --limit 2000 --epochs 2 --devices 2)
"$bin" "${ft[@]}" --init "$tmp/pre.st" --freeze conv1,conv2 --save "$tmp/straight.st" >/dev/null 2>&1 && pass \
  || fail "2 epochs straight"
for spelling in none conv2,conv1; do
  "$bin" "${ft[@]}" --init "$tmp/pre.st" --freeze conv1,conv2 --stop-after 1 --save "$tmp/half.st" --quiet >/dev/null 2>&1 \
    && pass || fail "1 epoch"
  freeze=()
  [[ $spelling != none ]] && freeze=(--freeze "$spelling")
  "$bin" "${ft[@]}" --resume "$tmp/half.st" "${freeze[@]}" --save "$tmp/half.st" >"$tmp/resume.out" 2>&1 \
    && pass || fail "resume (--freeze $spelling): $(tail -3 "$tmp/resume.out")"
  grep -q "^frozen: ${spelling/none/conv1,conv2} (2 layers" "$tmp/resume.out" && pass \
    || fail "resume (--freeze $spelling): no 'frozen:' line: $(head -4 "$tmp/resume.out")"
  same_tensors "$tmp/straight.st" "$tmp/half.st" && pass || fail "1 epoch + resume (--freeze $spelling) differs from 2 straight"
done

# a fine-tuning job restarted by `dptrain launch` after a fault resumes from its save (its --init dropped)
if command -v mpirun >/dev/null; then
  DPTRAIN_FAULT=kill:0:25 "$bin" launch --np 1 --restarts 1 -- "${ft[@]}" --init "$tmp/pre.st" --freeze conv1,conv2 \
    --save "$tmp/launched.st" >"$tmp/launch.out" 2>&1 && grep -q "the job finished after 1 restart" "$tmp/launch.out" \
    && pass || fail "launch --restarts with --init: $(tail -4 "$tmp/launch.out")"
  same_tensors "$tmp/straight.st" "$tmp/launched.st" && pass || fail "the restarted fine-tuning differs from 2 epochs straight"
  # with --fresh-head (dropped with --init on the restart, which resumes): as 2 epochs straight with it, not without
  "$bin" "${ft[@]}" --init "$tmp/pre.st" --fresh-head --freeze conv1,conv2 --save "$tmp/straight-fh.st" >/dev/null 2>&1 \
    && pass || fail "2 epochs straight with --fresh-head"
  DPTRAIN_FAULT=kill:0:25 "$bin" launch --np 1 --restarts 1 -- "${ft[@]}" --init "$tmp/pre.st" --fresh-head \
    --freeze conv1,conv2 --save "$tmp/launched-fh.st" >"$tmp/launch-fh.out" 2>&1 \
    && grep -q "the job finished after 1 restart" "$tmp/launch-fh.out" && pass \
    || fail "launch --restarts with --init --fresh-head: $(tail -4 "$tmp/launch-fh.out")"
  same_tensors "$tmp/straight-fh.st" "$tmp/launched-fh.st" && ! same_tensors "$tmp/straight.st" "$tmp/straight-fh.st" \
    && pass || fail "--fresh-head: the restarted run differs from 2 epochs straight, or the head was not fresh"
else
  fail "mpirun not found (openmpi-bin): dptrain launch cannot run"
fi

# 1 device, 2 devices, 2 ranks
dev=("${common[@]}" --model lenet --optimizer momentum --lr 0.05 --limit 1500 --epochs 1 --init "$tmp/pre.st" --freeze conv1
     --quiet)
"$bin" "${dev[@]}" --devices 1 --save "$tmp/one.st" >/dev/null 2>&1 && pass || fail "1 device"
"$bin" "${dev[@]}" --devices 2 --save "$tmp/two.st" >/dev/null 2>&1 && pass || fail "2 devices"
if command -v mpirun >/dev/null; then
  "${mpi[@]}" -np 2 "$bin" "${dev[@]}" --devices 1 --save "$tmp/ranks.st" >"$tmp/ranks.out" 2>&1 && pass \
    || fail "2 ranks: $(tail -3 "$tmp/ranks.out")"
  same_tensors "$tmp/ranks.st" "$tmp/two.st" && pass || fail "--freeze: 2 ranks and 2 devices differ"
else
  fail "mpirun not found (openmpi-bin)"
fi
worst=$(close_checkpoints "$tmp/two.st" "$tmp/one.st" 1e-5) && pass || fail "--freeze: 2 devices vs 1: $worst"
echo "--freeze conv1: 2 devices vs 1 device: $worst"
for run in one two ranks; do
  [[ -z "$(st_differ "$tmp/pre.st" "$tmp/$run.st" conv1.weight conv1.bias)" ]] && pass || fail "$run: conv1 changed"
done
[[ -n "$(st_differ "$tmp/pre.st" "$tmp/one.st" conv2.weight)" ]] && pass || fail "conv2 did not train"

# --num-classes N: the model file's last linear layer with N outputs, the same run as the file edited by hand
sed 's/^out = 10$/out = 12/' "$src/models/lenet.cfg" >"$tmp/lenet12.cfg"
nc=(--init "$tmp/pre.st" --limit 500 --epochs 1 --devices 2 --lr 0.1 --optimizer momentum --quiet)
"$bin" "${common[@]}" "${nc[@]}" --model "$tmp/lenet12.cfg" --save "$tmp/nc-sed.st" >"$tmp/nc.out" 2>&1 \
  && "$bin" "${common[@]}" "${nc[@]}" --model "$src/models/lenet.cfg" --num-classes 12 --save "$tmp/nc.st" \
  >>"$tmp/nc.out" 2>&1 && pass || fail "--num-classes: $(tail -3 "$tmp/nc.out")"
same_tensors "$tmp/nc-sed.st" "$tmp/nc.st" && pass || fail "--num-classes 12 trained otherwise than out = 12 in the file"
[[ "$(st_meta "$tmp/nc.st" model_text)" == "$(cat "$tmp/lenet12.cfg")" ]] && pass \
  || fail "the checkpoint's model text is not the file with out = 12"
"$bin" eval --resume "$tmp/nc.st" --data "$tmp/fm" >"$tmp/nc-eval.out" 2>&1 && grep -q "^test acc" "$tmp/nc-eval.out" \
  && pass || fail "eval of a --num-classes run: $(cat "$tmp/nc-eval.out")"

# --freeze-backbone: every layer but the head, the same run as naming them
fb=(--init "$tmp/pre.st" --model lenet --limit 500 --epochs 1 --devices 2 --lr 0.1 --optimizer momentum)
"$bin" "${common[@]}" "${fb[@]}" --freeze-backbone --save "$tmp/fb.st" >"$tmp/fb.out" 2>&1 \
  && "$bin" "${common[@]}" "${fb[@]}" --freeze conv1,conv2,fc1 --quiet --save "$tmp/fb-named.st" >>"$tmp/fb.out" 2>&1 \
  && pass || fail "--freeze-backbone: $(tail -3 "$tmp/fb.out")"
grep -q "^frozen: conv1,conv2,fc1 (3 layers; 1290 of 129068 parameters train)$" "$tmp/fb.out" && pass \
  || fail "--freeze-backbone's line: $(grep frozen "$tmp/fb.out")"
same_tensors "$tmp/fb.st" "$tmp/fb-named.st" && pass || fail "--freeze-backbone differs from --freeze conv1,conv2,fc1"
[[ "$(st_meta "$tmp/fb.st" model.freeze)" == conv1,conv2,fc1 ]] && pass \
  || fail "model.freeze of --freeze-backbone: $(st_meta "$tmp/fb.st" model.freeze)"

# --image-size: the model file's input size, the same run as the file edited by hand (an image folder of 28 x 28
# PNGs resized to 32 x 32)
"$py" "$src/tools/idx_to_image_folder.py" "$tmp/fm" "$tmp/pngs" --format png --limit-train 300 --limit-test 50 \
  >/dev/null && pass || fail "making a PNG folder"
sed 's/^height = 28$/height = 32/; s/^width = 28$/width = 32/' "$src/tests/models/tiny_resnet.cfg" >"$tmp/tiny32.cfg"
is=(train --data "$tmp/pngs" --batch-size 50 --seed 1 --epochs 1 --devices 2 --quiet)
"$bin" "${is[@]}" --model "$tmp/tiny32.cfg" --save "$tmp/is-sed.st" >"$tmp/is.out" 2>&1 \
  && "$bin" "${is[@]}" --model "$src/tests/models/tiny_resnet.cfg" --image-size 32 --save "$tmp/is.st" >>"$tmp/is.out" \
  2>&1 && pass || fail "--image-size: $(tail -3 "$tmp/is.out")"
same_tensors "$tmp/is-sed.st" "$tmp/is.st" && pass || fail "--image-size 32 trained otherwise than the file at 32"
[[ "$(st_meta "$tmp/is.st" model_text)" == "$(cat "$tmp/tiny32.cfg")" ]] && pass \
  || fail "the checkpoint's model text is not the file at 32 x 32"

# refusals: one line, exit 1, nothing written
sed 's/^filters = 20$/filters = 16/' "$src/models/lenet.cfg" >"$tmp/lenet16.cfg"
refused() { # WHAT EXPECTED ARGS...: exit 1, one line on stderr containing EXPECTED, no files
  local what=$1 expected=$2
  shift 2
  rm -f "$tmp/no.st" "$tmp/no.jsonl"
  "$bin" "${common[@]}" --quiet --save "$tmp/no.st" \
    --metrics "$tmp/no.jsonl" "$@" >"$tmp/out" 2>"$tmp/err"
  local code=$?
  [[ $code == 1 && $(wc -l <"$tmp/err") == 1 ]] && grep -qF -- "$expected" "$tmp/err" && pass \
    || fail "$what: exit $code, stderr: $(cat "$tmp/err")"
  [[ ! -e "$tmp/no.st" && ! -e "$tmp/no.jsonl" ]] && pass || fail "$what: wrote a file"
}
refused "--init with --resume" "--init $tmp/pre.st with --resume $tmp/half.st: --init starts a new run" \
  --init "$tmp/pre.st" --resume "$tmp/half.st" --epochs 3
# the resume's checkpoint of another model and data (tiny_resnet at 32 x 32 on PNGs): the same line, not the data's
refused "--init with --resume of another run" "--init $tmp/pre.st with --resume $tmp/is.st: --init starts a new run" \
  --init "$tmp/pre.st" --resume "$tmp/is.st"
refused "another shape" "tensor 'conv1.weight' has shape [20, 1, 3, 3], model lenet's has shape [16, 1, 3, 3]" \
  --model "$tmp/lenet16.cfg" --init "$tmp/pre.st"
refused "a missing tensor" "has no tensor 'stem.weight', which model tiny_resnet needs" \
  --model "$src/tests/models/tiny_resnet.cfg" --init "$tmp/pre.st"
refused "an unknown layer" "--freeze conv1,conv9: 'conv9' names no layer of model lenet" --freeze conv1,conv9
refused "a partial component" "'conv' names no layer of model lenet" --freeze conv
refused "everything frozen" "freezes every layer of model lenet: nothing would train" --freeze conv1,conv2,fc1,fc2
refused "another freeze on resume" "saved with --freeze conv2,conv1, this run has conv1 (conv2.weight frozen then, not now" \
  --model lenet --limit 2000 --optimizer adam --lr 0.002 --resume "$tmp/half.st" \
  --freeze conv1 --epochs 3
refused "a missing --init file" "$tmp/absent.st" --init "$tmp/absent.st"
refused "--num-classes of a built-in network" \
  "--num-classes: lenet is a built-in network; give its model file, --model lenet.cfg (the same network, which --num-classes edits)" \
  --model lenet --num-classes 12
refused "--num-classes below the data's classes" "has 5 outputs, fewer than the training data's 10 classes" \
  --model "$src/models/lenet.cfg" --num-classes 5
printf '[net]\nchannels = 1\nheight = 28\nwidth = 28\n[flatten]\n' >"$tmp/nohead.cfg"
refused "--image-size of a built-in network" "--image-size: lenet is a built-in network; give its model file, --model lenet.cfg" \
  --model lenet --image-size 32
refused "--image-size that is not a size" "--image-size: '32x' is not N or HxW" --model "$src/models/lenet.cfg" \
  --image-size 32x
refused "--image-size of a model whose layers do not fit it" "lenet.cfg" --model "$src/models/lenet.cfg" --image-size 8
refused "--freeze with --freeze-backbone" "--freeze conv1 and --freeze-backbone: give one of them" \
  --freeze conv1 --freeze-backbone
refused "--freeze-backbone without a head" "has no linear or conv layer: no head to keep training" \
  --model "$tmp/nohead.cfg" --freeze-backbone
refused "--num-classes without a linear layer" "$tmp/nohead.cfg: no [linear] or [conv] layer" --model "$tmp/nohead.cfg" --num-classes 3
testing_finish cli_finetune
