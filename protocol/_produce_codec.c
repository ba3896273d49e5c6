/* The compiled half of protocol/fast_codecs.py's Produce codec: the same layouts, read and
 * written in one call instead of a Python call per field. fast_codecs.py keeps the reference
 * (used when this module is not built) and the rules; tests/protocol/test_fast_codecs.py checks
 * that both give the same answer on any input.
 *
 * decode(buf, pos, version) -> (transactional_id, acks, timeout_ms, topics, plain) | str
 *   A Produce v3-v8 body at `pos` of `buf` (a memoryview of the frame): topics is
 *   [(name, [(partition, records or None)])], records a slice of `buf` (no copy). A malformed
 *   body returns the reason as a str, worded as fast_codecs.py words it; the caller raises.
 *   `plain`: every partition's records are exactly one whole magic-2 batch, not transactional,
 *   in a codec `version` allows (fast_codecs.produce_request_is_plain_py, the reference): the
 *   produce path's checks before the log (broker/apis.py) would pass every partition as it is.
 *
 * parse_header(buf, flexible_versions, cls) -> cls(api_key, api_version, correlation_id, client_id, size) | str
 *   A request header v1/v2 at the start of `buf`; v2 (its tagged fields) when the pair
 *   (api_key, api_version) is in `flexible_versions`. A malformed header returns the reason as
 *   a str, worded as fast_codecs.parse_request_header words it (the reference); the caller
 *   raises. `cls` is fast_codecs.RequestHeader.
 *
 * encode(version, correlation_id, responses, throttle_time_ms) -> bytes | None
 *   A whole Produce v3-v8 response frame, size prefix included. None when a row is not the
 *   plain (partition, error, base_offset, log_append_time, log_start_offset) one, or a value
 *   does not fit its field: the caller then encodes in Python, which says what is wrong.
 *
 * decode_fetch(buf, pos, version, request_cls, partition_cls) -> request_cls(...) | None
 *   A Fetch v4-v11 body at `pos` of `buf`, as fast_codecs.decode_fetch_request_py decodes it
 *   (request_cls is fast_codecs.FetchRequest, partition_cls FetchPartition). None for whatever
 *   it leaves to the reference: a malformed body (which the reference refuses, with its reason),
 *   forgotten topics, a rack id (v11) — a follower's fetch and most consumers' have neither.
 *
 * encode_fetch(version, correlation_id, responses, throttle_time_ms, error_code, session_id, pd_cls)
 *     -> (chunks, total) | None
 *   fast_codecs.encode_fetch_response_py's answer (a Fetch v4-v11 response frame as bytearrays
 *   and the record buffers of 512 bytes or more, by reference; its length), or None for what it
 *   leaves to the reference: aborted transactions, a row not exactly `pd_cls` (FetchPartitionData),
 *   records not bytes, bytearray or a byte memoryview, a value not an int or out of its field's
 *   range. It runs no Python code (exact types only), so nothing changes the rows under it.
 *
 * split_frames(buf, max_size) -> (frames, pos) | None
 *   protocol/framing.Framer.feed's loop over a chunk with nothing buffered before it: each whole
 *   size-prefixed frame copied into a bytearray of its own, and where the rest (a partial frame
 *   or size prefix) begins. None when a size is negative or above max_size: feed's loop raises. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline int16_t rd16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }
static inline int32_t rd32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline void wr16(unsigned char *p, int16_t v) { p[0] = (unsigned char)((uint16_t)v >> 8); p[1] = (unsigned char)v; }
static inline void wr32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24); p[1] = (unsigned char)(u >> 16); p[2] = (unsigned char)(u >> 8); p[3] = (unsigned char)u;
}
static inline void wr64(unsigned char *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) { p[i] = (unsigned char)u; u >>= 8; }
}

#define TRUNCATED "produce request is truncated"

/* A string at *pos: a new str, Py_None (nullable, length -1) or NULL with *err set to the reason
 * (a new str) — or NULL without *err when Python raised (memory). */
static PyObject *read_string(const unsigned char *base, Py_ssize_t *pos, Py_ssize_t end, int nullable, PyObject **err) {
    if (end - *pos < 2) { *err = PyUnicode_FromString(TRUNCATED); return NULL; }
    int16_t n = rd16(base + *pos);
    *pos += 2;
    if (n < 0) {
        if (n == -1 && nullable) Py_RETURN_NONE;
        *err = PyUnicode_FromFormat("string length %d", (int)n);
        return NULL;
    }
    if (*pos + n > end) { *err = PyUnicode_FromFormat("string of %d bytes runs past the frame", (int)n); return NULL; }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)base + *pos, n, NULL);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
        PyErr_Clear();
        *err = PyUnicode_FromString("string is not UTF-8");
        return NULL;
    }
    *pos += n;
    return s;
}

/* An array count at *pos (never nullable here); -1 with *err set when malformed. */
static Py_ssize_t read_count(const unsigned char *base, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t min_item, PyObject **err) {
    if (end - *pos < 4) { *err = PyUnicode_FromString(TRUNCATED); return -1; }
    int32_t n = rd32(base + *pos);
    *pos += 4;
    if (n < 0) { *err = PyUnicode_FromFormat("array count %d", (int)n); return -1; }
    if ((int64_t)n * min_item > (int64_t)(end - *pos)) {
        *err = PyUnicode_FromFormat("array of %d entries cannot fit in the frame", (int)n);
        return -1;
    }
    return n;
}

/* The records of one partition are one whole batch the produce path's checks before the log
 * pass as they are (see `plain` above): Kafka's batch iterator reads a batchLength >= 14 and
 * magic 2 with exactly that many bytes after, no transactional bit (RequestUtils.
 * hasTransactionalRecords), no zstd below v7 (KIP-110). */
static int plain_records(const unsigned char *r, Py_ssize_t size, int version) {
    if (size < 61) return 0;
    int32_t length = rd32(r + 8);
    if (length < 14 || (Py_ssize_t)length + 12 != size || r[16] != 2) return 0;
    if (r[22] & 0x10) return 0;  /* transactional */
    if (version < 7 && (r[22] & 0x07) == 4) return 0;  /* zstd */
    return 1;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    PyObject *buf;
    Py_ssize_t pos;
    int version;
    if (!PyArg_ParseTuple(args, "Oni", &buf, &pos, &version)) return NULL;
    int plain = 1;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *base = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    PyObject *err = NULL, *txn = NULL, *topics = NULL, *result = NULL;
    if (pos < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "decode: negative position");
        return NULL;
    }
    txn = read_string(base, &pos, end, 1, &err);
    if (txn == NULL) goto done;
    if (end - pos < 6) { err = PyUnicode_FromString(TRUNCATED); goto done; }
    int16_t acks = rd16(base + pos);
    int32_t timeout = rd32(base + pos + 2);
    pos += 6;
    Py_ssize_t ntopics = read_count(base, &pos, end, 6, &err);
    if (ntopics < 0) goto done;
    topics = PyList_New(0);
    if (topics == NULL) goto done;
    for (Py_ssize_t t = 0; t < ntopics; t++) {
        PyObject *name = read_string(base, &pos, end, 0, &err);
        if (name == NULL) goto done;
        Py_ssize_t nparts = read_count(base, &pos, end, 8, &err);
        if (nparts < 0) { Py_DECREF(name); goto done; }
        PyObject *parts = PyList_New(0);
        PyObject *entry = parts ? PyTuple_Pack(2, name, parts) : NULL;
        Py_DECREF(name);
        if (entry == NULL || PyList_Append(topics, entry) < 0) { Py_XDECREF(parts); Py_XDECREF(entry); goto done; }
        Py_DECREF(entry);
        Py_DECREF(parts);  /* held by entry, held by topics */
        for (Py_ssize_t i = 0; i < nparts; i++) {
            if (end - pos < 8) { err = PyUnicode_FromString(TRUNCATED); goto done; }
            int32_t partition = rd32(base + pos);
            int32_t size = rd32(base + pos + 4);
            pos += 8;
            PyObject *records;
            if (size < 0) {
                if (size != -1) { err = PyUnicode_FromFormat("records length %d", (int)size); goto done; }
                records = Py_NewRef(Py_None);
                plain = 0;
            } else {
                if (pos + size > end) {
                    err = PyUnicode_FromFormat("records of %d bytes run past the frame", (int)size);
                    goto done;
                }
                records = PySequence_GetSlice(buf, pos, pos + size);
                if (records == NULL) goto done;
                if (plain) plain = plain_records(base + pos, size, version);
                pos += size;
            }
            PyObject *index = PyLong_FromLong(partition);
            PyObject *row = index ? PyTuple_Pack(2, index, records) : NULL;
            Py_XDECREF(index);
            Py_DECREF(records);
            if (row == NULL || PyList_Append(parts, row) < 0) { Py_XDECREF(row); goto done; }
            Py_DECREF(row);
        }
    }
    result = Py_BuildValue("(OhiOO)", txn, acks, timeout, topics, plain ? Py_True : Py_False);
done:
    PyBuffer_Release(&view);
    Py_XDECREF(txn);
    Py_XDECREF(topics);
    if (err != NULL) {
        Py_XDECREF(result);
        return err;
    }
    return result;
}

/* An unsigned varint of at most 5 bytes at *pos (fast_codecs.skip_tagged_fields' decode_uvarint(buf,
 * pos, 5)): 0 with *pos moved on, -1 when it is truncated or longer. */
static int read_uvarint5(const unsigned char *base, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (*pos >= end) return -1;
        unsigned char b = base[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) { *out = v; return 0; }
    }
    return -1;
}

static PyObject *parse_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "parse_header(buf, flexible_versions, cls)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *base = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, pos = 10;
    PyObject *client_id = NULL, *result = NULL;
    if (end < 10) {
        result = PyUnicode_FromFormat("request header needs 10 bytes, frame has %zd", end);
        goto done;
    }
    int16_t api_key = rd16(base), api_version = rd16(base + 2), n = rd16(base + 8);
    int32_t correlation_id = rd32(base + 4);
    if (n == -1) {
        client_id = Py_NewRef(Py_None);
    } else if (n < 0 || pos + n > end) {
        result = PyUnicode_FromFormat("client id length %d does not fit the %zd-byte frame", (int)n, end);
        goto done;
    } else {
        client_id = PyUnicode_DecodeUTF8((const char *)base + pos, n, NULL);
        if (client_id == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                result = PyUnicode_FromString("client id is not UTF-8");
            }
            goto done;
        }
        pos += n;
    }
    PyObject *key = Py_BuildValue("(hh)", api_key, api_version);
    if (key == NULL) goto done;
    int flexible = PySequence_Contains(args[1], key);
    Py_DECREF(key);
    if (flexible < 0) goto done;
    if (flexible) {
        uint64_t count, tag, size;
        if (read_uvarint5(base, &pos, end, &count) < 0) goto truncated;
        for (uint64_t i = 0; i < count; i++) {
            if (read_uvarint5(base, &pos, end, &tag) < 0 || read_uvarint5(base, &pos, end, &size) < 0
                    || size > (uint64_t)(end - pos))
                goto truncated;
            pos += (Py_ssize_t)size;
        }
    }
    {
        PyObject *fields[5];
        fields[0] = PyLong_FromLong(api_key);
        fields[1] = PyLong_FromLong(api_version);
        fields[2] = PyLong_FromLong(correlation_id);
        fields[3] = client_id;
        fields[4] = PyLong_FromSsize_t(pos);
        if (fields[0] && fields[1] && fields[2] && fields[4])
            result = PyObject_Vectorcall(args[2], fields, 5, NULL);
        Py_XDECREF(fields[0]);
        Py_XDECREF(fields[1]);
        Py_XDECREF(fields[2]);
        Py_XDECREF(fields[4]);
    }
    goto done;
truncated:
    result = PyUnicode_FromString("request header tagged fields are truncated");
done:
    PyBuffer_Release(&view);
    Py_XDECREF(client_id);
    return result;
}

/* *out = the int in `o` if it fits [lo, hi]; 0 when it does not (no error left set). */
static int get_int(PyObject *o, int64_t lo, int64_t hi, int64_t *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    if (overflow || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static PyObject *encode(PyObject *self, PyObject *args) {
    PyObject *version_o, *correlation_o, *responses, *throttle_o;
    int64_t version, correlation_id, throttle;
    if (!PyArg_ParseTuple(args, "OOOO", &version_o, &correlation_o, &responses, &throttle_o)) return NULL;
    if (!get_int(version_o, 3, 8, &version) || !get_int(correlation_o, INT32_MIN, INT32_MAX, &correlation_id)
        || !get_int(throttle_o, INT32_MIN, INT32_MAX, &throttle)
        || (!PyList_Check(responses) && !PyTuple_Check(responses))) Py_RETURN_NONE;
    PyObject *seq = PySequence_Fast(responses, "responses");
    if (seq == NULL) return NULL;
    Py_ssize_t ntopics = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t row_size = 4 + 2 + 8 + 8 + (version >= 5 ? 8 : 0) + (version >= 8 ? 6 : 0);
    /* the size first: one allocation, written in place */
    Py_ssize_t size = 8 + 4 + 4;
    for (Py_ssize_t t = 0; t < ntopics; t++) {
        PyObject *entry = PySequence_Fast_GET_ITEM(seq, t);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(entry, 0))) goto fallback;
        PyObject *parts = PyTuple_GET_ITEM(entry, 1);
        if (!PyList_Check(parts)) goto fallback;
        Py_ssize_t n;
        if (PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(entry, 0), &n) == NULL) { PyErr_Clear(); goto fallback; }
        if (n > 32767) goto fallback;
        size += 2 + n + 4 + PyList_GET_SIZE(parts) * row_size;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) { Py_DECREF(seq); return NULL; }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    /* the throttle time's place: a row's __index__ (Python code) may have resized the lists
     * since they were sized, so every write is checked against it, and the frame must end
     * there exactly, else Python encodes (as it reads the lists then) */
    unsigned char *limit = p + size - 4;
    wr32(p, (int32_t)(size - 4));
    wr32(p + 4, (int32_t)correlation_id);
    wr32(p + 8, (int32_t)ntopics);
    p += 12;
    for (Py_ssize_t t = 0; t < ntopics; t++) {
        if (t >= PySequence_Fast_GET_SIZE(seq)) { Py_DECREF(out); goto fallback; }
        PyObject *entry = PySequence_Fast_GET_ITEM(seq, t);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(entry, 0))
            || !PyList_Check(PyTuple_GET_ITEM(entry, 1))) { Py_DECREF(out); goto fallback; }
        PyObject *parts = PyTuple_GET_ITEM(entry, 1);
        Py_ssize_t n;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(entry, 0), &n);
        Py_ssize_t nparts = PyList_GET_SIZE(parts);
        if (name == NULL || n > 32767 || limit - p < 2 + n + 4 + nparts * row_size) {
            PyErr_Clear(); Py_DECREF(out); goto fallback;
        }
        wr16(p, (int16_t)n);
        memcpy(p + 2, name, n);
        p += 2 + n;
        wr32(p, (int32_t)nparts);
        p += 4;
        Py_INCREF(entry);  /* its rows' __index__ may drop it from the responses */
        for (Py_ssize_t i = 0; i < nparts; i++) {
            if (i >= PyList_GET_SIZE(parts)) { Py_DECREF(entry); Py_DECREF(out); goto fallback; }
            PyObject *row = PyList_GET_ITEM(parts, i);
            if (!PyTuple_Check(row) && !PyList_Check(row)) { Py_DECREF(entry); Py_DECREF(out); goto fallback; }
            /* ints (and int subclasses: ErrorCode) are read without running Python code; any
             * other item's __index__ may change the row, so a list row is then read from a copy */
            Py_ssize_t len = PySequence_Fast_GET_SIZE(row);
            PyObject **items = PySequence_Fast_ITEMS(row);
            int ints = 1;
            for (Py_ssize_t k = 0; k < len && k < 5; k++) ints = ints && PyLong_Check(items[k]);
            PyObject *fast = ints || PyTuple_Check(row) ? Py_NewRef(row) : PyList_AsTuple(row);
            if (fast == NULL) { PyErr_Clear(); Py_DECREF(entry); Py_DECREF(out); goto fallback; }
            int64_t v[5];
            len = PySequence_Fast_GET_SIZE(fast);
            items = PySequence_Fast_ITEMS(fast);
            int ok = len == 5 || (len > 5 && version < 8);
            ok = ok && get_int(items[0], INT32_MIN, INT32_MAX, &v[0]) && get_int(items[1], INT16_MIN, INT16_MAX, &v[1])
                 && get_int(items[2], INT64_MIN, INT64_MAX, &v[2]) && get_int(items[3], INT64_MIN, INT64_MAX, &v[3])
                 && (version < 5 || get_int(items[4], INT64_MIN, INT64_MAX, &v[4]));
            Py_DECREF(fast);
            if (!ok) { Py_DECREF(entry); Py_DECREF(out); goto fallback; }
            wr32(p, (int32_t)v[0]);
            wr16(p + 4, (int16_t)v[1]);
            wr64(p + 6, v[2]);
            wr64(p + 14, v[3]);
            p += 22;
            if (version >= 5) { wr64(p, v[4]); p += 8; }
            if (version >= 8) { memcpy(p, "\x00\x00\x00\x00\xff\xff", 6); p += 6; }
        }
        int same = PyList_GET_SIZE(parts) == nparts;
        Py_DECREF(entry);
        if (!same) { Py_DECREF(out); goto fallback; }
    }
    if (p != limit || PySequence_Fast_GET_SIZE(seq) != ntopics) { Py_DECREF(out); goto fallback; }
    wr32(p, (int32_t)throttle);
    Py_DECREF(seq);
    return out;
fallback:
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

/* decode_fetch (see the top): NULL with no error set means "not here: the reference decodes". */
static PyObject *fetch_partitions(const unsigned char *base, Py_ssize_t *pos, Py_ssize_t end, int version,
                                  PyObject *partition_cls) {
    Py_ssize_t p = *pos, psize = version >= 9 ? 28 : (version >= 5 ? 24 : 16);
    if (end - p < 4) return NULL;
    int32_t n = rd32(base + p);
    p += 4;
    if (n < 0 || (int64_t)n * psize > (int64_t)(end - p)) return NULL;
    PyObject *parts = PyList_New(n);
    if (parts == NULL) return NULL;
    for (int32_t i = 0; i < n; i++, p += psize) {
        const unsigned char *q = base + p;
        int32_t partition = rd32(q), epoch = -1;
        int64_t offset, log_start = -1;
        int32_t pmax;
        if (version >= 9) {
            epoch = rd32(q + 4);
            q += 8;
        } else {
            q += 4;
        }
        offset = (int64_t)(((uint64_t)(uint32_t)rd32(q) << 32) | (uint32_t)rd32(q + 4));
        q += 8;
        if (version >= 5) {
            log_start = (int64_t)(((uint64_t)(uint32_t)rd32(q) << 32) | (uint32_t)rd32(q + 4));
            q += 8;
        }
        pmax = rd32(q);
        PyObject *fields[5];
        fields[0] = PyLong_FromLong(partition);
        fields[1] = PyLong_FromLong(epoch);
        fields[2] = PyLong_FromLongLong(offset);
        fields[3] = PyLong_FromLongLong(log_start);
        fields[4] = PyLong_FromLong(pmax);
        PyObject *fp = NULL;
        if (fields[0] && fields[1] && fields[2] && fields[3] && fields[4])
            fp = PyObject_Vectorcall(partition_cls, fields, 5, NULL);
        for (int k = 0; k < 5; k++) Py_XDECREF(fields[k]);
        if (fp == NULL) { Py_DECREF(parts); return NULL; }
        PyList_SET_ITEM(parts, i, fp);
    }
    *pos = p;
    return parts;
}

static PyObject *decode_fetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "decode_fetch(buf, pos, version, request_cls, partition_cls)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    long version = PyLong_AsLong(args[2]);
    if (version == -1 && PyErr_Occurred()) return NULL;
    if (version < 4 || version > 11 || pos < 0) Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *base = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    PyObject *topics = NULL, *result = NULL;
    if (end - pos < 17 + (version >= 7 ? 8 : 0) + 4) goto fallback;
    int32_t replica_id = rd32(base + pos), max_wait = rd32(base + pos + 4), min_bytes = rd32(base + pos + 8);
    int32_t max_bytes = rd32(base + pos + 12);
    int8_t isolation = (int8_t)base[pos + 16];
    int32_t session_id = 0, session_epoch = -1;
    pos += 17;
    if (version >= 7) {
        session_id = rd32(base + pos);
        session_epoch = rd32(base + pos + 4);
        pos += 8;
    }
    int32_t ntopics = rd32(base + pos);
    pos += 4;
    if (ntopics < 0 || (int64_t)ntopics * 6 > (int64_t)(end - pos)) goto fallback;
    topics = PyList_New(ntopics);
    if (topics == NULL) goto done;
    for (int32_t t = 0; t < ntopics; t++) {
        if (end - pos < 2) goto fallback;
        int16_t n = rd16(base + pos);
        if (n < 0 || pos + 2 + n > end) goto fallback;
        PyObject *name = PyUnicode_DecodeUTF8((const char *)base + pos + 2, n, NULL);
        if (name == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto done;
            PyErr_Clear();
            goto fallback;
        }
        pos += 2 + n;
        PyObject *parts = fetch_partitions(base, &pos, end, (int)version, args[4]);
        if (parts == NULL) {
            Py_DECREF(name);
            if (PyErr_Occurred()) goto done;
            goto fallback;
        }
        PyObject *entry = PyTuple_New(2);
        if (entry == NULL) { Py_DECREF(name); Py_DECREF(parts); goto done; }
        PyTuple_SET_ITEM(entry, 0, name);
        PyTuple_SET_ITEM(entry, 1, parts);
        PyList_SET_ITEM(topics, t, entry);
    }
    if (version >= 7) {  /* forgotten topics: none here */
        if (end - pos < 4 || rd32(base + pos) != 0) goto fallback;
        pos += 4;
    }
    if (version >= 11) {  /* an empty rack id only */
        if (end - pos < 2 || rd16(base + pos) != 0) goto fallback;
    }
    {
        PyObject *fields[11] = {NULL};
        fields[0] = PyLong_FromLong(version);
        fields[1] = PyLong_FromLong(replica_id);
        fields[2] = PyLong_FromLong(max_wait);
        fields[3] = PyLong_FromLong(min_bytes);
        fields[4] = PyLong_FromLong(max_bytes);
        fields[5] = PyLong_FromLong(isolation);
        fields[6] = PyLong_FromLong(session_id);
        fields[7] = PyLong_FromLong(session_epoch);
        fields[8] = Py_NewRef(topics);
        fields[9] = PyList_New(0);
        fields[10] = PyUnicode_FromStringAndSize("", 0);
        int ok = 1;
        for (int k = 0; k < 11; k++) ok = ok && fields[k] != NULL;
        if (ok) result = PyObject_Vectorcall(args[3], fields, 11, NULL);
        for (int k = 0; k < 11; k++) Py_XDECREF(fields[k]);
    }
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    Py_XDECREF(topics);
    return result;
}

/* encode_fetch's output: a growing byte buffer, cut into a bytearray chunk before each record
 * buffer passed by reference. */
typedef struct { unsigned char *buf; Py_ssize_t len, cap; } outbuf;

static unsigned char *ob_reserve(outbuf *o, Py_ssize_t n) {
    if (o->len + n > o->cap) {
        Py_ssize_t cap = o->cap * 2;
        if (cap < o->len + n) cap = o->len + n + 256;
        unsigned char *b = PyMem_Realloc(o->buf, cap);
        if (b == NULL) { PyErr_NoMemory(); return NULL; }
        o->buf = b;
        o->cap = cap;
    }
    unsigned char *p = o->buf + o->len;
    o->len += n;
    return p;
}

static int ob_cut(outbuf *o, PyObject *chunks, Py_ssize_t *total) {
    PyObject *b = PyByteArray_FromStringAndSize((const char *)o->buf, o->len);
    if (b == NULL) return -1;
    int r = PyList_Append(chunks, b);
    Py_DECREF(b);
    *total += o->len;
    o->len = 0;
    return r;
}

static PyObject *s_partition, *s_error_code, *s_high_watermark, *s_last_stable_offset, *s_log_start_offset,
    *s_records, *s_aborted_transactions, *s_preferred_read_replica;

/* An exact int attribute of `o` within [lo, hi]: 1, 0 (not here: the reference encodes), -1 (error). */
static int attr_int(PyObject *o, PyObject *name, int64_t lo, int64_t hi, int64_t *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) { PyErr_Clear(); return 0; }
    int ok = PyLong_Check(v) && get_int(v, lo, hi, out);
    Py_DECREF(v);
    return ok;
}

static PyObject *encode_fetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_fetch(version, correlation_id, responses, throttle_time_ms, error_code, session_id, pd_cls)");
        return NULL;
    }
    int64_t version, correlation_id, throttle, error_code, session_id;
    PyObject *responses = args[2], *pd_cls = args[6];
    if (!PyLong_Check(args[0]) || !get_int(args[0], 4, 11, &version)
        || !PyLong_Check(args[1]) || !get_int(args[1], INT32_MIN, INT32_MAX, &correlation_id)
        || !PyLong_Check(args[3]) || !get_int(args[3], INT32_MIN, INT32_MAX, &throttle)
        || (!PyList_CheckExact(responses) && !PyTuple_CheckExact(responses)))
        Py_RETURN_NONE;
    if (version >= 7 && (!PyLong_Check(args[4]) || !get_int(args[4], INT16_MIN, INT16_MAX, &error_code)
                         || !PyLong_Check(args[5]) || !get_int(args[5], INT32_MIN, INT32_MAX, &session_id)))
        Py_RETURN_NONE;
    int v5 = version >= 5, v7 = version >= 7, v11 = version >= 11;
    Py_ssize_t ntopics = PySequence_Fast_GET_SIZE(responses);
    if (ntopics > INT32_MAX) Py_RETURN_NONE;
    PyObject **topics = PySequence_Fast_ITEMS(responses);
    outbuf o = {PyMem_Malloc(512), 0, 512};
    if (o.buf == NULL) return PyErr_NoMemory();
    PyObject *chunks = PyList_New(0), *result = NULL;
    Py_ssize_t total = 0;
    if (chunks == NULL) goto done;
    unsigned char *p = ob_reserve(&o, v7 ? 22 : 16);
    if (p == NULL) goto done;
    wr32(p + 8, (int32_t)throttle);
    if (v7) {
        wr16(p + 12, (int16_t)error_code);
        wr32(p + 14, (int32_t)session_id);
        wr32(p + 18, (int32_t)ntopics);
    } else {
        wr32(p + 12, (int32_t)ntopics);
    }
    for (Py_ssize_t t = 0; t < ntopics; t++) {
        PyObject *entry = topics[t];
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) goto fallback;
        PyObject *topic = PyTuple_GET_ITEM(entry, 0), *parts = PyTuple_GET_ITEM(entry, 1);
        if (!PyUnicode_CheckExact(topic) || (!PyList_CheckExact(parts) && !PyTuple_CheckExact(parts))) goto fallback;
        Py_ssize_t n;
        const char *raw = PyUnicode_AsUTF8AndSize(topic, &n);
        if (raw == NULL) { PyErr_Clear(); goto fallback; }
        Py_ssize_t nparts = PySequence_Fast_GET_SIZE(parts);
        if (n > INT16_MAX || nparts > INT32_MAX) goto fallback;
        if ((p = ob_reserve(&o, 2 + n + 4)) == NULL) goto done;
        wr16(p, (int16_t)n);
        memcpy(p + 2, raw, n);
        wr32(p + 2 + n, (int32_t)nparts);
        PyObject **items = PySequence_Fast_ITEMS(parts);
        for (Py_ssize_t i = 0; i < nparts; i++) {
            PyObject *pd = items[i];
            if (Py_TYPE(pd) != (PyTypeObject *)pd_cls) goto fallback;
            int64_t partition, err, hw, lso, log_start = -1, preferred = -1, size = -1;
            if (!attr_int(pd, s_partition, INT32_MIN, INT32_MAX, &partition)
                || !attr_int(pd, s_error_code, INT16_MIN, INT16_MAX, &err)
                || !attr_int(pd, s_high_watermark, INT64_MIN, INT64_MAX, &hw)
                || !attr_int(pd, s_last_stable_offset, INT64_MIN, INT64_MAX, &lso)
                || (v5 && !attr_int(pd, s_log_start_offset, INT64_MIN, INT64_MAX, &log_start))
                || (v11 && !attr_int(pd, s_preferred_read_replica, INT32_MIN, INT32_MAX, &preferred)))
                goto fallback;
            PyObject *aborted = PyObject_GetAttr(pd, s_aborted_transactions);
            if (aborted == NULL) { PyErr_Clear(); goto fallback; }
            Py_DECREF(aborted);  /* (held by pd) */
            if (aborted != Py_None) goto fallback;
            PyObject *records = PyObject_GetAttr(pd, s_records);
            if (records == NULL) { PyErr_Clear(); goto fallback; }
            Py_DECREF(records);  /* (held by pd) */
            Py_buffer rview = {0};
            int have_view = 0;
            if (records != Py_None) {
                if (!PyBytes_CheckExact(records) && !PyByteArray_CheckExact(records) && !PyMemoryView_Check(records))
                    goto fallback;
                size = PyObject_Length(records);
                if (size < 0) { PyErr_Clear(); goto fallback; }
                if (size > INT32_MAX) goto fallback;
                if (size > 0 && size < 512) {
                    if (PyObject_GetBuffer(records, &rview, PyBUF_SIMPLE) < 0) { PyErr_Clear(); goto fallback; }
                    have_view = 1;
                    if (rview.len != size) { PyBuffer_Release(&rview); goto fallback; }
                }
            }
            Py_ssize_t row = 4 + 2 + 8 + 8 + (v5 ? 8 : 0) + 4 + (v11 ? 4 : 0) + 4 + (have_view ? size : 0);
            if ((p = ob_reserve(&o, row)) == NULL) { if (have_view) PyBuffer_Release(&rview); goto done; }
            wr32(p, (int32_t)partition);
            wr16(p + 4, (int16_t)err);
            wr64(p + 6, hw);
            wr64(p + 14, lso);
            p += 22;
            if (v5) { wr64(p, log_start); p += 8; }
            wr32(p, -1);  /* no aborted transactions: a null list */
            p += 4;
            if (v11) { wr32(p, (int32_t)preferred); p += 4; }
            wr32(p, (int32_t)size);
            p += 4;
            if (have_view) {
                memcpy(p, rview.buf, size);
                PyBuffer_Release(&rview);
            } else if (size >= 512) {
                if (ob_cut(&o, chunks, &total) < 0 || PyList_Append(chunks, records) < 0) goto done;
                total += size;
            }
        }
    }
    if (ob_cut(&o, chunks, &total) < 0) goto done;
    {
        unsigned char *head = (unsigned char *)PyByteArray_AS_STRING(PyList_GET_ITEM(chunks, 0));
        if (total - 4 > INT32_MAX) goto fallback;
        wr32(head, (int32_t)(total - 4));
        wr32(head + 4, (int32_t)correlation_id);
    }
    result = Py_BuildValue("(On)", chunks, total);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(o.buf);
    Py_XDECREF(chunks);
    return result;
}

static PyObject *split_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "split_frames(buf, max_size)");
        return NULL;
    }
    long long max_size = PyLong_AsLongLong(args[1]);
    if (max_size == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *base = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, pos = 0;
    PyObject *frames = PyList_New(0), *result = NULL;
    if (frames == NULL) goto done;
    while (end - pos >= 4) {
        int32_t size = rd32(base + pos);
        if (size < 0 || size > max_size) { result = Py_NewRef(Py_None); goto done; }
        if (size > end - pos - 4) break;
        PyObject *frame = PyByteArray_FromStringAndSize((const char *)base + pos + 4, size);
        if (frame == NULL) goto done;
        int r = PyList_Append(frames, frame);
        Py_DECREF(frame);
        if (r < 0) goto done;
        pos += 4 + (Py_ssize_t)size;
    }
    result = Py_BuildValue("(On)", frames, pos);
done:
    PyBuffer_Release(&view);
    Py_XDECREF(frames);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(buf, pos, version) -> (transactional_id, acks, timeout_ms, topics, plain) | reason"},
    {"encode", encode, METH_VARARGS, "encode(version, correlation_id, responses, throttle_time_ms) -> bytes | None"},
    {"parse_header", (PyCFunction)(void (*)(void))parse_header, METH_FASTCALL,
     "parse_header(buf, flexible_versions, cls) -> cls(api_key, api_version, correlation_id, client_id, size) | reason"},
    {"decode_fetch", (PyCFunction)(void (*)(void))decode_fetch, METH_FASTCALL,
     "decode_fetch(buf, pos, version, request_cls, partition_cls) -> request_cls(...) | None"},
    {"encode_fetch", (PyCFunction)(void (*)(void))encode_fetch, METH_FASTCALL,
     "encode_fetch(version, correlation_id, responses, throttle_time_ms, error_code, session_id, pd_cls)"
     " -> (chunks, total) | None"},
    {"split_frames", (PyCFunction)(void (*)(void))split_frames, METH_FASTCALL,
     "split_frames(buf, max_size) -> (frames, pos) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_produce_codec", NULL, -1, methods};

/* The interface's version: protocol/fast_codecs.py uses the module only when it matches
 * (a module built from an older source, left in place by a checkout that moved on, is not
 * called with arguments it does not take). 2: decode(buf, pos, version) and its plain flag;
 * 3: parse_header; 4: decode_fetch, encode_fetch, split_frames. */
#define PRODUCE_CODEC_ABI 4

PyMODINIT_FUNC PyInit__produce_codec(void) {
    if ((s_partition = PyUnicode_InternFromString("partition")) == NULL
        || (s_error_code = PyUnicode_InternFromString("error_code")) == NULL
        || (s_high_watermark = PyUnicode_InternFromString("high_watermark")) == NULL
        || (s_last_stable_offset = PyUnicode_InternFromString("last_stable_offset")) == NULL
        || (s_log_start_offset = PyUnicode_InternFromString("log_start_offset")) == NULL
        || (s_records = PyUnicode_InternFromString("records")) == NULL
        || (s_aborted_transactions = PyUnicode_InternFromString("aborted_transactions")) == NULL
        || (s_preferred_read_replica = PyUnicode_InternFromString("preferred_read_replica")) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "ABI", PRODUCE_CODEC_ABI) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
