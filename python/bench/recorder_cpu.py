"""The CPU a profiler attached from outside uses on a 16-thread server, at several rates.

The server is the standard library's `http.server.ThreadingHTTPServer` answering JSON,
with a load generator (another process) holding SERVER_THREADS keep-alive connections
open and sending requests back to back: the server then runs one handler thread per
connection, 16 by default, plus its main thread, each parsing a request, building a
JSON answer and waiting on its socket. Each profiler is attached to the server for
SECONDS at each rate, in turn (interleaved, REPEAT times); its CPU time is the user and
system time of its process (os.wait4), as a share of one CPU over the time it ran, and
its steady state, the same share from 2 s after it starts to 1 s before it ends (read
from /proc: no attach, no last write of the file). The
server's throughput (requests a second, from the load generator) with and without each
profiler is printed beside it.

    .venv/bin/python python/bench/recorder_cpu.py --tach target/release/tach \\
        --pyspy .venv/bin/py-spy --rates 19,100,1000 --seconds 20 --repeat 3

Profilers: tach (blocking, the default; and --no-blocking), the same rows for
--baseline-tach (an earlier build, to compare two builds in one run), and py-spy (its
default, which stops the process at each sample, and --nonblocking; Pyroscope's Python
agent runs py-spy at 100 Hz). The steady state's CPU is the scheduler's count of the
time the profiler's threads ran (nanoseconds), the whole run's is os.wait4's.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SERVER = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        n = int(self.path.rsplit("/", 1)[-1] or 1)
        doc = {"items": [{"id": i, "name": f"item-{i}", "tags": ["a", "b"]} for i in range(n)]}
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
'''

LOAD = r'''
import http.client, sys, threading, time
port, threads, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
done = [0] * threads
end = time.monotonic() + seconds
def client(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    while time.monotonic() < end:
        c.request("GET", "/50")
        c.getresponse().read()
        done[k] += 1
ts = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
print(sum(done) / seconds, flush=True)
'''


def cpu_seconds(pid):
    """The time process `pid`'s threads have run so far, in seconds: the scheduler's own
    count, in nanoseconds (`/proc/PID/task/TID/schedstat`), where `/proc/PID/stat`'s
    user and system times count clock ticks (10 ms: a recorder at 1% of a core for 17 s
    is 17 of them)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9


def measured(cmd, seconds):
    """Runs `cmd` (a profiler that runs for `seconds`): its CPU time (user + system,
    seconds) and wall time, and its CPU share over its steady state, from 2 s after it
    starts to 1 s before it ends (without the attach, and the file's last write)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    steady = None
    if seconds >= 5:
        time.sleep(2)
        t0, c0 = time.monotonic(), cpu_seconds(proc.pid)
        time.sleep(max(0.0, start + seconds - 1 - time.monotonic()))
        t1, c1 = time.monotonic(), cpu_seconds(proc.pid)
        steady = 100.0 * (c1 - c0) / (t1 - t0)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    err = proc.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[0]} failed ({status}): {err[-800:]}")
    return usage.ru_utime + usage.ru_stime, wall, steady


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--tach", required=True)
    ap.add_argument("--baseline-tach",
                    help="another tach binary (an earlier build): its rows are run beside "
                         "--tach's, interleaved, to compare two builds in one run")
    ap.add_argument("--pyspy")
    ap.add_argument("--rates", default="19,100,1000")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--server-threads", type=int, default=16)
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="recorder-cpu-")
    server_py = os.path.join(scratch, "server.py")
    load_py = os.path.join(scratch, "load.py")
    with open(server_py, "w") as f:
        f.write(SERVER)
    with open(load_py, "w") as f:
        f.write(LOAD)
    server = subprocess.Popen([args.python, server_py], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    pid = str(server.pid)
    out = os.path.join(scratch, "out")
    d = str(args.seconds)
    profilers = [
        ("tach record --pid (blocking, the default)",
         lambda r: [args.tach, "record", "--pid", pid, "-r", r, "-d", d, "-o", out + ".tach"]),
        ("tach record --pid --no-blocking",
         lambda r: [args.tach, "record", "--pid", pid, "-r", r, "-d", d, "--no-blocking",
                    "-o", out + ".tach"]),
    ]
    if args.baseline_tach:
        profilers += [
            ("baseline tach record --pid (blocking)",
             lambda r: [args.baseline_tach, "record", "--pid", pid, "-r", r, "-d", d,
                        "-o", out + ".tach"]),
            ("baseline tach record --pid --no-blocking",
             lambda r: [args.baseline_tach, "record", "--pid", pid, "-r", r, "-d", d,
                        "--no-blocking", "-o", out + ".tach"]),
        ]
    if args.pyspy:
        profilers += [
            ("py-spy record (default)",
             lambda r: [args.pyspy, "record", "-p", pid, "-r", r, "-d", d, "-f", "raw",
                        "-o", out + ".pyspy"]),
            ("py-spy record --nonblocking",
             lambda r: [args.pyspy, "record", "-p", pid, "-r", r, "-d", d, "--nonblocking",
                        "-f", "raw", "-o", out + ".pyspy"]),
        ]
    rates = [r.strip() for r in args.rates.split(",")]
    cpu = {(name, r): [] for name, _ in profilers for r in rates}
    steady = {(name, r): [] for name, _ in profilers for r in rates}
    rps = {(name, r): [] for name, _ in profilers for r in rates}
    alone = []
    try:
        for _ in range(args.repeat):
            for rate in rates:
                for name, cmd in [("none", None)] + profilers:
                    # The load runs 2 s longer than the profiler so that the profiler
                    # sees a loaded server from its first sample to its last.
                    load = subprocess.Popen(
                        [args.python, load_py, str(port), str(args.server_threads),
                         str(args.seconds + 2)], stdout=subprocess.PIPE, text=True)
                    time.sleep(1)
                    if cmd is not None:
                        used, wall, still = measured(cmd(rate), args.seconds)
                        cpu[(name, rate)].append(100.0 * used / wall)
                        if still is not None:
                            steady[(name, rate)].append(still)
                    throughput = float(load.communicate()[0])
                    if cmd is None:
                        alone.append(throughput)
                    else:
                        rps[(name, rate)].append(throughput)
    finally:
        server.kill()
    base = statistics.median(alone)
    print(f"server: {args.server_threads} handler threads + main; alone "
          f"{base:.0f} requests/s (median of {len(alone)}); "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"| profiler | rate | CPU, % of one core (median of {args.repeat}) | runs "
          "| steady state (2 s in to 1 s before the end) | runs | server throughput vs alone |")
    print("|---|---|---|---|---|---|---|")
    for rate in rates:
        for name, _ in profilers:
            c = cpu[(name, rate)]
            s = steady[(name, rate)]
            t = statistics.median(rps[(name, rate)])
            still = f"{statistics.median(s):.2f}%" if s else "-"
            print(f"| {name} | {rate} Hz | {statistics.median(c):.2f}% | "
                  f"{', '.join(f'{v:.2f}' for v in c)} | {still} | "
                  f"{', '.join(f'{v:.2f}' for v in s)} | {100.0 * (t / base - 1):+.1f}% |")
    print(json.dumps({"alone_rps": alone,
                      "cpu": {f"{n} @ {r}": v for (n, r), v in cpu.items()},
                      "steady": {f"{n} @ {r}": v for (n, r), v in steady.items()}}))


if __name__ == "__main__":
    main()
