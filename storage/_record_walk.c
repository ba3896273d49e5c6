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

/* accept(buf, pos, end, max_message_bytes, log_append_time, require_key, from_coordinator)
 *   -> ((13 header fields), batch size) | None
 * The common case of storage/log_validator.py's validate_client_batches for the batch at `pos`,
 * decided in one call: an uncompressed magic 2 batch from a client that passes every check of
 * it but the CRC (left to the caller's crc32c) and needs nothing rewritten (a CreateTime batch
 * whose maxTimestamp is its records' largest, or any batch under LogAppendTime without the
 * LogAppendTime attribute). None for anything else: the caller then runs its Python checks,
 * which say what is wrong, or rewrite. */
static PyObject *accept(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, stop;
    long long max_message_bytes;
    int log_append_time, require_key, from_coordinator;
    if (!PyArg_ParseTuple(args, "y*nnLppp", &view, &pos, &stop, &max_message_bytes, &log_append_time, &require_key,
                          &from_coordinator)) return NULL;
    PyObject *result = NULL;
    if (pos < 0 || stop > view.len || pos > stop) goto reject;
    const unsigned char *b = (const unsigned char *)view.buf + pos;
    Py_ssize_t remaining = stop - pos;
    if (remaining < 61) goto reject;
    int32_t length = be32(b + 8);
    if (length < 14 || b[16] != 2) goto reject;
    long long size = (long long)length + 12;
    if (size > remaining || size > max_message_bytes || size < 61) goto reject;
    int64_t base_offset = be64(b);
    int32_t leader_epoch = be32(b + 12);
    uint32_t crc = (uint32_t)be32(b + 17);
    int16_t attributes = be16(b + 21);
    int32_t last_offset_delta = be32(b + 23);
    int64_t base_timestamp = be64(b + 27), max_timestamp = be64(b + 35), producer_id = be64(b + 43);
    int16_t producer_epoch = be16(b + 51);
    int32_t base_sequence = be32(b + 53), count = be32(b + 57);
    if (base_offset != 0 || last_offset_delta < 0 || count <= 0 || last_offset_delta != count - 1) goto reject;
    if (attributes & (0x20 | 0x08 | 0x07)) goto reject;  /* control, LogAppendTime claimed, compressed */
    if (producer_id >= 0 && base_sequence < 0 && !from_coordinator) goto reject;
    long long index;
    int64_t delta;
    if (walk_impl(b + 61, b + size, count, require_key, &index, &delta) != WALK_OK) goto reject;
    if (!log_append_time) {
        int64_t computed;
        if (__builtin_add_overflow(base_timestamp, delta, &computed) || computed != max_timestamp) goto reject;
    }
    result = Py_BuildValue("((LiibIhiLLLhii)L)", (long long)base_offset, length, leader_epoch, 2, (unsigned int)crc,
                           attributes, last_offset_delta, (long long)base_timestamp, (long long)max_timestamp,
                           (long long)producer_id, producer_epoch, base_sequence, count, size);
    PyBuffer_Release(&view);
    return result;
reject:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(buf, start, end, count, require_key=False) -> (status, index, detail)"},
    {"accept", accept, METH_VARARGS,
     "accept(buf, pos, end, max_message_bytes, log_append_time, require_key, from_coordinator) -> (header, size) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_walk(void) { return PyModule_Create(&module); }
