"""Copies a TACH file's sample region (bytes 64 to the string table, as stored: a zstd
frame when the file is compressed) to OUT, so that `zstd -d` of exactly those bytes can
be timed against `tach verify` of the file (docs/performance.md, "verify against the
decompression floor"):

    python3 benches/sample_region.py FILE.bin /tmp/region.zst
    python3 benches/paired.py -n 21 'target/release/tach verify -q FILE.bin' \\
        'zstd -d -q -c /tmp/region.zst -o /dev/null'
"""

import struct
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data = open(sys.argv[1], "rb").read()
    # The header's byte order is the magic's: little-endian files start with b"HCAT".
    order = "<" if data[:4] == b"HCAT" else ">"
    string_table_offset = struct.unpack_from(order + "Q", data, 40)[0]
    with open(sys.argv[2], "wb") as out:
        out.write(data[64:string_table_offset])


if __name__ == "__main__":
    main()
