"""python -m tach run [-o OUT] [-r RATE] [--mode MODE] [-a] [--opcodes]
                     [--compression C] [-d SECONDS] (script.py | -m module) ARGS...
"""

import argparse
import os
import runpy
import signal
import sys

from . import _record


def _parser():
    p = argparse.ArgumentParser(prog="python -m tach", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run a script or module under the recorder",
        usage="python -m tach run [options] (script.py | -m module) [args ...]",
    )
    run.add_argument("-o", "--output", help="output file (default tach_<pid>.tach)")
    run.add_argument("-r", "--rate", type=float, default=1000.0, help="samples per second (default 1000)")
    run.add_argument("--mode", choices=_record._MODES, default="wall")
    run.add_argument("-a", "--all-threads", action="store_true", help="sample every thread, not only the main one")
    run.add_argument("--opcodes", action="store_true", help="record the base opcode of each frame")
    run.add_argument("--compression", choices=_record._COMPRESSIONS, default="auto")
    run.add_argument("-d", "--duration", type=float, help="stop sampling after SECONDS")
    run.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    run.add_argument("-m", dest="module", help="run a library module as a script")
    run.add_argument("args", nargs=argparse.REMAINDER, help="script and its arguments")
    return p


def _sigterm(signum, frame):
    # Unwind normally (finally blocks, atexit), so that the file is finished.
    raise SystemExit(128 + signum)


def _exec_script(path, args):
    """Runs a script as __main__, as `python script.py` does (no extra runpy frames)."""
    import types

    with open(path, "rb") as f:
        source = f.read()
    code = compile(source, path, "exec")
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    main.__loader__ = None
    main.__spec__ = None
    sys.modules["__main__"] = main
    sys.argv[:] = [path] + list(args)
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    exec(code, main.__dict__)


def main(argv=None):
    opts = _parser().parse_args(argv)
    if opts.module is None and not opts.args:
        _parser().error("run needs a script or -m module")
    if opts.module is None and opts.args and opts.args[0] == "--":
        opts.args = opts.args[1:]
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm)
    _record.start(
        opts.output,
        rate=opts.rate,
        mode=opts.mode,
        all_threads=opts.all_threads,
        opcodes=opts.opcodes,
        compression=opts.compression,
        duration=opts.duration,
        quiet=opts.quiet,
    )
    try:
        if opts.module is not None:
            sys.argv[:] = [opts.module] + list(opts.args)
            sys.path.insert(0, os.getcwd())
            runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
        else:
            _exec_script(opts.args[0], opts.args[1:])
    finally:
        _record.stop()


if __name__ == "__main__":
    main()
