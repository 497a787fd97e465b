"""The workload behind stdlib_workload.bin, the heatmap tests' recording with real
sources: pure-Python standard-library code (difflib, json's pure encoder, textwrap,
fractions, statistics) so that every sampled source file exists in the CPython chroot
under /usr/lib/python3.15. Recorded in the chroot by record.sh."""

import difflib
import fractions
import json.encoder
import statistics
import textwrap
import time


def diff_texts(n):
    a = [f"line {i} {'x' * (i % 7)}\n" for i in range(n)]
    b = [f"line {i} {'y' * (i % 5)}\n" for i in range(n)]
    return sum(1 for _ in difflib.unified_diff(a, b))


def encode(n):
    enc = json.encoder.JSONEncoder(indent=2)
    enc.c_make_encoder = None  # force the pure-Python encoder
    data = [{"k": i, "v": [i, str(i), {"f": i / 3}]} for i in range(n)]
    return len("".join(json.encoder._make_iterencode(
        {}, enc.default, json.encoder.py_encode_basestring, "  ", float.__repr__,
        ": ", ", ", False, False, True)(data, 0)))


def wrap(n):
    text = " ".join(f"word{i}" for i in range(n))
    return len(textwrap.wrap(text, width=37))


def stats(n):
    xs = [fractions.Fraction(i, 7) for i in range(1, n)]
    return statistics.fmean(float(x) for x in xs), statistics.median(xs)


def main(seconds=2.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        diff_texts(300)
        encode(300)
        wrap(2000)
        stats(400)


if __name__ == "__main__":
    main()
