/* Prints the Rust table of one CPython version's interpreter layout (scripts/gen-layouts
 * compiles it once per version against that version's own internal headers, with
 * -DPy_BUILD_CORE, and writes src/record/layouts_generated.rs).
 *
 * - CPython 3.9-3.12 publish no _Py_DebugOffsets: every offset the recorder reads is
 *   measured here with offsetof()/sizeof() (a `GeneratedLayout`).
 * - CPython 3.13+ publish _Py_DebugOffsets, which lack a few things the recorder needs:
 *   the exception state before 3.15, 3.13's frame `stacktop`, the return opcodes and the
 *   de-specialisation table (not every interpreter exports `_PyOpcode_Deopt`). Those are
 *   printed as a `GeneratedExtras`.
 *
 * So the tables are the headers' own numbers, never typed in, and the recorder (in-process
 * or from outside) picks them by the target's version at run time. A build of tach never
 * needs these headers: only regenerating does.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "Python.h"

#if PY_VERSION_HEX >= 0x030D0000
#  if PY_VERSION_HEX < 0x030E0000
#    include "internal/pycore_frame.h"
#  endif
/* The header defines the tables when asked to; renamed so that they cannot clash with
 * a declaration of the interpreter's own. */
#  define NEED_OPCODE_METADATA 1
#  define _PyOpcode_Deopt tach_py_deopt
#  include "internal/pycore_opcode_metadata.h"
#else
#  if PY_VERSION_HEX >= 0x030B0000
#    define NEED_OPCODE_TABLES 1
#    include "internal/pycore_frame.h"
#    include "internal/pycore_opcode.h"
#  endif
#  include "internal/pycore_runtime.h"
#  include "internal/pycore_interp.h"
#  if PY_VERSION_HEX < 0x030B0000
#    include "frameobject.h"
#  endif
#endif

#define OFF(type, field) ((unsigned long)offsetof(type, field))
#define SIZE(type) ((unsigned long)sizeof(type))

static void some(const char *name, unsigned long v) { printf("        %s: Some(%lu),\n", name, v); }
static void none(const char *name) { printf("        %s: None,\n", name); }
static void num(const char *name, unsigned long v) { printf("        %s: %lu,\n", name, v); }

static void table(const char *name, const uint8_t *t) {
    printf("        %s: Some([", name);
    for (int i = 0; i < 256; i++) {
        printf("%s%u", i ? ", " : "", t[i]);
    }
    printf("]),\n");
}

#if PY_VERSION_HEX >= 0x030D0000
/* 3.13+: what _Py_DebugOffsets does not publish. */
int main(void) {
    printf("    GeneratedExtras {\n");
    printf("        version: (%d, %d),\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
    printf("        headers: \"%s\",\n", PY_VERSION);
    /* The exception being raised and the one being handled (`exc_info` points at the
     * `_PyErr_StackItem` in use; 3.15's debug offsets have them, earlier ones do not). */
    num("tstate_current_exception", OFF(PyThreadState, current_exception));
    num("tstate_exc_info", OFF(PyThreadState, exc_info));
    num("err_stackitem_exc_value", OFF(_PyErr_StackItem, exc_value));
#  if PY_VERSION_HEX < 0x030E0000
    /* 3.13: -1 while the eval loop runs the frame (see layout.rs, `frame_stacktop`). */
    some("frame_stacktop", OFF(_PyInterpreterFrame, stacktop));
#  else
    none("frame_stacktop");
#  endif
#  ifdef RETURN_VALUE
    some("op_return_value", RETURN_VALUE);
#  else
    none("op_return_value");
#  endif
#  ifdef RETURN_CONST
    some("op_return_const", RETURN_CONST);
#  else
    none("op_return_const");
#  endif
    table("deopt", tach_py_deopt);
    printf("    },\n");
    return 0;
}
#else
int main(void) {
    printf("    GeneratedLayout {\n");
    printf("        version: (%d, %d),\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
    printf("        headers: \"%s\",\n", PY_VERSION);
    /* _PyRuntimeState, PyInterpreterState */
    num("runtime_interpreters_head", OFF(_PyRuntimeState, interpreters.head));
    num("runtime_main_thread", OFF(_PyRuntimeState, main_thread));
    num("interp_next", OFF(PyInterpreterState, next));
#if PY_VERSION_HEX >= 0x030B0000
    num("interp_threads_head", OFF(PyInterpreterState, threads.head));
#else
    num("interp_threads_head", OFF(PyInterpreterState, tstate_head));
#endif
    num("interp_id", OFF(PyInterpreterState, id));
    num("interp_gc_collecting", OFF(PyInterpreterState, gc.collecting));
    /* The GIL: in the runtime up to 3.11, the interpreter's own from 3.12 (the main
     * interpreter always has its own). */
#if PY_VERSION_HEX >= 0x030C0000
    num("gil_locked", OFF(PyInterpreterState, _gil.locked));
    num("gil_last_holder", OFF(PyInterpreterState, _gil.last_holder));
    printf("        gil_in_runtime: false,\n");
#else
    num("gil_locked", OFF(_PyRuntimeState, ceval.gil.locked));
    num("gil_last_holder", OFF(_PyRuntimeState, ceval.gil.last_holder));
    printf("        gil_in_runtime: true,\n");
#endif
    /* PyThreadState */
    num("tstate_size", SIZE(PyThreadState));
    num("tstate_next", OFF(PyThreadState, next));
    num("tstate_interp", OFF(PyThreadState, interp));
    num("tstate_thread_id", OFF(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
    num("tstate_frame", OFF(PyThreadState, cframe));
    some("cframe_current_frame", OFF(_PyCFrame, current_frame));
    some("tstate_native_thread_id", OFF(PyThreadState, native_thread_id));
#else
    num("tstate_frame", OFF(PyThreadState, frame));
    none("cframe_current_frame");
    none("tstate_native_thread_id");
#endif
#if PY_VERSION_HEX >= 0x030C0000
    num("tstate_current_exception", OFF(PyThreadState, current_exception));
#else
    num("tstate_current_exception", OFF(PyThreadState, curexc_type));
#endif
    num("tstate_exc_info", OFF(PyThreadState, exc_info));
    num("err_stackitem_exc_value", OFF(_PyErr_StackItem, exc_value));
    /* Frames: _PyInterpreterFrame from 3.11, the PyFrameObject before. */
#if PY_VERSION_HEX >= 0x030B0000
    printf("        frame_object: false,\n");
    num("frame_size", SIZE(_PyInterpreterFrame));
    num("frame_previous", OFF(_PyInterpreterFrame, previous));
    num("frame_code", OFF(_PyInterpreterFrame, f_code));
    num("frame_instr", OFF(_PyInterpreterFrame, prev_instr));
    some("frame_owner", OFF(_PyInterpreterFrame, owner));
    some("frame_stacktop", OFF(_PyInterpreterFrame, stacktop));
#  if PY_VERSION_HEX < 0x030C0000
    some("frame_is_entry", OFF(_PyInterpreterFrame, is_entry));
#  else
    none("frame_is_entry");
#  endif
#else
    printf("        frame_object: true,\n");
    num("frame_size", SIZE(PyFrameObject));
    num("frame_previous", OFF(PyFrameObject, f_back));
    num("frame_code", OFF(PyFrameObject, f_code));
    num("frame_instr", OFF(PyFrameObject, f_lasti));
    none("frame_owner");
    none("frame_stacktop");
    none("frame_is_entry");
#endif
    /* PyCodeObject */
    num("code_size", SIZE(PyCodeObject));
    num("code_filename", OFF(PyCodeObject, co_filename));
    num("code_firstlineno", OFF(PyCodeObject, co_firstlineno));
#if PY_VERSION_HEX >= 0x030B0000
    num("code_name", OFF(PyCodeObject, co_qualname));
    num("code_linetable", OFF(PyCodeObject, co_linetable));
    some("code_firsttraceable", OFF(PyCodeObject, _co_firsttraceable));
    some("code_adaptive", OFF(PyCodeObject, co_code_adaptive));
    none("code_code");
    printf("        line_table: LineTableFormat::Locations,\n");
#else
    /* No co_qualname before 3.11: the name is what CPython's tracebacks showed then. */
    num("code_name", OFF(PyCodeObject, co_name));
    none("code_firsttraceable");
    none("code_adaptive");
    some("code_code", OFF(PyCodeObject, co_code));
#  if PY_VERSION_HEX >= 0x030A0000
    num("code_linetable", OFF(PyCodeObject, co_linetable));
    printf("        line_table: LineTableFormat::Linetable310,\n");
#  else
    num("code_linetable", OFF(PyCodeObject, co_lnotab));
    printf("        line_table: LineTableFormat::Lnotab,\n");
#  endif
#endif
    /* Objects */
    num("ob_type", OFF(PyObject, ob_type));
    num("var_ob_size", OFF(PyVarObject, ob_size));
    num("bytes_sval", OFF(PyBytesObject, ob_sval));
    num("unicode_state", OFF(PyASCIIObject, state));
    num("unicode_length", OFF(PyASCIIObject, length));
    num("unicode_ascii_size", SIZE(PyASCIIObject));
    num("unicode_compact_size", SIZE(PyCompactUnicodeObject));
    /* Opcodes: the return instructions (a frame on one has unlinked its callees) and,
     * from 3.11, the de-specialisation and inline cache tables. */
#if PY_VERSION_HEX >= 0x030B0000
    some("op_return_value", RETURN_VALUE);
#  ifdef RETURN_CONST
    some("op_return_const", RETURN_CONST);
#  else
    none("op_return_const");
#  endif
    table("deopt", _PyOpcode_Deopt);
    table("caches", _PyOpcode_Caches);
#else
    none("op_return_value");
    none("op_return_const");
    none("deopt");
    none("caches");
#endif
    printf("    },\n");
    return 0;
}
#endif
