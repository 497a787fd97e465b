# Two named asyncio tasks calling into C (zlib's deflate, hashlib's SHA-256) for
# argv[1] seconds: recorded with --native --async-aware from outside
# (tests/python/recorder/test_async_stack.py) and in-process (test_record.py).
import asyncio, hashlib, sys, zlib

DATA = b"".join(b"%d spam eggs " % i for i in range(20000))

def compress():
    return zlib.compress(DATA, 9)

def digest():
    return hashlib.sha256(DATA * 4).digest()

async def squeeze():
    while True:
        compress()
        await asyncio.sleep(0)

async def hash_():
    while True:
        digest()
        await asyncio.sleep(0)

async def main(seconds):
    tasks = [asyncio.create_task(squeeze(), name="squeeze"),
             asyncio.create_task(hash_(), name="hash")]
    print("ready", flush=True)
    await asyncio.sleep(seconds)
    for t in tasks:
        t.cancel()

asyncio.run(main(float(sys.argv[1])))
