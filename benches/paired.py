"""Times command A against command B in turn (A B A B ...), whole process, and reports
medians, min and max of wall, CPU and peak RSS, and the median of the paired A/B ratios.
More commands (A B C ...) run in turn the same way, with a ratio for every pair: a new
build, the old one and a reference in one run (docs/performance.md, "collapsed, fifth
pass").

On a shared machine whose speed drifts from minute to minute, a ratio of neighbouring
runs says more than either median alone; the figures in docs/performance.md marked
"paired" are of this kind.

    python3 benches/paired.py -n 21 \\
        'target/release/tach export --flamegraph -o /tmp/a.svg F' \\
        'OLD/tach export --flamegraph -o /tmp/b.svg F'

Each command is split like a shell would split it (shlex) and run without a shell; its
output is thrown away. One warm-up run of each is not counted.
"""

import argparse
import os
import shlex
import statistics
import subprocess
import time


def run(cmd):
    """(wall s, CPU s, peak RSS MiB) of one run; fails if the command does."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} exited with {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=15, help="counted runs of each (default 15)")
    parser.add_argument("commands", nargs="+", metavar="command", help="A, B, ... (quoted)")
    args = parser.parse_args()
    if not 2 <= len(args.commands) <= 26:
        parser.error("give 2 to 26 commands")
    names = [chr(ord("A") + i) for i in range(len(args.commands))]
    cmds = [shlex.split(c) for c in args.commands]
    for cmd in cmds:
        run(cmd)
    runs = {name: [] for name in names}
    for _ in range(args.n):
        for name, cmd in zip(names, cmds):
            runs[name].append(run(cmd))
    for name, text in zip(names, args.commands):
        print(f"{name} = {text}")
    print(f"{args.n} runs each, in turn")
    print(f"{'':14}{'min':>10}{'median':>10}{'max':>10}")
    for name in names:
        for i, what in enumerate(["wall s", "cpu s", "peak MiB"]):
            xs = [r[i] for r in runs[name]]
            print(f"{name} {what:<12}{min(xs):10.3f}{statistics.median(xs):10.3f}{max(xs):10.3f}")
    for x, first in enumerate(names):
        for second in names[x + 1 :]:
            for i, what in enumerate(["wall", "cpu"]):
                ratios = [ra[i] / rb[i] for ra, rb in zip(runs[first], runs[second])]
                label = f"{first}/{second} {what}"
                print(
                    f"{label:<14}{min(ratios):10.4f}{statistics.median(ratios):10.4f}"
                    f"{max(ratios):10.4f}"
                )


if __name__ == "__main__":
    main()
