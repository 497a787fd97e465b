import os, sys, time
os.environ["OPENBLAS_NUM_THREADS"] = "1"
import zlib, json, ctypes, ctypes.util
LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
def compare(a, b):
    return a[0] - b[0]
COMPARE = CMP(compare)
DATA = b"".join(b"%d spam eggs " % i for i in range(40000))
DOC = [{"id": i, "tags": ["a", str(i)], "ok": i % 2 == 0} for i in range(4000)]
def squeeze():
    zlib.compress(DATA, 9)
def encode():
    json.dumps(DOC)
def qsort():
    arr = (ctypes.c_int * 3000)(*range(3000, 0, -1))
    LIBC.qsort(arr, 3000, 4, COMPARE)
def main(seconds):
    end = time.time() + seconds
    while time.time() < end:
        squeeze(); encode(); qsort()
print("ready", flush=True)
main(float(sys.argv[1]))
