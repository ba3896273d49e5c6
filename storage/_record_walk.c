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

/* The walk over [p, end): a WALK_* status; `*index` the record it stopped at (count when all
 * are well formed), `*detail` the offending value or, on success, the largest timestamp delta. */
static int walk_impl(const unsigned char *p, const unsigned char *end, long long count, int require_key,
                     long long *index_out, int64_t *detail_out) {
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
    if (p != end) FAIL(WALK_TRAILING, (int64_t)(end - p));
    *index_out = count;
    *detail_out = count > 0 ? max_ts_delta : 0;
    return WALK_OK;
fail:
    *index_out = index;
    *detail_out = detail;
    return status;
}

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
    long long index;
    int64_t detail;
    int status = walk_impl(base + start, base + stop, count, require_key, &index, &detail);
    PyBuffer_Release(&view);
    return Py_BuildValue("(iLL)", status, index, (long long)detail);
}

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* The checks of accept() on the batch at b (remaining bytes from it): its size, and its header
 * fields in *f (BatchHeader's order), or -1 when anything is uncommon or wrong. */
typedef struct {
    int64_t base_offset, base_timestamp, max_timestamp, producer_id;
    int32_t length, leader_epoch, last_offset_delta, base_sequence, count;
    uint32_t crc;
    int16_t attributes, producer_epoch;
} header_fields;

static long long accept_impl(const unsigned char *b, Py_ssize_t remaining, long long max_message_bytes,
                             int log_append_time, int require_key, int from_coordinator, header_fields *f) {
    if (remaining < 61) return -1;
    f->length = be32(b + 8);
    if (f->length < 14 || b[16] != 2) return -1;
    long long size = (long long)f->length + 12;
    if (size > remaining || size > max_message_bytes || size < 61) return -1;
    f->base_offset = be64(b);
    f->leader_epoch = be32(b + 12);
    f->crc = (uint32_t)be32(b + 17);
    f->attributes = be16(b + 21);
    f->last_offset_delta = be32(b + 23);
    f->base_timestamp = be64(b + 27);
    f->max_timestamp = be64(b + 35);
    f->producer_id = be64(b + 43);
    f->producer_epoch = be16(b + 51);
    f->base_sequence = be32(b + 53);
    f->count = be32(b + 57);
    if (f->base_offset != 0 || f->last_offset_delta < 0 || f->count <= 0 || f->last_offset_delta != f->count - 1)
        return -1;
    if (f->attributes & (0x20 | 0x08 | 0x07)) return -1;  /* control, LogAppendTime claimed, compressed */
    if (f->producer_id >= 0 && f->base_sequence < 0 && !from_coordinator) return -1;
    long long index;
    int64_t delta;
    if (walk_impl(b + 61, b + size, f->count, require_key, &index, &delta) != WALK_OK) return -1;
    if (!log_append_time) {
        int64_t computed;
        if (__builtin_add_overflow(f->base_timestamp, delta, &computed) || computed != f->max_timestamp) return -1;
    }
    return size;
}

/* accept(buf, pos, end, max_message_bytes, log_append_time, require_key, from_coordinator)
 *   -> ((13 header fields), size) | None
 * The batch at `pos` passes every check of storage/log_validator.py's validate_client_batches
 * but the CRC and needs no rewrite (uncompressed, CreateTime with a right maxTimestamp, not a
 * control batch): its header and size. None for anything else (the Python checks then decide). */
static PyObject *accept(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, stop;
    long long max_message_bytes;
    int log_append_time, require_key, from_coordinator;
    if (!PyArg_ParseTuple(args, "y*nnLppp", &view, &pos, &stop, &max_message_bytes, &log_append_time, &require_key,
                          &from_coordinator)) return NULL;
    PyObject *result = NULL;
    header_fields f;
    long long size;
    if (pos < 0 || stop > view.len || pos > stop) goto reject;
    size = accept_impl((const unsigned char *)view.buf + pos, stop - pos, max_message_bytes, log_append_time,
                       require_key, from_coordinator, &f);
    if (size < 0) goto reject;
    result = Py_BuildValue("((LiibIhiLLLhii)L)", (long long)f.base_offset, f.length, f.leader_epoch, 2,
                           (unsigned int)f.crc, f.attributes, f.last_offset_delta, (long long)f.base_timestamp,
                           (long long)f.max_timestamp, (long long)f.producer_id, f.producer_epoch, f.base_sequence,
                           f.count, size);
    PyBuffer_Release(&view);
    return result;
reject:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* What stamp() needs from Python, given once by configure(): the CRC-32C function the Python
 * path uses (crc32c.crc32c: the same answer, hardware where there is some) and BatchHeader. */
static PyObject *crc_function = NULL, *header_type = NULL;

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *crc, *type;
    if (!PyArg_ParseTuple(args, "OO!", &crc, &PyType_Type, &type)) return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "configure: the header type must be a tuple subclass");
        return NULL;
    }
    Py_INCREF(crc);
    Py_INCREF(type);
    Py_XSETREF(crc_function, crc);
    Py_XSETREF(header_type, type);
    Py_RETURN_NONE;
}

/* stamp(buf, max_message_bytes, require_key, from_coordinator, base_offset, leader_epoch)
 *   -> BatchHeader | None
 * The leader's append of a producer's request for one partition in one call: `buf` (writable)
 * holding exactly one batch that accept() takes (CreateTime, not re-compressed) and whose CRC
 * holds gets its baseOffset and partitionLeaderEpoch stamped (both outside the CRC), and its
 * header as written comes back. None, with `buf` untouched, for anything else: Log.append_as_leader
 * then runs the Python path (validate_client_batches), the reference, which decides. */
static PyObject *stamp(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long max_message_bytes, base_offset;
    int require_key, from_coordinator, leader_epoch;
    if (crc_function == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stamp: configure() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "w*LppLi", &view, &max_message_bytes, &require_key, &from_coordinator,
                          &base_offset, &leader_epoch)) return NULL;
    PyObject *result = NULL, *fields = NULL, *crc_view = NULL, *crc_value = NULL;
    unsigned char *b = (unsigned char *)view.buf;
    header_fields f;
    long long size = accept_impl(b, view.len, max_message_bytes, 0, require_key, from_coordinator, &f);
    if (size != view.len) goto done;  /* uncommon, wrong, or more than one batch: Python */
    crc_view = PyMemoryView_FromMemory((char *)b + 21, size - 21, PyBUF_READ);
    if (crc_view == NULL) goto done;
    crc_value = PyObject_CallOneArg(crc_function, crc_view);
    if (crc_value == NULL) goto done;
    unsigned long crc = PyLong_AsUnsignedLong(crc_value);
    if (crc == (unsigned long)-1 && PyErr_Occurred()) goto done;
    if (crc != f.crc) {  /* corrupt: the Python path raises CORRUPT_MESSAGE with its message */
        result = Py_NewRef(Py_None);
        goto done;
    }
    uint64_t u = (uint64_t)base_offset;
    for (int i = 7; i >= 0; i--) { b[i] = (unsigned char)(u & 0xff); u >>= 8; }
    uint32_t e = (uint32_t)leader_epoch;
    for (int i = 15; i >= 12; i--) { b[i] = (unsigned char)(e & 0xff); e >>= 8; }
    fields = Py_BuildValue("((LiibIhiLLLhii))", base_offset, f.length, leader_epoch, 2, (unsigned int)f.crc,
                           f.attributes, f.last_offset_delta, (long long)f.base_timestamp,
                           (long long)f.max_timestamp, (long long)f.producer_id, f.producer_epoch,
                           f.base_sequence, f.count);
    if (fields == NULL) goto done;
    result = PyTuple_Type.tp_new((PyTypeObject *)header_type, fields, NULL);
done:
    Py_XDECREF(fields);
    Py_XDECREF(crc_value);
    if (crc_view != NULL) {
        if (Py_REFCNT(crc_view) > 1) {  /* kept by the CRC function: no view of `buf` may outlive it */
            PyObject *r = PyObject_CallMethod(crc_view, "release", NULL);
            if (r == NULL) PyErr_Clear();
            Py_XDECREF(r);
        }
        Py_DECREF(crc_view);
    }
    PyBuffer_Release(&view);
    if (result == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(buf, start, end, count, require_key=False) -> (status, index, detail)"},
    {"accept", accept, METH_VARARGS,
     "accept(buf, pos, end, max_message_bytes, log_append_time, require_key, from_coordinator) -> (header, size) | None"},
    {"configure", configure, METH_VARARGS, "configure(crc32c, header_type): what stamp() calls and builds"},
    {"stamp", stamp, METH_VARARGS,
     "stamp(buf, max_message_bytes, require_key, from_coordinator, base_offset, leader_epoch) -> header | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_walk(void) { return PyModule_Create(&module); }
