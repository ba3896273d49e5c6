/* One pass over the records section of a RecordBatch v2 (already decompressed), checking
 * every length and count against the bytes present: the compiled half of
 * storage/log_validator.py, which holds the same walk in Python (used when this module is
 * not built) and the rules (Kafka's DefaultRecord.readFrom plus the record offsets).
 *
 * walk(buf, start, end, count, require_key=False) -> (status, index, detail)
 *   status 0: all `count` records are well formed, consume exactly [start, end); `detail` is
 *             the largest timestamp delta (the batch's max timestamp minus its base).
 *   status >0: one of the WALK_* codes below for record `index`; `detail` is the offending
 *             value where there is one.
 * No Python object is made per record. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum {
    WALK_OK = 0,
    WALK_TRUNCATED = 1,        /* a varint or field runs past the record (or the batch) */
    WALK_VARINT_TOO_LONG = 2,  /* more than 5 (int) or 10 (long) bytes */
    WALK_NEGATIVE_LENGTH = 3,  /* record length < 0 */
    WALK_LENGTH_PAST_END = 4,  /* record length runs past the batch */
    WALK_OFFSET_DELTA = 5,     /* offsetDelta is not the record's index */
    WALK_BAD_KEY_LENGTH = 6,   /* key length < -1 */
    WALK_BAD_VALUE_LENGTH = 7, /* value length < -1 */
    WALK_BAD_HEADER_COUNT = 8, /* header count < 0 */
    WALK_BAD_HEADER_KEY = 9,   /* header key length < 0 */
    WALK_BAD_HEADER_VALUE = 10,/* header value length < -1 */
    WALK_SIZE_MISMATCH = 11,   /* the fields end before the record's length says */
    WALK_TRAILING = 12,        /* bytes left after the declared records */
    WALK_NULL_KEY = 13,        /* a record without a key where keys are required (compacted topic) */
};

/* Unsigned varint of at most `maxbytes` bytes from [*p, end). */
static inline int read_uvarint(const unsigned char **p, const unsigned char *end, int maxbytes, uint64_t *out) {
    const unsigned char *q = *p;
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < maxbytes; i++) {
        if (q >= end) return WALK_TRUNCATED;
        unsigned char b = *q++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) { *p = q; *out = v; return WALK_OK; }
        shift += 7;
    }
    return WALK_VARINT_TOO_LONG;
}

static inline int read_varint32(const unsigned char **p, const unsigned char *end, int64_t *out) {
    uint64_t raw;
    const unsigned char *q = *p;
    if (q < end && *q < 0x80) {  /* the common case: one byte */
        unsigned char b = *q;
        *p = q + 1;
        *out = (int64_t)((b >> 1) ^ -(int64_t)(b & 1));
        return WALK_OK;
    }
    if (end - q >= 2 && q[1] < 0x80) {  /* two bytes: a value or record length of 64 to 8191 */
        uint32_t u = (uint32_t)(q[0] & 0x7f) | ((uint32_t)q[1] << 7);
        *p = q + 2;
        *out = (int64_t)((u >> 1) ^ -(int64_t)(u & 1));
        return WALK_OK;
    }
    int rc = read_uvarint(p, end, 5, &raw);
    if (rc) return rc;
    uint32_t u = (uint32_t)raw;  /* Java: the int the five bytes make, upper bits dropped */
    *out = (int64_t)(int32_t)((u >> 1) ^ (~(u & 1) + 1));
    return WALK_OK;
}

static inline int read_varint64(const unsigned char **p, const unsigned char *end, int64_t *out) {
    uint64_t raw;
    const unsigned char *q = *p;
    if (q < end && *q < 0x80) {
        unsigned char b = *q;
        *p = q + 1;
        *out = (int64_t)((b >> 1) ^ -(int64_t)(b & 1));
        return WALK_OK;
    }
    if (end - q >= 2 && q[1] < 0x80) {
        uint64_t u = (uint64_t)(q[0] & 0x7f) | ((uint64_t)q[1] << 7);
        *p = q + 2;
        *out = (int64_t)((u >> 1) ^ -(int64_t)(u & 1));
        return WALK_OK;
    }
    int rc = read_uvarint(p, end, 10, &raw);
    if (rc) return rc;
    *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
    return WALK_OK;
}

#define CHECK(expr) do { int rc_ = (expr); if (rc_) { status = rc_; goto fail; } } while (0)
#define FAIL(code, value) do { status = (code); detail = (value); goto fail; } while (0)

static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, stop;
    long long count;
    int require_key = 0;
    if (!PyArg_ParseTuple(args, "y*nnL|p", &view, &start, &stop, &count, &require_key)) return NULL;
    if (start < 0 || stop > view.len || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "walk: [start, end) is not inside the buffer");
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)view.buf;
    const unsigned char *p = base + start, *end = base + stop;
    int status = WALK_OK;
    long long index = 0;
    int64_t detail = 0, max_ts_delta = INT64_MIN;
    for (index = 0; index < count; index++) {
        int64_t length, v, n;
        CHECK(read_varint32(&p, end, &length));
        if (length < 0) FAIL(WALK_NEGATIVE_LENGTH, length);
        if (length > end - p) FAIL(WALK_LENGTH_PAST_END, length);
        const unsigned char *rend = p + length;
        if (p >= rend) FAIL(WALK_TRUNCATED, 0);
        p++;  /* attributes: unused in v2 */
        CHECK(read_varint64(&p, rend, &v));
        if (v > max_ts_delta) max_ts_delta = v;
        CHECK(read_varint32(&p, rend, &v));
        if (v != index) FAIL(WALK_OFFSET_DELTA, v);
        CHECK(read_varint32(&p, rend, &n));  /* key */
        if (n < -1) FAIL(WALK_BAD_KEY_LENGTH, n);
        if (n < 0 && require_key) FAIL(WALK_NULL_KEY, n);
        if (n > rend - p) FAIL(WALK_TRUNCATED, n);
        if (n > 0) p += n;
        CHECK(read_varint32(&p, rend, &n));  /* value */
        if (n < -1) FAIL(WALK_BAD_VALUE_LENGTH, n);
        if (n > rend - p) FAIL(WALK_TRUNCATED, n);
        if (n > 0) p += n;
        int64_t headers;
        CHECK(read_varint32(&p, rend, &headers));
        if (headers < 0) FAIL(WALK_BAD_HEADER_COUNT, headers);
        for (int64_t h = 0; h < headers; h++) {
            CHECK(read_varint32(&p, rend, &n));
            if (n < 0) FAIL(WALK_BAD_HEADER_KEY, n);
            if (n > rend - p) FAIL(WALK_TRUNCATED, n);
            p += n;
            CHECK(read_varint32(&p, rend, &n));
            if (n < -1) FAIL(WALK_BAD_HEADER_VALUE, n);
            if (n > rend - p) FAIL(WALK_TRUNCATED, n);
            if (n > 0) p += n;
        }
        if (p != rend) FAIL(WALK_SIZE_MISMATCH, (int64_t)(rend - p));
    }
    if (p != end) {
        status = WALK_TRAILING;
        detail = (int64_t)(end - p);
        goto fail;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(iLL)", WALK_OK, count, (long long)(count > 0 ? max_ts_delta : 0));
fail:
    PyBuffer_Release(&view);
    return Py_BuildValue("(iLL)", status, index, (long long)detail);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(buf, start, end, count, require_key=False) -> (status, index, detail)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_walk(void) { return PyModule_Create(&module); }
