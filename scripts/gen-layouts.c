/* Prints the Rust table of one CPython version's interpreter layout (scripts/gen-layouts
 * compiles it once per version against that version's own internal headers, with
 * -DPy_BUILD_CORE, and writes src/record/interpreter/layout/generated.rs).
 *
 * - CPython 3.9-3.12 publish no _Py_DebugOffsets: every offset the recorder reads is
 *   measured here with offsetof()/sizeof(), printed as the very `Offsets` the sampler
 *   uses (grouped per CPython object, src/record/interpreter/layout/offsets.rs), in a
 *   `GeneratedLayout` with the version's opcode tables.
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

/* A 256-byte opcode table, as `name: [...]` or, `optional`, `name: Some([...])`. */
static void table(const char *name, const uint8_t *t, int optional) {
    printf("        %s: %s[", name, optional ? "Some(" : "");
    for (int i = 0; i < 256; i++) {
        printf("%s%u", i ? ", " : "", t[i]);
    }
    printf("]%s,\n", optional ? ")" : "");
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
    /* 3.13: -1 while the eval loop runs the frame (see layout/offsets.rs, `FrameOffsets::stacktop`). */
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
    table("deopt", tach_py_deopt, 1);
    printf("    },\n");
    return 0;
}
#else
static void open_group(const char *field, const char *type) { printf("        %s: %s {\n", field, type); }
static void close_group(void) { printf("        },\n"); }
static void flag(const char *name, int v) { printf("        %s: %s,\n", name, v ? "true" : "false"); }

int main(void) {
    printf("    GeneratedLayout {\n");
    printf("        version: (%d, %d),\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
    printf("        headers: \"%s\",\n", PY_VERSION);
    printf("        offsets: Offsets {\n");
    open_group("runtime", "RuntimeOffsets");
    num("interpreters_head", OFF(_PyRuntimeState, interpreters.head));
    some("main_thread", OFF(_PyRuntimeState, main_thread));
    close_group();
    open_group("interp", "InterpreterOffsets");
    num("next", OFF(PyInterpreterState, next));
#if PY_VERSION_HEX >= 0x030B0000
    num("threads_head", OFF(PyInterpreterState, threads.head));
#else
    num("threads_head", OFF(PyInterpreterState, tstate_head));
#endif
    num("id", OFF(PyInterpreterState, id));
    some("gc_collecting", OFF(PyInterpreterState, gc.collecting));
    none("gc_frame");
    close_group();
    /* The GIL: in the runtime up to 3.11, the interpreter's own from 3.12 (the main
     * interpreter always has its own). */
    open_group("gil", "GilOffsets");
#if PY_VERSION_HEX >= 0x030C0000
    some("locked", OFF(PyInterpreterState, _gil.locked));
    some("holder", OFF(PyInterpreterState, _gil.last_holder));
    flag("in_runtime", 0);
#else
    some("locked", OFF(_PyRuntimeState, ceval.gil.locked));
    some("holder", OFF(_PyRuntimeState, ceval.gil.last_holder));
    flag("in_runtime", 1);
#endif
    close_group();
    open_group("thread", "ThreadOffsets");
    num("size", SIZE(PyThreadState));
    num("next", OFF(PyThreadState, next));
    num("interp", OFF(PyThreadState, interp));
#if PY_VERSION_HEX >= 0x030B0000
    num("frame", OFF(PyThreadState, cframe));
    some("cframe_current_frame", OFF(_PyCFrame, current_frame));
#else
    num("frame", OFF(PyThreadState, frame));
    none("cframe_current_frame");
#endif
    none("base_frame");
    num("thread_id", OFF(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
    num("native_thread_id", OFF(PyThreadState, native_thread_id));
#else
    /* None in the thread state: read through `pthread_tid`, found when attaching. */
    num("native_thread_id", OFF(PyThreadState, thread_id));
#endif
    none("holds_gil");
    none("gil_requested");
#if PY_VERSION_HEX >= 0x030C0000
    some("current_exception", OFF(PyThreadState, current_exception));
#else
    some("current_exception", OFF(PyThreadState, curexc_type));
#endif
    some("exc_info", OFF(PyThreadState, exc_info));
    flag("exc_info_is_pointer", 1);
    num("stackitem_exc_value", OFF(_PyErr_StackItem, exc_value));
    none("pthread_tid");
    close_group();
    /* Frames: _PyInterpreterFrame from 3.11, the PyFrameObject before. */
    open_group("frame", "FrameOffsets");
#if PY_VERSION_HEX >= 0x030B0000
    num("size", SIZE(_PyInterpreterFrame));
    num("previous", OFF(_PyInterpreterFrame, previous));
    num("executable", OFF(_PyInterpreterFrame, f_code));
    num("instr", OFF(_PyInterpreterFrame, prev_instr));
    some("stacktop", OFF(_PyInterpreterFrame, stacktop));
#  if PY_VERSION_HEX < 0x030C0000
    some("is_entry", OFF(_PyInterpreterFrame, is_entry));
#  else
    none("is_entry");
#  endif
    /* The return instructions: a frame on one has unlinked its callees. */
#  ifdef RETURN_CONST
    printf("        return_opcodes: Some([%d, %d]),\n", RETURN_VALUE, RETURN_CONST);
#  else
    printf("        return_opcodes: Some([%d, 0xFFFF]),\n", RETURN_VALUE);
#  endif
    num("owner", OFF(_PyInterpreterFrame, owner));
    num("executable_tag_mask", 0);
    flag("instr_is_prev", 1);
    flag("is_object", 0);
#else
    num("size", SIZE(PyFrameObject));
    num("previous", OFF(PyFrameObject, f_back));
    num("executable", OFF(PyFrameObject, f_code));
    num("instr", OFF(PyFrameObject, f_lasti));
    none("stacktop");
    none("is_entry");
    none("return_opcodes");
    num("owner", 0);
    num("executable_tag_mask", 0);
    flag("instr_is_prev", 0);
    flag("is_object", 1);
#endif
    close_group();
    open_group("code", "CodeOffsets");
#if PY_VERSION_HEX >= 0x030B0000
    /* Everything the sampler reads lies before the bytecode. */
    num("header_size", OFF(PyCodeObject, co_code_adaptive));
#else
    num("header_size", SIZE(PyCodeObject));
#endif
    num("filename", OFF(PyCodeObject, co_filename));
#if PY_VERSION_HEX >= 0x030B0000
    num("qualname", OFF(PyCodeObject, co_qualname));
#else
    /* No co_qualname before 3.11: the name is what CPython's tracebacks showed then. */
    num("qualname", OFF(PyCodeObject, co_name));
#endif
#if PY_VERSION_HEX >= 0x030A0000
    num("linetable", OFF(PyCodeObject, co_linetable));
#else
    num("linetable", OFF(PyCodeObject, co_lnotab));
#endif
    num("firstlineno", OFF(PyCodeObject, co_firstlineno));
#if PY_VERSION_HEX >= 0x030B0000
    some("firsttraceable", OFF(PyCodeObject, _co_firsttraceable));
    num("adaptive", OFF(PyCodeObject, co_code_adaptive));
    none("code");
    printf("        line_table: LineTableFormat::Locations,\n");
#else
    none("firsttraceable");
    num("adaptive", 0);
    some("code", OFF(PyCodeObject, co_code));
#  if PY_VERSION_HEX >= 0x030A0000
    printf("        line_table: LineTableFormat::Linetable310,\n");
#  else
    printf("        line_table: LineTableFormat::Lnotab,\n");
#  endif
#endif
    close_group();
    open_group("object", "PyObjectOffsets");
    num("ob_type", OFF(PyObject, ob_type));
    num("ob_size", OFF(PyVarObject, ob_size));
    close_group();
    open_group("bytes", "BytesOffsets");
    num("ob_sval", OFF(PyBytesObject, ob_sval));
    close_group();
    open_group("unicode", "UnicodeOffsets");
    num("state", OFF(PyASCIIObject, state));
    num("length", OFF(PyASCIIObject, length));
    num("ascii_size", SIZE(PyASCIIObject));
    num("compact_size", SIZE(PyCompactUnicodeObject));
    close_group();
    printf("        },\n");
    /* From 3.11, the de-specialisation and inline cache tables. */
#if PY_VERSION_HEX >= 0x030B0000
    printf("        opcodes: Some(OpcodeTables {\n");
    table("deopt", _PyOpcode_Deopt, 0);
    table("caches", _PyOpcode_Caches, 1);
    printf("        }),\n");
#else
    none("opcodes");
#endif
    printf("    },\n");
    return 0;
}
#endif
