"""The program the diff tests record (scripts/make-diff-data): nine functions doing
pure-Python arithmetic in a fixed mix, for a fixed wall time. With `slow`, `parse`
does twice its work per call; nothing else changes."""
import sys
import time


def parse(n, rounds):
    total = 0
    for _ in range(rounds):
        for i in range(n):
            total += i * i % 7
    return total


def transform(n):
    total = 0
    for i in range(n):
        total ^= (i << 3) + 11
    return total


def summarize(n):
    total = 0.0
    for i in range(1, n):
        total += 1.0 / i
    return total


def encode(n):
    total = 0
    for i in range(n):
        total += (i * 31) & 0xFF
    return total


def decode(n):
    total = 0
    for i in range(n):
        total -= (i * 17) | 3
    return total


def validate(n):
    count = 0
    for i in range(n):
        if i % 3 == 1:
            count += 1
    return count


def render(n):
    total = 0
    for i in range(n):
        total += i % 10
    return total


def compress(n):
    total = 0
    for i in range(n):
        total = (total + i) % 65521
    return total


def checksum(n):
    total = 1
    for i in range(n):
        total = (total * 33 + i) & 0xFFFFFFFF
    return total


def main(duration, slow):
    rounds = 2 if slow else 1
    t0 = time.monotonic()
    while time.monotonic() - t0 < duration:
        parse(2000, rounds)
        for step in (transform, summarize, encode, decode, validate, render, compress, checksum):
            step(2000)


if __name__ == "__main__":
    main(float(sys.argv[1]), len(sys.argv) > 2 and sys.argv[2] == "slow")
