"""python -m tach run [OPTIONS] (script.py | -m module) ARGS...

The command line is parsed natively, by the clap definition of `tach record`'s options
(tach._native.parse_main): the same flags, defaults, help and messages.
"""

import os
import runpy
import signal
import sys

from . import _native, _record


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
    argv = sys.argv[1:] if argv is None else list(argv)
    request, message, code = _native.parse_main(["python -m tach", *argv])
    if request is None:
        # clap's own text: --help on stdout (status 0), a usage error on stderr (2).
        print(message, end="", file=sys.stdout if code == 0 else sys.stderr)
        sys.exit(code)
    module, program = request.module, request.program
    if module is None and not os.path.isfile(program[0]):
        print(f"tach: can't open file {program[0]!r}: no such file", file=sys.stderr)
        sys.exit(2)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm)
    try:
        _record.start_request(request)
    except (RuntimeError, ValueError) as e:
        print(f"tach: cannot record: {e}", file=sys.stderr)
        sys.exit(2)
    stats = None
    try:
        try:
            if module is not None:
                sys.argv[:] = [module] + list(program)
                sys.path.insert(0, os.getcwd())
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                _exec_script(program[0], program[1:])
        finally:
            stats = _record.stop()
    except SystemExit as e:
        # sys.exit() or sys.exit(0): a success, unless the recording failed.
        if e.code in (None, 0) and _failed(stats):
            sys.exit(_native.exit_status(0, False))
        raise
    if _failed(stats):
        sys.exit(_native.exit_status(0, False))


def _failed(stats):
    """Whether the recording ended in error (None: the program stopped it itself)."""
    return stats is not None and bool(stats.get("error"))


if __name__ == "__main__":
    main()
