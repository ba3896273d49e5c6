/* A writable MAP_SHARED mapping of a range of a file that holds no descriptor: the append
 * path of an active segment whose .log is not in the descriptor budget (file_records.py,
 * "Write windows"). CPython's mmap.mmap dup()s the descriptor it is given (3.11 has no
 * trackfd=False), so a mapping would cost a descriptor per partition: the thing the budget
 * exists to bound.
 *
 * Window(fd, offset, length)  maps [offset, offset + length) of the file behind fd (offset a
 *                             multiple of the page size, the file at least that long); fd
 *                             may be closed right after.
 * .write(position, data)      copies data to [position, position + len) of the window
 *                             (bounds checked). A fault while copying (SIGBUS: the file was
 *                             shrunk under the window, an I/O error reading a page back, no
 *                             space for a page of a sparse file) raises OSError(EIO) instead
 *                             of killing the process; what was copied before it is left.
 * .release(end)               gives the pages wholly below window position `end` back
 *                             (madvise MADV_DONTNEED: for a shared file mapping the data
 *                             stays in the page cache, dirty pages included; only this
 *                             process's page table entries, its RSS, go).
 * .close()                    unmaps (idempotent; also on dealloc).
 * .offset, .length            the mapped range.
 *
 * ReadMap(fd, capacity, length) a read-only MAP_SHARED mapping of [0, capacity) of the file
 *                             behind fd for the reads of FileRecords (file_records.py,
 *                             "Reading"). It holds a dup() of fd until closed, as mmap.mmap
 *                             does, so the descriptor budget counts it as before and the file
 *                             shows in /proc/PID/fd while it is mapped. capacity may exceed the
 *                             file's size (mapping past EOF is legal; touching a page wholly
 *                             past it is a SIGBUS), so only [0, length) is ever exported:
 *                             length <= the bytes written, which the caller keeps.
 * .extend(length)             sets the exported length (<= capacity): what an append made
 *                             readable, with no new mapping. Views already exported keep the
 *                             length they were taken with.
 * len(), buffer protocol      length, and [0, length) read-only; m[i], m[a:b] copy as mmap's.
 * .close()                    unmaps; BufferError while views are exported (as mmap.close).
 * .capacity, .closed
 *
 * The SIGBUS guard: a handler installed once (SA_SIGINFO | SA_NODEFER | SA_ONSTACK) jumps
 * back into write() when the fault happened inside one of its copies on this thread (a
 * thread-local jump buffer is armed only around the memcpy); any other SIGBUS goes to the
 * handler that was installed before (faulthandler's, or the default: the process dies, as
 * without this module). SA_NODEFER leaves SIGBUS unblocked in the handler, so the jump
 * needs no saved signal mask (sigsetjmp(.., 0): no syscall per write). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h"
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static __thread sigjmp_buf *volatile guard_jump = NULL;
static __thread char *volatile guard_lo = NULL;
static __thread char *volatile guard_hi = NULL;
static struct sigaction previous_bus;
static int guard_installed = 0;

static void bus_handler(int sig, siginfo_t *info, void *context) {
    sigjmp_buf *jump = guard_jump;
    if (jump != NULL && (char *)info->si_addr >= guard_lo && (char *)info->si_addr < guard_hi) {
        guard_jump = NULL;
        siglongjmp(*jump, 1);
    }
    /* Not ours: hand it to whoever had it before. */
    if (previous_bus.sa_flags & SA_SIGINFO) {
        if (previous_bus.sa_sigaction != NULL) {
            previous_bus.sa_sigaction(sig, info, context);
            return;
        }
    } else if (previous_bus.sa_handler != SIG_DFL && previous_bus.sa_handler != SIG_IGN) {
        previous_bus.sa_handler(sig);
        return;
    }
    /* The default action: restore it and return; the faulting access runs again and kills
     * the process as it would have without this module. */
    signal(SIGBUS, SIG_DFL);
}

static int install_guard(void) {
    if (guard_installed) return 0;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = bus_handler;
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous_bus) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    guard_installed = 1;
    return 0;
}

typedef struct {
    PyObject_HEAD
    char *base;
    Py_ssize_t offset;
    Py_ssize_t length;
} Window;

static int Window_init(Window *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fd", "offset", "length", NULL};
    int fd;
    Py_ssize_t offset, length;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "inn", kwlist, &fd, &offset, &length)) return -1;
    if (self->base != NULL) {
        PyErr_SetString(PyExc_ValueError, "window already mapped");
        return -1;
    }
    long page = sysconf(_SC_PAGESIZE);
    if (offset < 0 || length <= 0 || offset % page != 0) {
        PyErr_Format(PyExc_ValueError, "bad window: offset %zd, length %zd (page size %ld)", offset, length, page);
        return -1;
    }
    if (install_guard() != 0) return -1;
    void *base = mmap(NULL, (size_t)length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
    if (base == MAP_FAILED) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    /* No readahead on faults: the pages past the data are holes, and readahead would fill up to
     * ra_pages of them into the page cache on every window's first fault (~100 us each). */
    (void)madvise(base, (size_t)length, MADV_RANDOM);
    self->base = base;
    self->offset = offset;
    self->length = length;
    return 0;
}

static void unmap(Window *self) {
    if (self->base != NULL) {
        munmap(self->base, (size_t)self->length);
        self->base = NULL;
    }
}

static void Window_dealloc(Window *self) {
    unmap(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Window_write(Window *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "write(position, data)");
        return NULL;
    }
    Py_ssize_t position = PyLong_AsSsize_t(args[0]);
    if (position == -1 && PyErr_Occurred()) return NULL;
    if (self->base == NULL) {
        PyErr_SetString(PyExc_ValueError, "window closed");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) != 0) return NULL;
    if (position < 0 || view.len > self->length - position) {
        PyErr_Format(PyExc_ValueError, "write of %zd bytes at %zd outside a window of %zd", view.len, position,
                     self->length);
        PyBuffer_Release(&view);
        return NULL;
    }
    char *dest = self->base + position;
    sigjmp_buf jump;
    if (sigsetjmp(jump, 0) == 0) {
        guard_lo = dest;
        guard_hi = dest + view.len;
        guard_jump = &jump;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);  /* armed before the copy, disarmed after it */
        memcpy(dest, view.buf, (size_t)view.len);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        guard_jump = NULL;
    } else {  /* the handler jumped here: a fault inside the copy */
        PyBuffer_Release(&view);
        errno = EIO;
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *Window_release(Window *self, PyObject *arg) {
    Py_ssize_t end = PyLong_AsSsize_t(arg);
    if (end == -1 && PyErr_Occurred()) return NULL;
    if (self->base == NULL) Py_RETURN_NONE;
    long page = sysconf(_SC_PAGESIZE);
    if (end > self->length) end = self->length;
    end -= end % page;
    if (end > 0 && madvise(self->base, (size_t)end, MADV_DONTNEED) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyObject *Window_close(Window *self, PyObject *Py_UNUSED(ignored)) {
    unmap(self);
    Py_RETURN_NONE;
}

static PyObject *Window_closed(Window *self, void *Py_UNUSED(closure)) { return PyBool_FromLong(self->base == NULL); }

static PyMethodDef Window_methods[] = {
    {"write", (PyCFunction)(void (*)(void))Window_write, METH_FASTCALL, "write(position, data): copy data into the window"},
    {"release", (PyCFunction)Window_release, METH_O, "release(end): drop the pages wholly below end from this process"},
    {"close", (PyCFunction)Window_close, METH_NOARGS, "unmap the window"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Window_members[] = {
    {"offset", T_PYSSIZET, offsetof(Window, offset), READONLY, "file position of the window's first byte"},
    {"length", T_PYSSIZET, offsetof(Window, length), READONLY, "bytes mapped"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Window_getset[] = {
    {"closed", (getter)Window_closed, NULL, "True once unmapped", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WindowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "storage._write_window.Window",
    .tp_basicsize = sizeof(Window),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A writable shared mapping of a file range that holds no descriptor.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Window_init,
    .tp_dealloc = (destructor)Window_dealloc,
    .tp_methods = Window_methods,
    .tp_members = Window_members,
    .tp_getset = Window_getset,
};

/* -- ReadMap ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    char *base;
    Py_ssize_t capacity;
    Py_ssize_t length;
    Py_ssize_t exports;
    int fd;  /* the dup() it holds, -1 once closed */
} ReadMap;

static int ReadMap_init(ReadMap *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fd", "capacity", "length", NULL};
    int fd;
    Py_ssize_t capacity, length;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "inn", kwlist, &fd, &capacity, &length)) return -1;
    if (self->base != NULL) {
        PyErr_SetString(PyExc_ValueError, "already mapped");
        return -1;
    }
    if (capacity <= 0 || length < 0 || length > capacity) {
        PyErr_Format(PyExc_ValueError, "bad read mapping: capacity %zd, length %zd", capacity, length);
        return -1;
    }
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    void *base = mmap(NULL, (size_t)capacity, PROT_READ, MAP_SHARED, own, 0);
    if (base == MAP_FAILED) {
        PyErr_SetFromErrno(PyExc_OSError);
        close(own);
        return -1;
    }
    self->base = base;
    self->fd = own;
    self->capacity = capacity;
    self->length = length;
    return 0;
}

static void ReadMap_unmap(ReadMap *self) {
    if (self->base != NULL) {
        munmap(self->base, (size_t)self->capacity);
        self->base = NULL;
        close(self->fd);
        self->fd = -1;
    }
}

static void ReadMap_dealloc(ReadMap *self) {
    ReadMap_unmap(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ReadMap_getbuffer(ReadMap *self, Py_buffer *view, int flags) {
    if (self->base == NULL) {
        PyErr_SetString(PyExc_ValueError, "mapping closed");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->base, self->length, 1, flags) != 0) return -1;
    self->exports++;
    return 0;
}

static void ReadMap_releasebuffer(ReadMap *self, Py_buffer *Py_UNUSED(view)) { self->exports--; }

static PyBufferProcs ReadMap_as_buffer = {
    .bf_getbuffer = (getbufferproc)ReadMap_getbuffer,
    .bf_releasebuffer = (releasebufferproc)ReadMap_releasebuffer,
};

static Py_ssize_t ReadMap_len(ReadMap *self) {
    if (self->base == NULL) {
        PyErr_SetString(PyExc_ValueError, "mapping closed");
        return -1;
    }
    return self->length;
}

static PyObject *ReadMap_subscript(ReadMap *self, PyObject *item) {
    if (self->base == NULL) {
        PyErr_SetString(PyExc_ValueError, "mapping closed");
        return NULL;
    }
    if (PyIndex_Check(item)) {
        Py_ssize_t i = PyNumber_AsSsize_t(item, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        if (i < 0) i += self->length;
        if (i < 0 || i >= self->length) {
            PyErr_SetString(PyExc_IndexError, "mapping index out of range");
            return NULL;
        }
        return PyLong_FromLong((unsigned char)self->base[i]);
    }
    if (PySlice_Check(item)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(item, &start, &stop, &step) < 0) return NULL;
        Py_ssize_t n = PySlice_AdjustIndices(self->length, &start, &stop, step);
        if (step == 1) return PyBytes_FromStringAndSize(self->base + start, n);
        PyObject *out = PyBytes_FromStringAndSize(NULL, n);
        if (out == NULL) return NULL;
        char *dest = PyBytes_AS_STRING(out);
        for (Py_ssize_t k = 0, i = start; k < n; k++, i += step) dest[k] = self->base[i];
        return out;
    }
    PyErr_SetString(PyExc_TypeError, "mapping indices must be integers or slices");
    return NULL;
}

static PyMappingMethods ReadMap_as_mapping = {
    .mp_length = (lenfunc)ReadMap_len,
    .mp_subscript = (binaryfunc)ReadMap_subscript,
};

static PySequenceMethods ReadMap_as_sequence = {
    .sq_length = (lenfunc)ReadMap_len,
};

static PyObject *ReadMap_extend(ReadMap *self, PyObject *arg) {
    Py_ssize_t length = PyLong_AsSsize_t(arg);
    if (length == -1 && PyErr_Occurred()) return NULL;
    if (self->base == NULL) {
        PyErr_SetString(PyExc_ValueError, "mapping closed");
        return NULL;
    }
    if (length < self->length || length > self->capacity) {
        /* never down: views of the old length may live, and the file is cut only below them */
        PyErr_Format(PyExc_ValueError, "length %zd outside [%zd, %zd]", length, self->length, self->capacity);
        return NULL;
    }
    self->length = length;
    Py_RETURN_NONE;
}

static PyObject *ReadMap_close(ReadMap *self, PyObject *Py_UNUSED(ignored)) {
    if (self->exports > 0) {
        PyErr_SetString(PyExc_BufferError, "cannot close exported pointers exist");
        return NULL;
    }
    ReadMap_unmap(self);
    Py_RETURN_NONE;
}

static PyObject *ReadMap_closed(ReadMap *self, void *Py_UNUSED(closure)) { return PyBool_FromLong(self->base == NULL); }

static PyMethodDef ReadMap_methods[] = {
    {"extend", (PyCFunction)ReadMap_extend, METH_O, "extend(length): export [0, length) from now on"},
    {"close", (PyCFunction)ReadMap_close, METH_NOARGS, "unmap; BufferError while views are exported"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef ReadMap_members[] = {
    {"capacity", T_PYSSIZET, offsetof(ReadMap, capacity), READONLY, "bytes mapped (may pass EOF)"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef ReadMap_getset[] = {
    {"closed", (getter)ReadMap_closed, NULL, "True once unmapped", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReadMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "storage._write_window.ReadMap",
    .tp_basicsize = sizeof(ReadMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only shared mapping of a file, longer than the file, exporting only its written bytes.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ReadMap_init,
    .tp_dealloc = (destructor)ReadMap_dealloc,
    .tp_methods = ReadMap_methods,
    .tp_members = ReadMap_members,
    .tp_getset = ReadMap_getset,
    .tp_as_buffer = &ReadMap_as_buffer,
    .tp_as_mapping = &ReadMap_as_mapping,
    .tp_as_sequence = &ReadMap_as_sequence,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_write_window", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__write_window(void) {
    if (PyType_Ready(&WindowType) < 0 || PyType_Ready(&ReadMapType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&WindowType);
    if (PyModule_AddObject(m, "Window", (PyObject *)&WindowType) < 0) {
        Py_DECREF(&WindowType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ReadMapType);
    if (PyModule_AddObject(m, "ReadMap", (PyObject *)&ReadMapType) < 0) {
        Py_DECREF(&ReadMapType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "PAGE_SIZE", sysconf(_SC_PAGESIZE)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
