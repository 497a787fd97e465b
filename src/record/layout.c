/* Structure layouts taken from the target interpreter's own headers at build time.
 *
 * Compiled by build.rs (feature `python`) with -DPy_BUILD_CORE against the include
 * directory of the interpreter the extension is built for. Rust reads the one exported
 * table, `tach_build_layout`, and checks `py_version_hex` against the running
 * interpreter before trusting any offset.
 *
 * - CPython 3.11 publishes no _Py_DebugOffsets, so every offset the recorder needs is
 *   measured here with offsetof().
 * - For every version, the opcode de-specialisation table (specialised opcode -> base
 *   opcode) is copied here when the headers carry it, because not every interpreter
 *   exports `_PyOpcode_Deopt`.
 */
#include <stddef.h>
#include <stdint.h>

#include "Python.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#  define TACH_HAVE_311 1
#  define NEED_OPCODE_TABLES 1
#  define _PyOpcode_Caches tach_py311_caches
#  define _PyOpcode_Deopt tach_py_deopt
#  include "internal/pycore_frame.h"
#  include "internal/pycore_runtime.h"
#  include "internal/pycore_interp.h"
#  include "internal/pycore_opcode.h"
#  define TACH_HAVE_DEOPT 1
#  define TACH_HAVE_STACKTOP 1
#elif PY_VERSION_HEX >= 0x030D0000
#  if PY_VERSION_HEX < 0x030E0000
/* 3.13, as 3.11, marks the frame the eval loop runs with stacktop == -1 (see below). */
#    define TACH_HAVE_STACKTOP 1
#    include "internal/pycore_frame.h"
#  endif
#  define TACH_HAVE_EXC 1
#  define NEED_OPCODE_METADATA 1
#  define _PyOpcode_Deopt tach_py_deopt
#  include "internal/pycore_opcode_metadata.h"
#  define TACH_HAVE_DEOPT 1
#endif

struct tach_build_layout {
    uint64_t py_version_hex;
    uint64_t has_311;
    uint64_t has_deopt;
    /* _PyRuntimeState */
    uint64_t runtime_interpreters_head;
    uint64_t runtime_main_thread;
    uint64_t runtime_gil_last_holder;
    uint64_t runtime_gil_locked;
    /* PyInterpreterState */
    uint64_t interp_next;
    uint64_t interp_threads_head;
    uint64_t interp_id;
    uint64_t interp_gc_collecting;
    /* PyThreadState */
    uint64_t tstate_size;
    uint64_t tstate_next;
    uint64_t tstate_interp;
    uint64_t tstate_cframe;
    uint64_t tstate_curexc_type;
    uint64_t tstate_exc_info;
    uint64_t tstate_thread_id;
    uint64_t tstate_native_thread_id;
    /* _PyCFrame */
    uint64_t cframe_current_frame;
    /* _PyErr_StackItem */
    uint64_t err_stackitem_exc_value;
    /* _PyInterpreterFrame */
    uint64_t frame_size;
    uint64_t frame_code;
    uint64_t frame_previous;
    uint64_t frame_prev_instr;
    uint64_t frame_owner;
    /* PyCodeObject */
    uint64_t code_size;
    uint64_t code_filename;
    uint64_t code_qualname;
    uint64_t code_linetable;
    uint64_t code_firstlineno;
    uint64_t code_firsttraceable;
    uint64_t code_code_adaptive;
    /* objects */
    uint64_t ob_type;
    uint64_t var_ob_size;
    uint64_t bytes_ob_sval;
    uint64_t unicode_state;
    uint64_t unicode_length;
    uint64_t unicode_ascii_size;
    uint64_t unicode_compact_size;
    /* 3.13+: exception state, which _Py_DebugOffsets publishes only from 3.15 */
    uint64_t has_exc;
    uint64_t exc_tstate_current_exception;
    uint64_t exc_tstate_exc_info;
    uint64_t exc_err_stackitem_exc_value;
    /* 3.11 and 3.13: _PyInterpreterFrame.stacktop, -1 while the eval loop runs the
     * frame (ceval's SET_LOCALS_FROM_FRAME, 3.13's _PyFrame_GetStackPointer), set when it
     * calls a Python function; 3.13's _Py_DebugOffsets does not publish it. */
    uint64_t has_stacktop;
    uint64_t frame_stacktop;
    /* 3.11: _PyInterpreterFrame.is_entry, set on the first frame of an eval loop (3.13
     * puts an entry frame of its own below it instead). */
    uint64_t has_is_entry;
    uint64_t frame_is_entry;
    /* The return instructions (0xFFFF: none): a frame on one has no callees left. */
    uint64_t op_return_value;
    uint64_t op_return_const;
};

const struct tach_build_layout tach_build_layout = {
    .py_version_hex = PY_VERSION_HEX,
#ifdef TACH_HAVE_311
    .has_311 = 1,
    .runtime_interpreters_head = offsetof(_PyRuntimeState, interpreters.head),
    .runtime_main_thread = offsetof(_PyRuntimeState, main_thread),
    .runtime_gil_last_holder = offsetof(_PyRuntimeState, ceval.gil.last_holder),
    .runtime_gil_locked = offsetof(_PyRuntimeState, ceval.gil.locked),
    .interp_next = offsetof(PyInterpreterState, next),
    .interp_threads_head = offsetof(PyInterpreterState, threads.head),
    .interp_id = offsetof(PyInterpreterState, id),
    .interp_gc_collecting = offsetof(PyInterpreterState, gc.collecting),
    .tstate_size = sizeof(PyThreadState),
    .tstate_next = offsetof(PyThreadState, next),
    .tstate_interp = offsetof(PyThreadState, interp),
    .tstate_cframe = offsetof(PyThreadState, cframe),
    .tstate_curexc_type = offsetof(PyThreadState, curexc_type),
    .tstate_exc_info = offsetof(PyThreadState, exc_info),
    .tstate_thread_id = offsetof(PyThreadState, thread_id),
    .tstate_native_thread_id = offsetof(PyThreadState, native_thread_id),
    .cframe_current_frame = offsetof(_PyCFrame, current_frame),
    .err_stackitem_exc_value = offsetof(_PyErr_StackItem, exc_value),
    .frame_size = sizeof(_PyInterpreterFrame),
    .frame_code = offsetof(_PyInterpreterFrame, f_code),
    .frame_previous = offsetof(_PyInterpreterFrame, previous),
    .frame_prev_instr = offsetof(_PyInterpreterFrame, prev_instr),
    .frame_owner = offsetof(_PyInterpreterFrame, owner),
    .code_size = sizeof(PyCodeObject),
    .code_filename = offsetof(PyCodeObject, co_filename),
    .code_qualname = offsetof(PyCodeObject, co_qualname),
    .code_linetable = offsetof(PyCodeObject, co_linetable),
    .code_firstlineno = offsetof(PyCodeObject, co_firstlineno),
    .code_firsttraceable = offsetof(PyCodeObject, _co_firsttraceable),
    .code_code_adaptive = offsetof(PyCodeObject, co_code_adaptive),
    .ob_type = offsetof(PyObject, ob_type),
    .var_ob_size = offsetof(PyVarObject, ob_size),
    .bytes_ob_sval = offsetof(PyBytesObject, ob_sval),
    .unicode_state = offsetof(PyASCIIObject, state),
    .unicode_length = offsetof(PyASCIIObject, length),
    .unicode_ascii_size = sizeof(PyASCIIObject),
    .unicode_compact_size = sizeof(PyCompactUnicodeObject),
#endif
#ifdef TACH_HAVE_DEOPT
    .has_deopt = 1,
#endif
#ifdef TACH_HAVE_EXC
    .has_exc = 1,
    .exc_tstate_current_exception = offsetof(PyThreadState, current_exception),
    .exc_tstate_exc_info = offsetof(PyThreadState, exc_info),
    .exc_err_stackitem_exc_value = offsetof(_PyErr_StackItem, exc_value),
#endif
#ifdef TACH_HAVE_STACKTOP
    .has_stacktop = 1,
    .frame_stacktop = offsetof(_PyInterpreterFrame, stacktop),
#endif
#ifdef RETURN_VALUE
    .op_return_value = RETURN_VALUE,
#else
    .op_return_value = 0xFFFF,
#endif
#ifdef RETURN_CONST
    .op_return_const = RETURN_CONST,
#else
    .op_return_const = 0xFFFF,
#endif
#ifdef TACH_HAVE_311
    .has_is_entry = 1,
    .frame_is_entry = offsetof(_PyInterpreterFrame, is_entry),
#endif
};

/* Inline cache entries per base opcode (3.11 only: used to find the instruction that
 * owns a code unit, since 3.11's prev_instr may point into an instruction's caches). */
void tach_copy_caches(uint8_t out[256]) {
    for (int i = 0; i < 256; i++) {
#ifdef TACH_HAVE_311
        out[i] = tach_py311_caches[i];
#else
        out[i] = 0;
#endif
    }
}

/* The table is copied at start, so its initialiser need not be a constant expression. */
void tach_copy_deopt(uint8_t out[256]) {
#ifdef TACH_HAVE_DEOPT
    for (int i = 0; i < 256; i++) {
        out[i] = tach_py_deopt[i];
    }
#else
    for (int i = 0; i < 256; i++) {
        out[i] = (uint8_t)i;
    }
#endif
}
