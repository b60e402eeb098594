#!/bin/sh
# fuzz_checkpoint_seeds.sh - seeds for tests/fuzz_checkpoint.c: checkpoints
# of a tiny batch-norm model (the fuzzer's own, fuzz_checkpoint.c) trained for
# one epoch on 64 Fashion-MNIST images with each optimizer, then variants a
# Python script writes from them: weights-only (one with another head, for
# --init), one stopped inside an epoch, one with every optional key
# (classes, transforms, hold-out, convolution algorithms). Seconds.
#   tests/fuzz_checkpoint_seeds.sh DPTRAIN_BINARY OUT_DIR [DATA_DIR]
set -eu
dptrain=$1
out=$2
data=${3:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
# the work below runs in "$work": the paths given, made absolute first
# (a binary named without a slash is looked for on PATH)
case $dptrain in */*) dptrain=$(cd "$(dirname "$dptrain")" && pwd)/$(basename "$dptrain") ;; esac
out=$(cd "$out" && pwd)
data=$(cd "$data" && pwd)
cat > "$work/tiny_bn.cfg" <<'CFG'
[net]
name = tiny_bn
channels = 1
height = 28
width = 28

[conv]
name = conv1
filters = 2
size = 7
stride = 7

[batchnorm]
name = bn1

[relu]

[flatten]

[linear]
name = fc
out = 10
CFG
cd "$work"
run() { "$dptrain" train --model tiny_bn.cfg --data "$data" --limit 64 --epochs 1 --batch-size 32 --quiet "$@" >/dev/null; }
run --save sgd.safetensors
run --batch-size 16 --optimizer adam --save adam.safetensors
run --optimizer momentum --lr-schedule cosine --freeze conv1 --normalize 0.3,0.4 --save mom.safetensors
run --optimizer adagrad --lr-schedule step --lr-step-epochs 1 --save adagrad.safetensors
run --optimizer adamw --save adamw.safetensors
cat > derive.py <<'PY'
import json, struct, sys
def load(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop('__metadata__')
    data = b[8 + n:]
    tensors = [(k, v['shape'], data[v['data_offsets'][0]:v['data_offsets'][1]]) for k, v in h.items()]
    return meta, tensors
def save(path, meta, tensors):
    h = {'__metadata__': meta}
    off = 0
    for name, shape, raw in tensors:
        h[name] = {'dtype': 'F32', 'shape': shape, 'data_offsets': [off, off + len(raw)]}
        off += len(raw)
    text = json.dumps(h, separators=(',', ':')).encode()
    text += b' ' * ((-8 - len(text)) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(text)) + text + b''.join(t[2] for t in tensors))
out = sys.argv[1]
meta, tensors = load('sgd.safetensors')
params = [t for t in tensors if not t[0].startswith('optimizer.')]
save(out + '/weights_only', {'format': 'dptrain-checkpoint', 'format_version': '2', 'model': 'tiny_bn.cfg',
                             'weights_only': '1', 'model_text': meta['model_text'],
                             'data.normalize': '0.5,0.25', 'data.classes': '["cat","dog","\\u00e9t\\u00e9"]'}, params)
head5 = [(n, [5] + s[1:], r[:len(r) // s[0] * 5]) if n.startswith('fc.') else (n, s, r) for n, s, r in params]
save(out + '/weights_only_head5', {'format': 'dptrain-checkpoint', 'format_version': '2', 'model': 'tiny_bn',
                                   'weights_only': '1', 'model_fingerprint': meta['model_fingerprint']}, head5)
meta, tensors = load('adam.safetensors')
m = dict(meta)
m.update({'loader.batch': '2', 'epoch.loss_sums': '1.5,2.25', 'epoch.correct': '3,4', 'epoch.examples': '32'})
save(out + '/adam_mid_epoch', m, tensors)
meta, tensors = load('mom.safetensors')
m = dict(meta)
m.update({'data.classes': '["a","b\\"q","c"]', 'data.transform': 'resize 32, exif ignore',
          'data.train_transform': 'resized-crop, dct-scale off, auto-augment ra 9', 'data.holdout': '0.1', 'data.val_image_size': '24x32', 'label_smoothing': '0.1', 'clip_grad_norm': '2.5',
          'mixup_alpha': '0.2', 'cutmix_alpha': '1', 'random_erase': '0.25', 'data.ra_reps': '4', 'early_stop': '3',
          'optimizer.norm_weight_decay': '0', 'optimizer.bias_weight_decay': '0.05',
          'cuda.conv_algorithms': '[{"key":"NVIDIA H100|cudnn 90100|fwd n32 c1 h28 w28 k2 r7 s7","algo":1},{"key":"b","algo":99}]'})
save(out + '/momentum_all_keys', m, tensors)
m.update({'data.train_transform': 'resized-crop, dct-scale off, color-jitter 0.123456,0.4,0.4,0.5'})
save(out + '/momentum_color_jitter', m, tensors)
PY
python3 derive.py "$out"
cp sgd.safetensors "$out/sgd"
cp adam.safetensors "$out/adam"
cp adagrad.safetensors "$out/adagrad"
cp adamw.safetensors "$out/adamw"
cp mom.safetensors "$out/momentum_frozen"
