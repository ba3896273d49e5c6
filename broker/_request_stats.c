/* One API's request observations for the broker's metrics (broker/metrics.py, ApiStats):
 * five latency phases and the request size, each a log2 histogram (a value's bucket is its
 * bit length: 65 buckets) with a sum, and the response bytes. done() is called once per request
 * on the event loop: one C call instead of ~170 bytecodes of Python (bench/metrics_bench.py
 * --instructions shows the difference). broker/metrics.py's PyRequestStats is the reference;
 * tests/metrics/test_request_stats.py checks the two agree (hypothesis).
 *
 * Arguments are signed 64-bit ints (others raise OverflowError: the clock's nanoseconds never
 * are); sums are 128-bit, so they never wrap where Python's ints would not. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

#if PY_BIG_ENDIAN
#error "from_int128 assumes a little-endian machine"
#endif

#define PHASES 6
#define BUCKETS 65

typedef struct {
    PyObject_HEAD
    long long counts[PHASES][BUCKETS];
    __int128 sums[PHASES];
    __int128 response_bytes;
} RequestStats;

static inline int bit_length(long long v) {
    /* Python's int.bit_length: that of the absolute value (LLONG_MIN included). */
    unsigned long long m = v < 0 ? (unsigned long long)(-(v + 1)) + 1u : (unsigned long long)v;
    return m ? 64 - __builtin_clzll(m) : 0;
}

static PyObject *RequestStats_done(RequestStats *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "done() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    long long v[7];
    for (int i = 0; i < 7; i++) {
        v[i] = PyLong_AsLongLong(args[i]);
        if (v[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    /* t_read, t_start, t_local, t_ready, t_sent, request size, response size */
    long long d[PHASES] = {v[4] - v[0], v[1] - v[0], v[2] - v[1], v[3] - v[2], v[4] - v[3], v[5]};
    for (int i = 0; i < PHASES; i++) {
        self->counts[i][bit_length(d[i])]++;
        self->sums[i] += d[i];
    }
    self->response_bytes += v[6];
    Py_RETURN_NONE;
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

static PyObject *RequestStats_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "RequestStats() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0); /* zeroed */
}

static PyMethodDef RequestStats_methods[] = {
    {"done", (PyCFunction)(void (*)(void))RequestStats_done, METH_FASTCALL,
     "done(t_read, t_start, t_local, t_ready, t_sent, request_size, response_size)"},
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
    .tp_new = RequestStats_new,
    .tp_methods = RequestStats_methods,
    .tp_getset = RequestStats_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_request_stats", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__request_stats(void) {
    if (PyType_Ready(&RequestStatsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RequestStatsType);
    if (PyModule_AddObject(m, "RequestStats", (PyObject *)&RequestStatsType) < 0) {
        Py_DECREF(&RequestStatsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
