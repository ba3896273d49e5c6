/* One API's request observations for the broker's metrics (broker/metrics.py, ApiStats):
 * five latency phases and the request size, each a log2 histogram (a value's bucket is its
 * bit length: 65 buckets) with a sum, the response bytes and the requests per version.
 * arrived(version) is called when a request is read and done() when it is answered, once each
 * per request on the event loop: C calls instead of ~200 bytecodes of Python
 * (bench/metrics_bench.py --instructions shows the difference). broker/metrics.py's PyRequestStats is the reference;
 * tests/metrics/test_request_stats.py checks the two agree (hypothesis).
 *
 * Arguments are signed 64-bit ints (others raise OverflowError: the clock's nanoseconds never
 * are); sums are 128-bit, so they never wrap where Python's ints would not. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <stddef.h>
#include <structmember.h>
#include <time.h>

#if PY_BIG_ENDIAN
#error "from_int128 assumes a little-endian machine"
#endif

#define PHASES 6
#define BUCKETS 65
#define VERSIONS 64 /* broker/metrics.py's MAX_VERSION: 0..62, then "other" */

typedef struct {
    PyObject_HEAD
    long long counts[PHASES][BUCKETS];
    __int128 sums[PHASES];
    __int128 response_bytes;
    long long versions[VERSIONS];
} RequestStats;

/* An int argument as a signed 64-bit value. The clock's nanoseconds are two 30-bit digits:
 * CPython 3.11's PyLong_AsLongLong takes its slow path (_PyLong_AsByteArray) for those, so
 * exact ints of up to two digits are read here directly; anything else goes through it. */
static inline int as_i64(PyObject *o, long long *out) {
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    if (PyLong_CheckExact(o)) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        switch (Py_SIZE(o)) {
        case 0: *out = 0; return 0;
        case 1: *out = (long long)d[0]; return 0;
        case -1: *out = -(long long)d[0]; return 0;
        case 2: *out = ((long long)d[1] << PyLong_SHIFT) | (long long)d[0]; return 0;
        case -2: *out = -(((long long)d[1] << PyLong_SHIFT) | (long long)d[0]); return 0;
        default: break;
        }
    }
#endif
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* len() of a response: None (no response) 0, a buffer its length, a list the sum of its items'. */
static Py_ssize_t response_size(PyObject *r) {
    if (r == Py_None)
        return 0;
    if (PyBytes_CheckExact(r))
        return PyBytes_GET_SIZE(r);
    if (PyList_CheckExact(r)) {
        Py_ssize_t total = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(r); i++) {
            PyObject *item = PyList_GET_ITEM(r, i);
            Py_ssize_t n = PyBytes_CheckExact(item) ? PyBytes_GET_SIZE(item) : PyObject_Length(item);
            if (n < 0)
                return -1;
            total += n;
        }
        return total;
    }
    return PyObject_Length(r);
}

static inline int bit_length(long long v) {
    /* Python's int.bit_length: that of the absolute value (LLONG_MIN included). */
    unsigned long long m = v < 0 ? (unsigned long long)(-(v + 1)) + 1u : (unsigned long long)v;
    return m ? 64 - __builtin_clzll(m) : 0;
}

/* A listener's byte counter (broker/metrics.py ListenerStats.out): RequestStats.done adds each
 * response's size to it in the same call, instead of a ``+=`` of Python ints per request.
 * PyCounter in broker/metrics.py is the reference. */
typedef struct {
    PyObject_HEAD
    long long value;
} Counter;

static PyTypeObject CounterType;

/* The tp_new of the types made with no arguments (RequestStats, AppendCounter, Counter): a
 * zeroed object; "X() takes no arguments" otherwise, X the type's name without its module. */
static PyObject *new_without_arguments(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        const char *dot = strrchr(type->tp_name, '.');
        PyErr_Format(PyExc_TypeError, "%s() takes no arguments", dot != NULL ? dot + 1 : type->tp_name);
        return NULL;
    }
    return type->tp_alloc(type, 0); /* zeroed */
}


/* v: t_read, t_start, t_local, t_ready, t_sent, request size; ``size``: the response's. t_local 0:
 * answered while its handler ran, so no remote time (t_local is t_ready). */
static void record(RequestStats *self, long long v[6], Py_ssize_t size) {
    if (v[2] == 0)
        v[2] = v[3];
    long long d[PHASES] = {v[4] - v[0], v[1] - v[0], v[2] - v[1], v[3] - v[2], v[4] - v[3], v[5]};
    for (int i = 0; i < PHASES; i++) {
        self->counts[i][bit_length(d[i])]++;
        self->sums[i] += d[i];
    }
    self->response_bytes += size;
}

static PyObject *RequestStats_done(RequestStats *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 && nargs != 8) {
        PyErr_Format(PyExc_TypeError, "done() takes 7 or 8 arguments (%zd given)", nargs);
        return NULL;
    }
    Counter *out = NULL;
    if (nargs == 8 && args[7] != Py_None) {
        if (Py_TYPE(args[7]) != &CounterType) {
            PyErr_SetString(PyExc_TypeError, "done(): the 8th argument must be a Counter or None");
            return NULL;
        }
        out = (Counter *)args[7];
    }
    long long v[6];
    for (int i = 0; i < 6; i++) {
        if (as_i64(args[i], &v[i]) < 0)
            return NULL;
    }
    Py_ssize_t size = response_size(args[6]);
    if (size < 0)
        return NULL;
    record(self, v, size);
    if (out != NULL) {
        out->value += size;
        Py_RETURN_NONE;
    }
    return PyLong_FromSsize_t(size);
}

/* SlotTimes: the base of a connection's request slot (broker/network.py RequestContext), holding what
 * RequestStats.finish reads at the answer: t_read, t_start, t_local, t_ready (clock readings,
 * signed 64-bit: stored without an int object each), ``request`` (the request's size: an int, or
 * its frame, whose length plus the 4-byte size prefix is its size) and ``stats`` (the API's
 * RequestStats). begin() sets them all (t_local and t_ready 0: not parked, not answered) and
 * finish() reads them (RequestStats' and Meter's), here, without a Python attribute access each;
 * Python code may read and write them as any __slots__ attribute (tests do; the interpreter
 * specializes only object members, so the connection leaves them to begin). PySlotTimes in
 * broker/metrics.py is the reference. */
typedef struct {
    PyObject_HEAD
    long long t_read, t_start, t_local, t_ready;
    PyObject *request, *stats;
} SlotTimes;

static PyTypeObject SlotTimesType;

static int SlotTimes_traverse(SlotTimes *self, visitproc visit, void *arg) {
    Py_VISIT(self->request);
    Py_VISIT(self->stats);
    return 0;
}

static int SlotTimes_clear(SlotTimes *self) {
    Py_CLEAR(self->request);
    Py_CLEAR(self->stats);
    return 0;
}

static void SlotTimes_dealloc(SlotTimes *self) {
    PyObject_GC_UnTrack(self);
    SlotTimes_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef SlotTimes_members[] = {
    {"t_read", T_LONGLONG, offsetof(SlotTimes, t_read), 0, "when the read holding the request happened"},
    {"t_start", T_LONGLONG, offsetof(SlotTimes, t_start), 0, "when its processing started"},
    {"t_local", T_LONGLONG, offsetof(SlotTimes, t_local), 0, "when it was parked (0: answered while handled)"},
    {"t_ready", T_LONGLONG, offsetof(SlotTimes, t_ready), 0, "when its answer was ready"},
    {"request", T_OBJECT_EX, offsetof(SlotTimes, request), 0, "its size: an int, or its frame (length + 4)"},
    {"stats", T_OBJECT_EX, offsetof(SlotTimes, stats), 0, "its API's RequestStats (set by begin)"},
    {NULL},
};

static PyTypeObject SlotTimesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._request_stats.SlotTimes",
    .tp_basicsize = sizeof(SlotTimes),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A request slot's clock readings, size and API stats, for RequestStats/Meter begin and finish.",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)SlotTimes_traverse,
    .tp_clear = (inquiry)SlotTimes_clear,
    .tp_dealloc = (destructor)SlotTimes_dealloc,
    .tp_members = SlotTimes_members,
};

static inline void set_field(PyObject **field, PyObject *value) {
    PyObject *old = *field;
    Py_INCREF(value);
    *field = value;
    Py_XDECREF(old);
}

static inline int count_version(RequestStats *self, PyObject *arg) {
    long long version;
    if (as_i64(arg, &version) < 0)
        return -1;
    self->versions[0 <= version && version < VERSIONS - 1 ? version : VERSIONS - 1]++;
    return 0;
}

/* begin(slot, version, t_read, t_start, frame): a request read (arrived(version)), its slot
 * given its read's and its start's clock readings, its frame (its size) and these stats. */
static PyObject *RequestStats_begin(RequestStats *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "begin() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], &SlotTimesType)) {
        PyErr_SetString(PyExc_TypeError, "begin(): the slot must be a SlotTimes");
        return NULL;
    }
    long long t_read, t_start;
    if (as_i64(args[2], &t_read) < 0 || as_i64(args[3], &t_start) < 0 || count_version(self, args[1]) < 0)
        return NULL;
    SlotTimes *slot = (SlotTimes *)args[0];
    slot->t_read = t_read;
    slot->t_start = t_start;
    slot->t_local = slot->t_ready = 0;
    set_field(&slot->request, args[4]);
    set_field(&slot->stats, (PyObject *)self);
    Py_RETURN_NONE;
}

/* The slot's request size, its readings into v[0..3] and v[5] (v[4], t_sent, is the caller's). */
static int slot_values(SlotTimes *slot, long long v[6]) {
    PyObject *request = slot->request;
    if (request == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the slot has no request");
        return -1;
    }
    if (PyLong_Check(request)) {
        if (as_i64(request, &v[5]) < 0)
            return -1;
    } else {
        Py_ssize_t n = PyByteArray_CheckExact(request) ? PyByteArray_GET_SIZE(request) : PyObject_Length(request);
        if (n < 0)
            return -1;
        v[5] = (long long)n + 4;
    }
    v[0] = slot->t_read;
    v[1] = slot->t_start;
    v[2] = slot->t_local;
    v[3] = slot->t_ready;
    return 0;
}

/* finish(slot, t_sent, response, out): done() with the slot's readings and size. */
static PyObject *RequestStats_finish(RequestStats *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "finish() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], &SlotTimesType)) {
        PyErr_SetString(PyExc_TypeError, "finish(): the slot must be a SlotTimes");
        return NULL;
    }
    long long v[6];
    if (slot_values((SlotTimes *)args[0], v) < 0 || as_i64(args[1], &v[4]) < 0)
        return NULL;
    Counter *out = NULL;
    if (args[3] != Py_None) {
        if (Py_TYPE(args[3]) != &CounterType) {
            PyErr_SetString(PyExc_TypeError, "finish(): out must be a Counter or None");
            return NULL;
        }
        out = (Counter *)args[3];
    }
    Py_ssize_t size = response_size(args[2]);
    if (size < 0)
        return NULL;
    record(self, v, size);
    if (out != NULL) {
        out->value += size;
        Py_RETURN_NONE;
    }
    return PyLong_FromSsize_t(size);
}

static PyObject *RequestStats_arrived(RequestStats *self, PyObject *arg) {
    if (count_version(self, arg) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *RequestStats_versions(RequestStats *self, PyObject *unused) {
    PyObject *out = PyList_New(VERSIONS);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < VERSIONS; i++) {
        PyObject *n = PyLong_FromLongLong(self->versions[i]);
        if (n == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, n);
    }
    return out;
}

static int phase_arg(PyObject *arg) {
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return -1;
    if (i < 0 || i >= PHASES) {
        PyErr_Format(PyExc_IndexError, "phase %ld out of range", i);
        return -1;
    }
    return (int)i;
}

static PyObject *RequestStats_counts(RequestStats *self, PyObject *arg) {
    int i = phase_arg(arg);
    if (i < 0)
        return NULL;
    PyObject *out = PyList_New(BUCKETS);
    if (out == NULL)
        return NULL;
    for (int b = 0; b < BUCKETS; b++) {
        PyObject *n = PyLong_FromLongLong(self->counts[i][b]);
        if (n == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, b, n);
    }
    return out;
}

static PyObject *from_int128(__int128 v) {
    if (v >= LLONG_MIN && v <= LLONG_MAX)
        return PyLong_FromLongLong((long long)v);
    unsigned char bytes[16];
    memcpy(bytes, &v, sizeof bytes); /* x86-64 and aarch64: little-endian, two's complement */
    return _PyLong_FromByteArray(bytes, sizeof bytes, 1, 1);
}

static PyObject *RequestStats_sum(RequestStats *self, PyObject *arg) {
    int i = phase_arg(arg);
    return i < 0 ? NULL : from_int128(self->sums[i]);
}

static PyObject *RequestStats_get_response_bytes(RequestStats *self, void *closure) {
    return from_int128(self->response_bytes);
}

static PyMethodDef RequestStats_methods[] = {
    {"done", (PyCFunction)(void (*)(void))RequestStats_done, METH_FASTCALL,
     "done(t_read, t_start, t_local, t_ready, t_sent, request_size, response[, out]) -> the response's size\n"
     "(response: None, a buffer, or a list of buffers); with a Counter ``out``, the size is added to it\n"
     "and None returned"},
    {"arrived", (PyCFunction)RequestStats_arrived, METH_O, "arrived(version): a request read"},
    {"begin", (PyCFunction)(void (*)(void))RequestStats_begin, METH_FASTCALL,
     "begin(slot, version, t_read, t_start, frame): arrived(version), and the slot (a SlotTimes) given\n"
     "t_read, t_start and its request (the frame)"},
    {"finish", (PyCFunction)(void (*)(void))RequestStats_finish, METH_FASTCALL,
     "finish(slot, t_sent, response, out) -> done() of the slot's readings and request size"},
    {"versions", (PyCFunction)RequestStats_versions, METH_NOARGS,
     "versions() -> requests per version, 0..62, then any other"},
    {"counts", (PyCFunction)RequestStats_counts, METH_O, "counts(phase) -> the 65 bucket counts"},
    {"sum", (PyCFunction)RequestStats_sum, METH_O, "sum(phase) -> the sum of the phase's values"},
    {NULL},
};

static PyGetSetDef RequestStats_getset[] = {
    {"response_bytes", (getter)RequestStats_get_response_bytes, NULL, "bytes of responses", NULL},
    {NULL},
};

static PyTypeObject RequestStatsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._request_stats.RequestStats",
    .tp_basicsize = sizeof(RequestStats),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One API's request phases, sizes and response bytes (log2 histograms).",
    .tp_new = new_without_arguments,
    .tp_methods = RequestStats_methods,
    .tp_getset = RequestStats_getset,
};

/* A topic's produce counters (broker/metrics.py TopicStats.appends): appended(records, batch)
 * for an append to a leader log, failed() for one refused, one C call per partition append
 * instead of ~25 bytecodes. PyAppendCounter in broker/metrics.py is the reference. */
typedef struct {
    PyObject_HEAD
    long long requests, messages, bytes, failed;
} AppendCounter;

static PyObject *AppendCounter_appended(AppendCounter *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "appended() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    long long records;
    if (as_i64(args[0], &records) < 0)
        return NULL;
    Py_ssize_t size = PyBytes_CheckExact(args[1]) ? PyBytes_GET_SIZE(args[1]) : PyObject_Length(args[1]);
    if (size < 0)
        return NULL;
    self->requests++;
    self->messages += records;
    self->bytes += size;
    Py_RETURN_NONE;
}

static PyObject *AppendCounter_failed(AppendCounter *self, PyObject *unused) {
    self->requests++;
    self->failed++;
    Py_RETURN_NONE;
}

static PyMethodDef AppendCounter_methods[] = {
    {"appended", (PyCFunction)(void (*)(void))AppendCounter_appended, METH_FASTCALL,
     "appended(records, batch): an append of ``records`` records in ``batch`` (a buffer)"},
    {"failed", (PyCFunction)AppendCounter_failed, METH_NOARGS, "failed(): an append refused"},
    {NULL},
};

static PyMemberDef AppendCounter_members[] = {
    {"requests", T_LONGLONG, offsetof(AppendCounter, requests), READONLY, "appends requested"},
    {"messages", T_LONGLONG, offsetof(AppendCounter, messages), READONLY, "records appended"},
    {"bytes", T_LONGLONG, offsetof(AppendCounter, bytes), READONLY, "bytes of batches appended"},
    {"failed_appends", T_LONGLONG, offsetof(AppendCounter, failed), READONLY, "appends refused"},
    {NULL},
};

static PyTypeObject AppendCounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._request_stats.AppendCounter",
    .tp_basicsize = sizeof(AppendCounter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A topic's produce counters: appends requested, records, bytes, failed appends.",
    .tp_new = new_without_arguments,
    .tp_methods = AppendCounter_methods,
    .tp_members = AppendCounter_members,
};

static PyObject *Counter_add(Counter *self, PyObject *arg) {
    long long n;
    if (as_i64(arg, &n) < 0)
        return NULL;
    self->value += n;
    Py_RETURN_NONE;
}

static PyMethodDef Counter_methods[] = {
    {"add", (PyCFunction)Counter_add, METH_O, "add(n): n more"},
    {NULL},
};

static PyMemberDef Counter_members[] = {
    {"value", T_LONGLONG, offsetof(Counter, value), READONLY, "the count"},
    {NULL},
};

static PyTypeObject CounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._request_stats.Counter",
    .tp_basicsize = sizeof(Counter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A count RequestStats.done adds response sizes to (a listener's bytes out).",
    .tp_new = new_without_arguments,
    .tp_methods = Counter_methods,
    .tp_members = Counter_members,
};

/* Meter: a connection's request metrics (broker/network.py KafkaConnection._meter when metrics are
 * on). It keeps the connection's clock readings (the last read's, and the cursor: when the
 * requests of a read before the next one were done with) as C ints, reads the clock itself, and
 * holds the API stats by key and the listener's byte counters, so that a request costs the
 * connection four short calls, each without an int object for a reading:
 *   read(data)                       a read: t_read = cursor = now; the listener's bytes in += len(data)
 *   begin(slot, api_key, version, frame)  the request's stats (by key), version counted, the slot
 *                                    given t_read, its start (the cursor), frame and stats
 *   parked(slot)                     handled without an answer: t_local = cursor = now
 *   ready(slot)                      answered: t_ready = cursor = now
 *   finish(slot, response)           written (in request order, in the flush that follows a ready):
 *                                    its stats recorded with t_sent = the cursor, the response's
 *                                    size added to the listener's bytes out
 * The clock is the injected one (``now``, a callable returning nanoseconds); time.monotonic_ns
 * itself (the real clock, protocol.client.SystemTime) is read here as it reads it,
 * clock_gettime(CLOCK_MONOTONIC), without the call. broker/metrics.py's PyMeter is the reference. */
typedef struct {
    PyObject_HEAD
    PyObject *stats;  /* a list: RequestStats by API key (RequestMetrics.request_stats) */
    Counter *bytes_in, *bytes_out;
    PyObject *now;    /* NULL: time.monotonic_ns, read here */
    long long t_read, t_cursor;
} Meter;

static PyObject *monotonic_ns; /* time.monotonic_ns, for the identity check */

static inline int meter_now(Meter *self, long long *out) {
    if (self->now == NULL) {
        struct timespec ts;
        if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        *out = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
        return 0;
    }
    PyObject *r = PyObject_CallNoArgs(self->now);
    if (r == NULL)
        return -1;
    int rc = as_i64(r, out);
    Py_DECREF(r);
    return rc;
}

static PyObject *Meter_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *stats, *bytes_in, *bytes_out, *now;
    static char *names[] = {"stats", "bytes_in", "bytes_out", "now", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!O:Meter", names, &PyList_Type, &stats, &CounterType,
                                     &bytes_in, &CounterType, &bytes_out, &now))
        return NULL;
    if (!PyCallable_Check(now)) {
        PyErr_SetString(PyExc_TypeError, "Meter(): now must be callable");
        return NULL;
    }
    Meter *self = (Meter *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    Py_INCREF(stats);
    self->stats = stats;
    Py_INCREF(bytes_in);
    self->bytes_in = (Counter *)bytes_in;
    Py_INCREF(bytes_out);
    self->bytes_out = (Counter *)bytes_out;
    if (now != monotonic_ns) {
        Py_INCREF(now);
        self->now = now;
    }
    return (PyObject *)self;
}

static void Meter_dealloc(Meter *self) {
    Py_XDECREF(self->stats);
    Py_XDECREF(self->bytes_in);
    Py_XDECREF(self->bytes_out);
    Py_XDECREF(self->now);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline SlotTimes *slot_arg(PyObject *o, const char *what) {
    if (!PyObject_TypeCheck(o, &SlotTimesType)) {
        PyErr_Format(PyExc_TypeError, "%s: the slot must be a SlotTimes", what);
        return NULL;
    }
    return (SlotTimes *)o;
}

static PyObject *Meter_read(Meter *self, PyObject *data) {
    long long t;
    Py_ssize_t n = PyBytes_CheckExact(data) ? PyBytes_GET_SIZE(data) : PyObject_Length(data);
    if (n < 0 || meter_now(self, &t) < 0)
        return NULL;
    self->t_read = self->t_cursor = t;
    self->bytes_in->value += n;
    Py_RETURN_NONE;
}

static PyObject *Meter_begin(Meter *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "begin() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    SlotTimes *slot = slot_arg(args[0], "begin()");
    if (slot == NULL)
        return NULL;
    long long key;
    if (as_i64(args[1], &key) < 0)
        return NULL;
    PyObject *stats = 0 <= key && key < PyList_GET_SIZE(self->stats) ? PyList_GET_ITEM(self->stats, key) : NULL;
    if (stats == NULL || Py_TYPE(stats) != &RequestStatsType) {
        PyErr_Format(PyExc_KeyError, "begin(): no RequestStats for api key %lld", key);
        return NULL;
    }
    if (count_version((RequestStats *)stats, args[2]) < 0)
        return NULL;
    slot->t_read = self->t_read;
    slot->t_start = self->t_cursor;
    slot->t_local = slot->t_ready = 0;
    set_field(&slot->request, args[3]);
    set_field(&slot->stats, stats);
    Py_RETURN_NONE;
}

static PyObject *Meter_parked(Meter *self, PyObject *arg) {
    SlotTimes *slot = slot_arg(arg, "parked()");
    long long t;
    if (slot == NULL || meter_now(self, &t) < 0)
        return NULL;
    slot->t_local = self->t_cursor = t;
    Py_RETURN_NONE;
}

static PyObject *Meter_ready(Meter *self, PyObject *arg) {
    SlotTimes *slot = slot_arg(arg, "ready()");
    long long t;
    if (slot == NULL || meter_now(self, &t) < 0)
        return NULL;
    slot->t_ready = self->t_cursor = t;
    Py_RETURN_NONE;
}

static PyObject *Meter_finish(Meter *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "finish() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    SlotTimes *slot = slot_arg(args[0], "finish()");
    if (slot == NULL)
        return NULL;
    PyObject *stats = slot->stats;
    if (stats == NULL || Py_TYPE(stats) != &RequestStatsType) {
        PyErr_SetString(PyExc_TypeError, "finish(): the slot was not begun (no RequestStats)");
        return NULL;
    }
    long long v[6];
    if (slot_values(slot, v) < 0)
        return NULL;
    v[4] = self->t_cursor;
    Py_ssize_t size = response_size(args[1]);
    if (size < 0)
        return NULL;
    record((RequestStats *)stats, v, size);
    self->bytes_out->value += size;
    Py_RETURN_NONE;
}

static PyMethodDef Meter_methods[] = {
    {"read", (PyCFunction)Meter_read, METH_O, "read(data): a read: t_read = cursor = now, len(data) bytes in"},
    {"begin", (PyCFunction)(void (*)(void))Meter_begin, METH_FASTCALL,
     "begin(slot, api_key, version, frame): the request counted and its slot begun"},
    {"parked", (PyCFunction)Meter_parked, METH_O, "parked(slot): slot.t_local = cursor = now"},
    {"ready", (PyCFunction)Meter_ready, METH_O, "ready(slot): slot.t_ready = cursor = now"},
    {"finish", (PyCFunction)(void (*)(void))Meter_finish, METH_FASTCALL,
     "finish(slot, response): recorded with t_sent = the cursor; the response's size to bytes out"},
    {NULL},
};

static PyMemberDef Meter_members[] = {
    {"t_read", T_LONGLONG, offsetof(Meter, t_read), READONLY, "the last read's clock reading"},
    {"t_cursor", T_LONGLONG, offsetof(Meter, t_cursor), READONLY, "the last clock reading"},
    {"stats", T_OBJECT, offsetof(Meter, stats), READONLY, "RequestStats by API key"},
    {"bytes_in", T_OBJECT, offsetof(Meter, bytes_in), READONLY, "the listener's bytes read (a Counter)"},
    {"bytes_out", T_OBJECT, offsetof(Meter, bytes_out), READONLY, "the listener's bytes written (a Counter)"},
    {NULL},
};

static PyObject *Meter_get_system_clock(Meter *self, void *closure) {
    return PyBool_FromLong(self->now == NULL);
}

static PyGetSetDef Meter_getset[] = {
    {"system_clock", (getter)Meter_get_system_clock, NULL,
     "True when ``now`` is time.monotonic_ns, read here without the call", NULL},
    {NULL},
};

static PyTypeObject MeterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._request_stats.Meter",
    .tp_basicsize = sizeof(Meter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A connection's request metrics: its clock readings, the API stats and listener byte counters.",
    .tp_new = Meter_new,
    .tp_dealloc = (destructor)Meter_dealloc,
    .tp_methods = Meter_methods,
    .tp_members = Meter_members,
    .tp_getset = Meter_getset,
};

/* SampledRate: Kafka's Rate over a SampledStat of ``samples`` windows of ``window_ms`` (a quota
 * sensor, broker/client_quota_manager.py), per second, with the samples' total kept as it goes.
 * record_and_throttle_ms runs for every request of a client with a quota: one C call instead of
 * ~45 bytecodes (bench/ops_bench.py --only quotas). broker/client_quota_manager.py's
 * PySampledRate is the reference, tests/broker/test_client_quota_manager.py checks the two agree
 * (hypothesis): the same float operations in the same order, Python's floor division and
 * round-half-even. The samples are a ring of samples + 1 slots, oldest at ``head``. */
typedef struct {
    PyObject_HEAD
    long long samples, window_ms;
    Py_ssize_t head, count, capacity;
    long long *starts;
    double *values;
    double total;
} SampledRate;

static inline long long floor_div(long long a, long long b) {
    long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

#define SLOT(self, i) (((self)->head + (i)) % (self)->capacity)

static inline void sr_pop_front(SampledRate *self) {
    self->total -= self->values[self->head];
    self->head = (self->head + 1) % self->capacity;
    self->count--;
}

static void sr_purge(SampledRate *self, long long now_ms) {
    long long expire_at = now_ms - self->samples * self->window_ms;
    while (self->count && self->starts[self->head] <= expire_at)
        sr_pop_front(self);
    if (!self->count)
        self->total = 0.0;
}

/* the newest sample takes ``value`` (a new one when the last is ``window_ms`` old), the purge done */
static void sr_add(SampledRate *self, double value, long long now_ms) {
    if (!self->count || now_ms >= self->starts[SLOT(self, self->count - 1)] + self->window_ms) {
        Py_ssize_t slot = SLOT(self, self->count);
        self->starts[slot] = now_ms;
        self->values[slot] = 0.0;
        self->count++;
        if (self->count > self->samples)
            sr_pop_front(self);
    }
    self->values[SLOT(self, self->count - 1)] += value;
    self->total += value;
}

static long long sr_window(SampledRate *self, long long now_ms) {
    long long w = self->window_ms;
    long long elapsed = self->count ? now_ms - self->starts[self->head] : 0;
    long long full = floor_div(elapsed, w);
    if (full < self->samples - 1)
        elapsed += (self->samples - 1 - full) * w;
    return elapsed;
}

static int sr_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *sig, double *value,
                   long long *now_ms) {
    if (nargs != want) {
        PyErr_SetString(PyExc_TypeError, sig);
        return -1;
    }
    if (value != NULL) {
        *value = PyFloat_CheckExact(args[0]) ? PyFloat_AS_DOUBLE(args[0]) : PyFloat_AsDouble(args[0]);
        if (*value == -1.0 && PyErr_Occurred())
            return -1;
    }
    return as_i64(args[value != NULL ? 1 : 0], now_ms);
}

static PyObject *SampledRate_record(SampledRate *self, PyObject *const *args, Py_ssize_t nargs) {
    double value;
    long long now_ms;
    if (sr_args(args, nargs, 2, "record(value, now_ms)", &value, &now_ms) < 0)
        return NULL;
    sr_purge(self, now_ms);
    sr_add(self, value, now_ms);
    Py_RETURN_NONE;
}

static PyObject *SampledRate_record_and_throttle_ms(SampledRate *self, PyObject *const *args, Py_ssize_t nargs) {
    double value, bound;
    long long now_ms;
    if (sr_args(args, nargs, 3, "record_and_throttle_ms(value, now_ms, bound)", &value, &now_ms) < 0)
        return NULL;
    bound = PyFloat_CheckExact(args[2]) ? PyFloat_AS_DOUBLE(args[2]) : PyFloat_AsDouble(args[2]);
    if (bound == -1.0 && PyErr_Occurred())
        return NULL;
    if (self->count && self->starts[self->head] <= now_ms - self->samples * self->window_ms)
        sr_purge(self, now_ms);
    sr_add(self, value, now_ms);
    long long elapsed = sr_window(self, now_ms);
    double total = self->total;
    if (total * 1000.0 <= bound * (double)elapsed)
        return PyLong_FromLong(0);
    /* Python's round(): half to even, as nearbyint in the default rounding mode */
    return PyLong_FromDouble(nearbyint(total * 1000.0 / bound - (double)elapsed));
}

static PyObject *SampledRate_window_size_ms(SampledRate *self, PyObject *const *args, Py_ssize_t nargs) {
    long long now_ms;
    if (sr_args(args, nargs, 1, "window_size_ms(now_ms)", NULL, &now_ms) < 0)
        return NULL;
    sr_purge(self, now_ms);
    return PyLong_FromLongLong(sr_window(self, now_ms));
}

static PyObject *SampledRate_measure(SampledRate *self, PyObject *const *args, Py_ssize_t nargs) {
    long long now_ms;
    if (sr_args(args, nargs, 1, "measure(now_ms)", NULL, &now_ms) < 0)
        return NULL;
    sr_purge(self, now_ms);
    long long size = sr_window(self, now_ms);
    return PyFloat_FromDouble(size > 0 ? self->total / ((double)size / 1000.0) : 0.0);
}

static PyObject *SampledRate_get_total(SampledRate *self, void *closure) {
    return PyFloat_FromDouble(self->total);
}

static PyObject *SampledRate_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    long long samples, window_ms;
    static char *names[] = {"samples", "window_ms", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LL:SampledRate", names, &samples, &window_ms))
        return NULL;
    if (samples < 1 || window_ms < 1 || samples > 1000000) {
        PyErr_SetString(PyExc_ValueError, "SampledRate needs 1 <= samples <= 1000000 and window_ms >= 1");
        return NULL;
    }
    SampledRate *self = (SampledRate *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->samples = samples;
    self->window_ms = window_ms;
    self->capacity = (Py_ssize_t)samples + 1;
    self->starts = PyMem_Calloc((size_t)self->capacity, sizeof(long long));
    self->values = PyMem_Calloc((size_t)self->capacity, sizeof(double));
    if (self->starts == NULL || self->values == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void SampledRate_dealloc(SampledRate *self) {
    PyMem_Free(self->starts);
    PyMem_Free(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef SampledRate_methods[] = {
    {"record", (PyCFunction)(void (*)(void))SampledRate_record, METH_FASTCALL,
     "record(value, now_ms): ``value`` into the sample of ``now_ms`` (expired samples dropped)"},
    {"record_and_throttle_ms", (PyCFunction)(void (*)(void))SampledRate_record_and_throttle_ms, METH_FASTCALL,
     "record_and_throttle_ms(value, now_ms, bound): record, then the throttle time (ms) the rate earns over ``bound`` per second"},
    {"window_size_ms", (PyCFunction)(void (*)(void))SampledRate_window_size_ms, METH_FASTCALL,
     "window_size_ms(now_ms): Kafka's Rate.windowSize"},
    {"measure", (PyCFunction)(void (*)(void))SampledRate_measure, METH_FASTCALL,
     "measure(now_ms): the rate per second"},
    {NULL},
};

static PyMemberDef SampledRate_members[] = {
    {"samples", T_LONGLONG, offsetof(SampledRate, samples), READONLY, "quota.window.num"},
    {"window_ms", T_LONGLONG, offsetof(SampledRate, window_ms), READONLY, "one sample's window"},
    {NULL},
};

static PyGetSetDef SampledRate_getset[] = {
    {"_total", (getter)SampledRate_get_total, NULL, "the samples' total", NULL},
    {NULL},
};

static PyTypeObject SampledRateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._request_stats.SampledRate",
    .tp_basicsize = sizeof(SampledRate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Kafka's Rate over samples x window_ms (a quota sensor).",
    .tp_new = SampledRate_new,
    .tp_dealloc = (destructor)SampledRate_dealloc,
    .tp_methods = SampledRate_methods,
    .tp_members = SampledRate_members,
    .tp_getset = SampledRate_getset,
};

/* count_row_errors(results, errors): results [(topic, [row, ...]), ...] with a row's error code
 * at index 1 (a Produce response's partitions); every non-zero code counted into the dict
 * ``errors`` ({code: count}, ApiStats.errors). One C call per response instead of a loop of
 * bytecodes; broker/metrics.py's py_count_row_errors is the reference. */
static PyObject *count_row_errors(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "count_row_errors(results, errors: dict)");
        return NULL;
    }
    PyObject *errors = args[1];
    PyObject *topics = PySequence_Fast(args[0], "results must be a sequence");
    if (topics == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(topics); i++) {
        PyObject *topic = PySequence_Fast_GET_ITEM(topics, i), *rows;
        if (PyTuple_CheckExact(topic) && PyTuple_GET_SIZE(topic) > 1) {
            rows = PyTuple_GET_ITEM(topic, 1);
            Py_INCREF(rows);
        } else {
            rows = PySequence_GetItem(topic, 1);
        }
        if (rows == NULL)
            goto fail;
        PyObject *fast = PySequence_Fast(rows, "a topic's rows must be a sequence");
        Py_DECREF(rows);
        if (fast == NULL)
            goto fail;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(fast); j++) {
            PyObject *row = PySequence_Fast_GET_ITEM(fast, j);
            /* The common row, a list with a zero int (ErrorCode.NONE, an int subclass) at index
             * 1, is told apart without a call: a response without errors costs a look per row. */
            if (PyList_CheckExact(row) && PyList_GET_SIZE(row) > 1) {
                PyObject *c = PyList_GET_ITEM(row, 1);
#if PY_VERSION_HEX < 0x030C0000
                /* Up to 3.11 an int's ob_size is its signed digit count: 0 for zero alone. */
                if (PyLong_Check(c) && Py_SIZE(c) == 0)
                    continue;
#else
                /* From 3.12 an int keeps a tag where ob_size was (Py_SIZE of zero is not 0). */
                if (PyLong_Check(c)) {
                    int overflow;
                    if (PyLong_AsLongAndOverflow(c, &overflow) == 0 && !overflow)
                        continue;
                    /* (an int cannot fail here: a -1 with overflow set means too big) */
                }
#endif
            }
            PyObject *code = PySequence_GetItem(row, 1);
            if (code == NULL) {
                Py_DECREF(fast);
                goto fail;
            }
            int nonzero = PyObject_IsTrue(code);
            if (nonzero > 0) {
                PyObject *n = PyDict_GetItemWithError(errors, code);
                PyObject *next = NULL;
                if (n != NULL) {
                    long long v = PyLong_AsLongLong(n);
                    if (!(v == -1 && PyErr_Occurred()))
                        next = PyLong_FromLongLong(v + 1);
                } else if (!PyErr_Occurred()) {
                    next = PyLong_FromLong(1);
                }
                if (next == NULL || PyDict_SetItem(errors, code, next) < 0)
                    nonzero = -1;
                Py_XDECREF(next);
            }
            Py_DECREF(code);
            if (nonzero < 0) {
                Py_DECREF(fast);
                goto fail;
            }
        }
        Py_DECREF(fast);
    }
    Py_DECREF(topics);
    Py_RETURN_NONE;
fail:
    Py_DECREF(topics);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"count_row_errors", (PyCFunction)(void (*)(void))count_row_errors, METH_FASTCALL,
     "count_row_errors(results, errors): count each row's non-zero error code (index 1) into errors"},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_request_stats", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__request_stats(void) {
    /* The module's types, each added under its tp_name's last part (PyModule_AddType readies it). */
    PyTypeObject *const types[] = {&RequestStatsType, &AppendCounterType, &SlotTimesType,
                                   &MeterType,        &CounterType,       &SampledRateType};
    PyObject *time_module = PyImport_ImportModule("time");
    if (time_module == NULL)
        return NULL;
    monotonic_ns = PyObject_GetAttrString(time_module, "monotonic_ns");
    Py_DECREF(time_module);
    if (monotonic_ns == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (PyModule_AddType(m, types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
