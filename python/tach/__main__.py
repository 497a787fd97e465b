"""python -m tach run [-o OUT] [-r RATE] [--mode MODE] [-a] [--opcodes] [--no-gc]
                     [--no-blocking] [--compression C] [-d SECONDS]
                     (script.py | -m module) ARGS...
"""

import argparse
import os
import runpy
import signal
import sys

from . import _record


_VALUE_OPTIONS = {"-o", "--output", "-r", "--rate", "--mode", "--compression", "-d", "--duration"}


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
    run.add_argument("--no-gc", dest="gc", action="store_false", help="no <GC> frames")
    run.add_argument(
        "--blocking", "--no-blocking", dest="blocking", default=None,
        action=_BlockingAction, nargs=0,
        help="pause the thread holding the GIL while each sample is read, so every sample "
             "is one moment's stacks (the default up to 1 kHz); --no-blocking reads "
             "running threads (the default above 1 kHz, where pausing costs more)",
    )
    run.add_argument("--compression", choices=_record._COMPRESSIONS, default="auto")
    run.add_argument("-d", "--duration", type=float, help="stop sampling after SECONDS")
    run.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    run.add_argument("--native", action="store_true",
                     help="not in-process (yet): native stacks are recorded from outside, "
                          "with `tach record --native`")
    return p


class _BlockingAction(argparse.Action):
    """--blocking (CPython's flag) or --no-blocking; neither: by the rate."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string == "--blocking")


def _split(argv):
    """Splits `run` arguments into tach's options and the program: everything from the
    script (or `-m module`) on belongs to the program, even options like `-q`."""
    if not argv or argv[0] != "run":
        return argv, None, []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], None, argv[i + 1:]
        if a == "-m":
            if i + 1 >= len(argv):
                return argv[:i], None, []
            return argv[:i], argv[i + 1], argv[i + 2:]
        if a.startswith("-m") and len(a) > 2 and not a.startswith("--"):
            return argv[:i], a[2:], argv[i + 1:]
        if a in _VALUE_OPTIONS:
            i += 2
            continue
        if a.startswith("-") and a != "-":
            i += 1
            continue
        return argv[:i], None, argv[i:]
    return argv, None, []


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


def _start(opts):
    _record.start(
        opts.output,
        rate=opts.rate,
        mode=opts.mode,
        all_threads=opts.all_threads,
        opcodes=opts.opcodes,
        gc=opts.gc,
        blocking=opts.blocking,
        compression=opts.compression,
        duration=opts.duration,
        quiet=opts.quiet,
    )


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    own, module, program = _split(argv)
    parser = _parser()
    opts = parser.parse_args(own)
    if getattr(opts, "native", False):
        parser.error("--native is recorded from outside only: "
                     "tach record --native -- python script.py (or --pid PID)")
    if module is None and not program:
        parser.error("run needs a script or -m module")
    if module is None and not os.path.isfile(program[0]):
        print(f"tach: can't open file {program[0]!r}: no such file", file=sys.stderr)
        sys.exit(2)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm)
    try:
        _start(opts)
    except (RuntimeError, ValueError) as e:
        print(f"tach: cannot record: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        if module is not None:
            sys.argv[:] = [module] + list(program)
            sys.path.insert(0, os.getcwd())
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            _exec_script(program[0], program[1:])
    finally:
        _record.stop()


if __name__ == "__main__":
    main()
