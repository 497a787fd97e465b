"""Times CPython 3.15's own TACH reader on a file: BinaryReader.replay with a no-op
collector, the reference point for tach's decode speed (docs/performance.md).

    scripts/cpython-chroot run -- python3.15 benches/cpython_reader.py FILE [RUNS]
"""
import sys
import time

import _remote_debugging


class NoopCollector:
    def collect(self, stack_frames, timestamps_us=None):
        pass


def main():
    path = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        reader = _remote_debugging.BinaryReader(path)
        count = reader.replay(NoopCollector(), None)
        times.append(time.perf_counter() - start)
    best = sorted(times)[len(times) // 2]
    print(f"{path}: {count} samples, median {best:.3f} s over {runs} runs, "
          f"{count / best:,.0f} samples/s")


if __name__ == "__main__":
    main()
