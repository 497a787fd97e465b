"""Writes golden/python-float-repr/repr.txt: doubles (as hex bit patterns) with
Python's repr of each, the reference for tach's JSON float writer (src/export/pyjson.rs,
which must print floats as Python's json module does).

    python3 scripts/gen-float-repr.py

Values: random bit patterns, differences of millisecond times (the Gecko marker
durations), and k/1000 times; fixed seed, so the file is reproducible."""
import random
import struct
import sys

rng = random.Random(20261121)
values = [1658206780088562.2, 0.1, 1e16, 1e-5, 123.0, 2.0700000000000003]
while len(values) < 2000:
    bits = rng.getrandbits(64)
    v = struct.unpack("<d", struct.pack("<Q", bits))[0]
    if v == v and v not in (float("inf"), float("-inf")) and v != 0.0:
        values.append(v)
for _ in range(2000):
    a = rng.randrange(0, 10**11) / 1000
    b = rng.randrange(0, 10**6) / 1000
    values.append(a - b)
    values.append(b - a / 7)
for _ in range(1000):
    values.append(rng.randrange(-10**12, 10**12) / 1000)
out = sys.argv[1] if len(sys.argv) > 1 else "golden/python-float-repr/repr.txt"
with open(out, "w") as f:
    f.write(f"# Python {sys.version.split()[0]}: <f64 bits as hex> <repr(float)>\n")
    for v in values:
        if v == 0.0:
            continue
        bits = struct.unpack("<Q", struct.pack("<d", v))[0]
        f.write(f"{bits:016x} {v!r}\n")
