"""Runs, in turn, the native-stack faults of issue 27 for SECONDS: a 10,000-frame native
recursion, code in anonymous executable memory with no unwind entry (as JIT code is), a
library loaded and unloaded again and again, and a C signal handler that spins.

    python faults.py LIBRARY SECONDS SCRATCH_DIR
"""
import _ctypes
import ctypes
import mmap
import os
import shutil
import signal
import sys
import time

library, seconds, scratch = sys.argv[1], float(sys.argv[2]), sys.argv[3]
lib = ctypes.CDLL(library)

# mov rcx, N; loop: dec rcx; jnz loop; ret -- no frame, no unwind entry, no module.
LOOP = bytes([0x48, 0xB9]) + (20_000_000).to_bytes(8, "little") + \
    bytes([0x48, 0xFF, 0xC9, 0x75, 0xFB, 0xC3])
code = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
code.write(LOOP)
jitted = ctypes.CFUNCTYPE(None)(ctypes.addressof(ctypes.c_char.from_buffer(code)))


def deep_recursion():
    lib.recurse(10_000, 20)


def jit_code():
    jitted()


def unloaded_library(n):
    # A fresh copy each time, so that dlclose really unmaps it.
    path = os.path.join(scratch, f"copy{n % 4}.so")
    shutil.copyfile(library, path)
    copy = ctypes.CDLL(path)
    copy.spin(3)
    _ctypes.dlclose(copy._handle)
    os.unlink(path)


def signal_handler():
    os.kill(os.getpid(), signal.SIGUSR1)


lib.install_handler(5)
print("ready", flush=True)
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    deep_recursion()
    jit_code()
    unloaded_library(n)
    signal_handler()
    n += 1
print("done", n, flush=True)
