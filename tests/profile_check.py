"""profile_check.py - checks what `dptrain train --profile` printed and
wrote (cli_profile.sh): the table on stdout and the metrics file's
{"profile": ...} line.

usage: profile_check.py OUTPUT METRICS DEVICES STEPS WARMUP LAYER...
DEVICES: "cpu:0,cpu:1"; LAYER: the model's layers as the profile names them
(each must have a forward and a backward row on every device, nothing else).
Prints one line per problem and exits 1 when there is any.
"""
import json
import os
import re
import sys

out_path, metrics_path, devices, steps, warmup = sys.argv[1:6]
devices, steps, warmup = devices.split(","), int(steps), int(warmup)
expected = {(layer, d) for layer in sys.argv[6:] for d in ("forward", "backward")}
problems = []

# the table
lines = open(out_path).read().splitlines()
head = [i for i, line in enumerate(lines) if line.startswith("profile: ")]
def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


want = f"profile: mean ms per step over {plural(steps, 'step')} after {plural(warmup, 'warm-up step')}"
if len(head) != 1 or not lines[head[0]].startswith(want):
    problems.append(f"table: expected one line starting '{want}', found {[lines[i] for i in head]}")
else:
    table = {}
    for line in lines[head[0] + 2:]:
        m = re.match(r"^(\S+) +(\(outside the layers\)|\(step\)|\S+) +(\S+) +(\S+) +(-?[0-9.]+) +(-?[0-9.]+)%$", line)
        if not m:
            break
        dev, layer, op, direction, ms, share = m.groups()
        table.setdefault(dev, []).append((layer, direction, float(ms), float(share)))
    if sorted(table) != sorted(devices):
        problems.append(f"table: devices {sorted(table)}, expected {sorted(devices)}")
    for dev, rows in table.items():
        layers = [(r[0], r[1]) for r in rows if not r[0].startswith("(")]
        if sorted(layers) != sorted(expected):
            problems.append(f"table: {dev}: rows {sorted(layers)}, expected {sorted(expected)}")
        if any(r[2] < 0 or r[3] < 0 for r in rows):
            problems.append(f"table: {dev}: a negative time or share: {rows}")
        total = sum(r[3] for r in rows if r[0] != "(step)")
        if abs(total - 100.0) > 0.05 * len(rows) + 0.05:
            problems.append(f"table: {dev}: shares sum to {total}%")
        if [r[3] for r in rows if r[0] == "(step)"] != [100.0]:
            problems.append(f"table: {dev}: no (step) row of 100%")
    # the process's CPU time per step: some, and at most every core busy through the first device's step. Not
    # a lower bound from the step's wall time: on a loaded machine (ctest -j2 beside an MPI test) a device's
    # thread got under a quarter of its step's wall time (3.5 ms of CPU in a 14.9 ms step, a fresh-clone run)
    cpu = [float(m.group(1)) for m in (re.match(r"^cpu time: ([0-9.]+) ms per step, the process's", l) for l in lines) if m]
    first_step = [r[2] for r in table.get(devices[0], []) if r[0] == "(step)"]
    if len(cpu) != 1 or not first_step or not 0 < cpu[0] <= 1.5 * os.cpu_count() * first_step[0] + 1:
        problems.append(f"table: cpu time {cpu} ms per step, the first device's step {first_step} ms")

# the metrics line
objects = [json.loads(line) for line in open(metrics_path) if line.strip()]
profiles = [o for o in objects if "profile" in o]
if len(profiles) != 1 or "profile" not in objects[-1]:
    problems.append(f"metrics: {len(profiles)} profile lines, expected one, the last")
else:
    p = profiles[0]["profile"]
    if (p["steps"], p["warmup"]) != (steps, warmup):
        problems.append(f"metrics: steps {p['steps']}, warmup {p['warmup']}, expected {steps}, {warmup}")
    if [d["device"] for d in p["devices"]] != devices:
        problems.append(f"metrics: devices {[d['device'] for d in p['devices']]}, expected {devices}")
    for d in p["devices"]:
        rows = {(r["layer"], r["direction"]) for r in d["rows"]}
        if rows != expected or len(d["rows"]) != len(expected):
            problems.append(f"metrics: {d['device']}: rows {sorted(rows)}, expected {sorted(expected)}")
        if any(r["calls"] != steps or r["ms"] < 0 or r["share"] < 0 for r in d["rows"]):
            problems.append(f"metrics: {d['device']}: a row not timed once per step, or negative: {d['rows']}")
        total = d["outside_share"] + sum(r["share"] for r in d["rows"])
        if not 0 < d["process_cpu_ms"] <= 1.5 * os.cpu_count() * d["step_ms"] + 1:
            problems.append(f"metrics: {d['device']}: process_cpu_ms {d['process_cpu_ms']}, step {d['step_ms']} ms")
        if abs(total - 1.0) > 1e-4 or not d["step_ms"] > 0 or not d["layers_ms"] > 0 or d["outside_ms"] < 0:
            problems.append(f"metrics: {d['device']}: shares sum to {total}, step {d['step_ms']} ms, "
                            f"layers {d['layers_ms']} ms, outside {d['outside_ms']} ms")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
