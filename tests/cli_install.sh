#!/usr/bin/env bash
# cli_install.sh - `cmake --install` into a temporary prefix, then programs
# built out of tree against what was installed:
# - the prefix holds the shared and static libdptrain, every public header,
#   dptrain.pc, the CMake package, the dptrain command and the model files
#   (share/dptrain/models), which the installed dptrain finds by name
#   (--model lenet-cifar), there and not in the source tree;
# - the shared library exports only names declared in include/dptrain/*.h
#   (internal functions of libdptrain.a, e.g. dp_conv_forward, are hidden);
# - examples/multi_device_lenet.c and examples/classify.c build through
#   pkg-config (shared; and static with --static: no libdptrain.so needed)
#   and through CMake (find_package(dptrain): dptrain::dptrain and
#   dptrain::dptrain_static), and run: the book's summary line, and the lines
#   of `dptrain predict --top 1` (class and probability) on test images, of
#   a Fashion-MNIST checkpoint and of an image folder's (Resize + CenterCrop,
#   normalised: classify makes its inputs with dp_predict_image_input);
# - every file in examples/ compiles as a user compiles it, warning-free:
#   `cc -std=c11 -Wall -Wextra -pedantic -Werror FILE $(pkg-config --cflags
#   --libs dptrain)`, with no definitions of its own on the command line.
# The compiler flags of this build (e.g. the sanitizers') are used for the
# out-of-tree programs too.
source "$(dirname "$0")/testing.sh"
py=/usr/bin/python3
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$(dirname "$bin")" && pwd)
prefix="$tmp/prefix"
cflags=$(sed -n 's/^CMAKE_C_FLAGS:STRING=//p' "$build/CMakeCache.txt")
cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.out" 2>&1; then
  fail "cmake --install: $(tail -3 "$tmp/install.out")"; testing_finish cli_install; exit
fi
pass
export PKG_CONFIG_PATH="$(dirname "$(find "$prefix" -name dptrain.pc)")"
libdir=$(realpath "$(pkg-config --variable=libdir dptrain)")
for f in "$libdir/libdptrain.so" "$libdir/libdptrain.a" "$prefix/include/dptrain/image.h" \
         "$prefix/include/dptrain/onnx.h" "$libdir/cmake/dptrain/dptrainConfig.cmake" "$prefix/bin/dptrain"; do
  [[ -e "$f" ]] && pass || fail "not installed: $f"
done
n_src=$(ls "$src"/include/dptrain/*.h | wc -l)
n_inst=$(ls "$prefix"/include/dptrain/*.h | wc -l)
[[ $n_src -eq $n_inst ]] && pass || fail "$n_inst headers installed, $n_src in include/dptrain"
"$prefix/bin/dptrain" version | grep -q '^dptrain ' && pass || fail "installed dptrain version"
# The model files, found by name from the installed program (not from the source tree's models/)
for f in "$src"/models/*.cfg; do
  cmp -s "$f" "$prefix/share/dptrain/models/$(basename "$f")" && pass || fail "not installed: models/$(basename "$f")"
done
"$prefix/bin/dptrain" train --model lenet-cifar --epochs 1 --limit 300 >/dev/null 2>"$tmp/err"
grep -qx "dptrain: model lenet-cifar takes 3x32x32 images, the data in $data has 1x28x28" "$tmp/err" && pass \
  || fail "--model lenet-cifar with the installed dptrain: $(cat "$tmp/err")"
"$prefix/bin/dptrain" train --model no-such-model --epochs 1 >/dev/null 2>"$tmp/err"
grep -qF "(looked for no-such-model.cfg in $(cd "$prefix/share/dptrain/models" && pwd -P))" "$tmp/err" && pass \
  || fail "an unknown name with the installed dptrain: $(cat "$tmp/err")"

# Only the public names are exported.
cat "$prefix"/include/dptrain/*.h | grep -oE '\bdp_[a-z0-9_]+' | sort -u >"$tmp/declared"
nm -D --defined-only "$libdir/libdptrain.so" | awk '{print $3}' | sort -u >"$tmp/exported"
extra=$(comm -23 "$tmp/exported" "$tmp/declared" | head -5)
[[ -z "$extra" ]] && pass || fail "exported but not in the public headers: $extra"
grep -qx dp_predictor_run "$tmp/exported" && grep -qx dp_onnx_export "$tmp/exported" && grep -qx dp_builtin_models "$tmp/exported" \
  && pass || fail "public names missing from the shared library"
nm "$libdir/libdptrain.a" 2>/dev/null | grep -q ' T dp_conv_forward$' && ! grep -qx dp_conv_forward "$tmp/exported" \
  && pass || fail "dp_conv_forward (internal) is not hidden, or not in libdptrain.a"

# A checkpoint and test images for classify.
mkdir -p "$tmp/data" "$tmp/png"
/usr/bin/python3 "$src/tools/check_onnx.py" subset "$data" 256 "$tmp/data"
/usr/bin/python3 "$src/tools/check_onnx.py" pngs "$tmp/data/t10k-images-idx3-ubyte" 8 "$tmp/png"
"$bin" train --data "$tmp/data" --model lenet-paddle --epochs 1 --batch-size 32 --optimizer adam --lr 0.003 \
  --save "$tmp/ck.safetensors" --quiet >/dev/null 2>&1 || fail "training the checkpoint"
"$bin" predict --resume "$tmp/ck.safetensors" --top 1 "$tmp"/png/*.png >"$tmp/want"
# A checkpoint of an image folder with a transform (Resize + CenterCrop) and a normalisation, which classify
# must apply as predict does: colour PPMs of 20 to 40 pixels a side, 3 classes, a 3x12x12 network.
$py - "$tmp/photos" <<'PY'
import os, random, sys
rng = random.Random(3)
for split, n in (("train", 12), ("test", 4)):
    for k, name in enumerate(("red", "green", "blue")):
        os.makedirs(f"{sys.argv[1]}/{split}/{name}", exist_ok=True)
        for i in range(n):
            w, h = rng.randint(20, 40), rng.randint(20, 40)
            px = bytearray()
            for _ in range(w * h):
                c = [rng.randint(0, 120) for _ in range(3)]
                c[k] = rng.randint(100, 255)
                px += bytes(c)
            open(f"{sys.argv[1]}/{split}/{name}/{i}.ppm", "wb").write(b"P6\n%d %d\n255\n" % (w, h) + px)
PY
printf '[net]\nchannels = 3\nheight = 12\nwidth = 12\n\n[conv]\nname = conv\nfilters = 4\nsize = 3\nactivation = relu\n\n[global_avgpool]\n\n[flatten]\n\n[linear]\nname = fc\nout = 3\n' >"$tmp/rgb.cfg"
"$bin" train --data "$tmp/photos" --model "$tmp/rgb.cfg" --epochs 1 --batch-size 12 --normalize 0.5,0.4,0.3,0.2,0.25,0.3 \
  --devices 1 --save "$tmp/photos.safetensors" --quiet >/dev/null 2>&1 || fail "training the image folder's checkpoint"
"$bin" predict --resume "$tmp/photos.safetensors" --top 1 "$tmp"/photos/test/*/*.ppm >"$tmp/want_photos"

run_lenet() { # $1: label, $2: program
  local out
  out=$("$2" 2 128 0.5 1 2000 2>&1)
  [[ $? -eq 0 ]] && grep -qE '^test acc: [0-9.]+, [0-9.]+ sec/epoch on \[cpu:0, cpu:1\]$' <<<"$out" && pass \
    || fail "$1 multi_device_lenet: $(tail -2 <<<"$out")"
}
run_classify() { # $1: label, $2: program; the lines of predict --top 1, for each checkpoint
  "$2" "$tmp/ck.safetensors" "$tmp"/png/*.png >"$tmp/got" 2>"$tmp/got.err"
  [[ $? -eq 0 && -s "$tmp/got" ]] && cmp -s "$tmp/got" "$tmp/want" && pass \
    || fail "$1 classify: $(head -3 "$tmp/got" "$tmp/got.err") vs predict's $(head -3 "$tmp/want")"
  "$2" "$tmp/photos.safetensors" "$tmp"/photos/test/*/*.ppm >"$tmp/got" 2>"$tmp/got.err"
  [[ $? -eq 0 && -s "$tmp/got" ]] && cmp -s "$tmp/got" "$tmp/want_photos" && pass \
    || fail "$1 classify, an image folder's checkpoint: $(diff "$tmp/got" "$tmp/want_photos" | head -4; cat "$tmp/got.err")"
}

# Every example, as a user compiles it: the system's cc, strict C11, every
# warning an error, nothing but what pkg-config says.
mkdir -p "$tmp/user"
for example in "$src"/examples/*.c; do
  name=$(basename "$example" .c)
  cc -std=c11 -Wall -Wextra -pedantic -Werror "$example" -o "$tmp/user/$name" $(pkg-config --cflags --libs dptrain) \
    2>"$tmp/user/$name.err" && [[ ! -s "$tmp/user/$name.err" ]] && pass \
    || fail "cc -std=c11 -Wall -Wextra -pedantic -Werror $name.c: $(head -5 "$tmp/user/$name.err")"
done
[[ $(ls "$tmp"/user/*.err 2>/dev/null | wc -l) -ge 3 ]] && pass || fail "fewer than 3 examples compiled"

# pkg-config, shared
mkdir -p "$tmp/pc"
for ex in multi_device_lenet classify; do
  $cc $cflags -std=c11 "$src/examples/$ex.c" -o "$tmp/pc/$ex" \
    $(pkg-config --cflags --libs dptrain) -Wl,-rpath,"$libdir" 2>"$tmp/cc.err" \
    && pass || fail "pkg-config build of $ex: $(head -5 "$tmp/cc.err")"
done
ldd "$tmp/pc/classify" | grep -q "$libdir/libdptrain.so" && pass || fail "pkg-config classify does not use the installed libdptrain.so"
run_lenet "pkg-config" "$tmp/pc/multi_device_lenet"
run_classify "pkg-config" "$tmp/pc/classify"
# pkg-config, static
$cc $cflags -std=c11 "$src/examples/classify.c" -o "$tmp/pc/classify_static" \
  $(pkg-config --cflags dptrain) "$libdir/libdptrain.a" $(pkg-config --static --libs dptrain | sed 's/-ldptrain//') 2>"$tmp/cc.err" \
  && pass || fail "static pkg-config build: $(head -5 "$tmp/cc.err")"
! ldd "$tmp/pc/classify_static" | grep -q libdptrain && pass || fail "the static build needs libdptrain.so"
run_classify "pkg-config static" "$tmp/pc/classify_static"

# CMake package
mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(consumer C)
find_package(dptrain 0.1 REQUIRED)
add_executable(classify $src/examples/classify.c)
target_link_libraries(classify PRIVATE dptrain::dptrain)
add_executable(multi_device_lenet $src/examples/multi_device_lenet.c)
target_link_libraries(multi_device_lenet PRIVATE dptrain::dptrain_static)
CMAKE
if cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
     -DCMAKE_C_FLAGS="$cflags" >"$tmp/cmake.out" 2>&1 && cmake --build "$tmp/consumer/build" -j2 >>"$tmp/cmake.out" 2>&1; then
  pass
  run_lenet "CMake (static)" "$tmp/consumer/build/multi_device_lenet"
  run_classify "CMake (shared)" "$tmp/consumer/build/classify"
  ldd "$tmp/consumer/build/classify" | grep -q "$libdir/libdptrain.so" && pass || fail "CMake classify does not use the installed libdptrain.so"
else
  fail "CMake consumer: $(grep -iE 'error' "$tmp/cmake.out" | head -5)"
fi
testing_finish cli_install
