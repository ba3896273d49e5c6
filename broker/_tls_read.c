/* broker/_tls_read.c: the read method of a TLS listener's SSLObjects (broker/network.py's
 * FastSSLObject), reading every whole TLS record OpenSSL can decrypt in one call.
 *
 * uvloop's SSLProtocol reads a connection's plaintext with SSLObject.read(n, buffer) until it
 * raises SSLWantReadError, and OpenSSL's SSL_read_ex hands out one TLS record per call:
 * librdkafka sends a 16 KiB Produce request as 31 records, so 31 calls, each parsing its
 * arguments, taking a buffer, releasing and retaking the GIL and checking the error queue, and
 * one more raising the exception. Here ``Reader(sslobj, fallback)(n, buffer)`` calls SSL_read_ex
 * until ``buffer[:n]`` is full or OpenSSL has no whole record left, and returns the bytes read;
 * when no record is whole yet (OpenSSL wants more data, and has queued no error), it raises
 * SSLWantReadError itself, with _ssl's errno and message (less the source line _ssl appends):
 * uvloop reads until that exception, so every read of a connection ends with one, which _ssl's
 * read would build after reading again, with a reason and a library looked up (8.6 µs against
 * 3.7 µs, the raise and catch included, on the shared machine at load 19). When the first record
 * is not there for another reason (close_notify, an error) or the call is not of that form, it
 * calls ``fallback`` (the C method ``_ssl._SSLSocket.read`` of the same object), whose answer or
 * exception is then Python's own. Records after the first that fail stay for
 * the next call, which is the fallback's: OpenSSL answers a failed read again the same way (no
 * data yet; close_notify seen) and leaves a fatal error's reason in its error queue, which
 * Python's read reports.
 *
 * Same SSL object, same library: SSL_read_ex and SSL_get_error are found through the loaded
 * _ssl module (dlsym on its handle), never linked here, so they are those of the OpenSSL that
 * made the SSL object. The SSL pointer is the second field of CPython's PySSLSocket (after the
 * socket weakref); ``reader_for`` checks it is that object's (CPython stores the PySSLSocket as
 * the SSL object's app data, ex_data index 0) before any Reader is made, and broker/network.py
 * keeps Python's own read when this module does not load or the check fails.
 *
 * ``keep_buffers(sslobj)`` clears SSL_MODE_RELEASE_BUFFERS, which CPython's _ssl sets on every
 * context: OpenSSL then frees a connection's read buffer whenever a record has been consumed and
 * nothing is left in it, and its write buffer after every write. Without read-ahead (_ssl's
 * default) a read buffer holds one record, so each record read cost a malloc and a free of about
 * 17 KB (16 KiB of plaintext, the record's overhead), and each write another: librdkafka sends
 * two records per 1 KiB message. Kept, each TLS connection holds its two buffers for its
 * lifetime (about 35 KB), as Kafka's SSLTransportLayer holds its network and application
 * buffers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

typedef struct ssl_st SSL;
typedef int (*read_ex_fn)(SSL *, void *, size_t, size_t *);
typedef void *(*get_ex_data_fn)(const SSL *, int);
typedef int (*get_error_fn)(const SSL *, int);
typedef void (*clear_error_fn)(void);
typedef unsigned long (*peek_error_fn)(void);
typedef void (*err_new_fn)(void);
typedef void (*set_error_fn)(int, int, const char *, ...);
typedef long (*ctrl_fn)(SSL *, int, long, void *);
typedef struct bio_st BIO;
typedef int (*has_pending_fn)(const SSL *);
typedef BIO *(*get_rbio_fn)(const SSL *);
typedef long (*bio_ctrl_fn)(BIO *, int, long, void *);
typedef int (*bio_method_type_fn)(const BIO *);

static read_ex_fn ssl_read_ex;
static get_ex_data_fn ssl_get_ex_data;
static get_error_fn ssl_get_error;
static clear_error_fn err_clear_error;
static peek_error_fn err_peek_last_error;
static err_new_fn err_new;
static set_error_fn err_set_error; /* OpenSSL 3's: with 1.1 (no ERR_set_error) bind() says no */
static ctrl_fn ssl_ctrl;
static has_pending_fn ssl_has_pending;
static get_rbio_fn ssl_get_rbio;
static bio_ctrl_fn bio_ctrl;
static bio_method_type_fn bio_method_type;
/* openssl/bio.h: BIO_get_mem_data is BIO_ctrl(b, BIO_CTRL_INFO, 0, pp); a memory BIO's type */
#define BIO_CTRL_INFO_ 3
#define BIO_TYPE_MEM_ (1 | 0x0400)
/* A TLS record's header (RFC 8446 5.1): type, legacy version, length. After the handshake
 * every record of TLS 1.2 and 1.3 is application data (23; TLS 1.3 hides the real type
 * inside) with version 3.3, and its ciphertext is at most 2^14 + 256 bytes (TLS 1.3's bound,
 * below TLS 1.2's): such a header's record is one OpenSSL can only wait for until it is whole. */
#define RECORD_HEADER_ 5
#define RECORD_MAX_ 16640
/* openssl/ssl.h: SSL_get_mode and SSL_clear_mode are macros over SSL_ctrl */
#define SSL_CTRL_MODE_ 33
#define SSL_CTRL_CLEAR_MODE_ 78
#define SSL_MODE_RELEASE_BUFFERS_ 0x00000010L
/* OpenSSL 3's packed error codes (openssl/err.h: ERR_GET_LIB, ERR_GET_REASON) */
#define ERR_GET_LIB_(e) ((int)(((e) >> 23) & 0xFF))
#define ERR_SYSTEM_FLAG_ ((unsigned long)0x80000000UL) /* openssl/err.h: ERR_SYSTEM_FLAG (INT_MAX + 1) */
#define ERR_LIB_SYS_ 2
#define ERR_GET_REASON_(e) ((int)((e) & 0x7FFFFF))
#define SSL_ERROR_SSL_ 1     /* openssl/ssl.h's SSL_ERROR_SSL */
#define SSL_ERROR_SYSCALL_ 5 /* openssl/ssl.h's SSL_ERROR_SYSCALL */
static PyTypeObject *sslsocket_type; /* _ssl._SSLSocket, checked once (reader_for) */
#define SSL_ERROR_WANT_READ_ 2 /* openssl/ssl.h's SSL_ERROR_WANT_READ, _ssl's SSL_ERROR_WANT_READ */
static PyObject *want_read_type; /* ssl.SSLWantReadError (bind) */
static PyObject *want_read_args; /* (SSL_ERROR_WANT_READ, "The operation did not complete (read)") */

typedef struct {
    PyObject_HEAD
    PyObject *socket_weakref;
    SSL *ssl;
} PySSLSocketHead; /* CPython 3.8-3.13's PySSLSocket starts so */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *sslobj;   /* the _ssl._SSLSocket */
    PyObject *fallback; /* its read method */
    SSL *ssl;
    int failed; /* a record after whole ones failed: the next call is the fallback's (see below) */
    unsigned long error; /* and the error OpenSSL queued for it (0: none) */
    int ended; /* a read failed for another reason than want of data: OpenSSL is asked every time */
} Reader;

/* The read after a failed record (Reader.failed): OpenSSL's SSL object stays failed and its
 * next read fails again, without queueing the reason again (the state machine is in error):
 * the reason kept is put back on the queue first, so _ssl's read reports the same SSLError as
 * when it read that record itself; should it not raise an SSLError after all, one is raised. */
static PyObject *
failed_read(Reader *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (self->error != 0) {
        unsigned long e = self->error;
        err_new();
        if (e & ERR_SYSTEM_FLAG_) /* a system error: errno in the low bits, library "system" */
            err_set_error(ERR_LIB_SYS_, (int)(e & ~ERR_SYSTEM_FLAG_), NULL);
        else
            err_set_error(ERR_GET_LIB_(e), ERR_GET_REASON_(e), NULL);
        self->error = 0;
    }
    PyObject *result = PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *ssl_error = NULL, *want_read = NULL;
    PyObject *ssl_module = PyImport_ImportModule("ssl");
    if (ssl_module == NULL)
        goto done;
    ssl_error = PyObject_GetAttrString(ssl_module, "SSLError");
    want_read = PyObject_GetAttrString(ssl_module, "SSLWantReadError");
    Py_DECREF(ssl_module);
    if (ssl_error == NULL || want_read == NULL)
        goto done;
    if (result != NULL || type == NULL || PyErr_GivenExceptionMatches(type, want_read)
        || !PyErr_GivenExceptionMatches(type, ssl_error)) {
        err_clear_error(); /* what was put back, unless _ssl raised it (and then cleared it) */
        Py_CLEAR(result);
        Py_CLEAR(type);
        Py_CLEAR(value);
        Py_CLEAR(tb);
        PyErr_SetString(ssl_error, "a TLS record of this connection failed after the records read before it");
        goto out;
    }
done:
    if (type != NULL)
        PyErr_Restore(type, value, tb);
out:
    Py_XDECREF(ssl_error);
    Py_XDECREF(want_read);
    return result;
}

/* Whether OpenSSL should be asked to read now: it holds something of its own (a record
 * partly taken, plaintext not handed out), or its incoming memory BIO holds a whole record, or
 * a header that is not an ordinary record's (OpenSSL reports what is wrong with it as soon as it
 * has the header). Otherwise (nothing, part of a header, or an ordinary record not yet whole)
 * OpenSSL would take the part into its own buffer and want more: left in the BIO, it costs no
 * call that can only answer "want read". */
static int
worth_reading(SSL *ssl)
{
    if (ssl_has_pending(ssl))
        return 1;
    BIO *rbio = ssl_get_rbio(ssl);
    if (rbio == NULL || bio_method_type(rbio) != BIO_TYPE_MEM_)
        return 1;
    unsigned char *data = NULL;
    long len = bio_ctrl(rbio, BIO_CTRL_INFO_, 0, &data);
    if (len < RECORD_HEADER_ || data == NULL)
        return 0;
    long body = ((long)data[3] << 8) | data[4];
    if (data[0] != 23 || data[1] != 3 || data[2] != 3 || body > RECORD_MAX_)
        return 1;
    return len >= RECORD_HEADER_ + body;
}

static PyObject *
reader_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Reader *self = (Reader *)callable;
    if (self->failed) {
        self->failed = 0;
        return failed_read(self, args, nargsf, kwnames);
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || kwnames != NULL || args[1] == Py_None)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (n <= 0 || n > view.len) { /* not a read of n bytes into the buffer: _ssl's read says what it is */
        PyBuffer_Release(&view);
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    size_t total = 0;
    char *buf = view.buf;
    int want_read = 0, waiting = 0, e = 0;
    Py_BEGIN_ALLOW_THREADS
    size_t got;
    while (total < (size_t)n) {
        if (!self->ended && !worth_reading(self->ssl)) {
            waiting = 1; /* the rest of a record, or nothing: OpenSSL is not asked (see worth_reading) */
            break;
        }
        if (ssl_read_ex(self->ssl, buf + total, (size_t)n - total, &got) != 1) {
            e = ssl_get_error(self->ssl, 0);
            break;
        }
        total += got;
    }
    /* A read that failed for another reason than "not whole yet" (close_notify, an alert, an
     * error): OpenSSL answers every later read of the connection itself (it remembers why). */
    if (e != 0 && e != SSL_ERROR_WANT_READ_)
        self->ended = 1;
    /* No whole record at all, for want of data only (SSL_get_error says so only when OpenSSL
     * queued no error): SSLWantReadError is raised below, not by _ssl's read (see the top). */
    if (total == 0)
        want_read = waiting || e == SSL_ERROR_WANT_READ_;
    /* A record after whole ones that failed for another reason than "not whole yet" (a bad
     * record MAC, an alert): OpenSSL's error queue is the thread's, and SSL_get_error() of
     * whatever connection this thread reads next would take an entry left there for its own
     * (SSL_ERROR_SSL for a mere "no data yet"). So the queue is emptied now, the error kept,
     * and the failure is this connection's next read's to report (failed_read). */
    if (total > 0 && total < (size_t)n) {
        if (e == SSL_ERROR_SSL_ || e == SSL_ERROR_SYSCALL_) {
            self->failed = 1;
            self->error = err_peek_last_error();
            err_clear_error();
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (want_read && want_read_type != NULL) {
        PyErr_SetObject(want_read_type, want_read_args);
        return NULL;
    }
    if (total == 0) /* nothing whole to read for another reason (close_notify, a failure): Python's read says which */
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    return PyLong_FromSize_t(total);
}

static int
reader_traverse(Reader *self, visitproc visit, void *arg)
{
    Py_VISIT(self->sslobj);
    Py_VISIT(self->fallback);
    return 0;
}

static int
reader_clear(Reader *self)
{
    Py_CLEAR(self->sslobj);
    Py_CLEAR(self->fallback);
    return 0;
}

static void
reader_dealloc(Reader *self)
{
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._tls_read.Reader",
    .tp_doc = "read(n, buffer): every whole TLS record that fits, in one call (see the module)",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Reader, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_dealloc = (destructor)reader_dealloc,
};

/* The SSL object of the _ssl._SSLSocket ``sslobj`` (an SSLObject's _sslobj), or NULL when its
 * SSL pointer cannot be trusted (or bind() did not find OpenSSL's functions). */
static SSL *
ssl_of(PyObject *sslobj)
{
    if (ssl_read_ex == NULL || ssl_get_ex_data == NULL || ssl_get_error == NULL || err_clear_error == NULL
        || ssl_ctrl == NULL || ssl_has_pending == NULL || ssl_get_rbio == NULL || bio_ctrl == NULL
        || bio_method_type == NULL)
        return NULL;
    PyTypeObject *type = Py_TYPE(sslobj);
    if (sslsocket_type == NULL) {
        if (strcmp(type->tp_name, "_ssl._SSLSocket") != 0 || type->tp_basicsize < (Py_ssize_t)sizeof(PySSLSocketHead))
            return NULL;
    }
    else if (type != sslsocket_type)
        return NULL;
    SSL *ssl = ((PySSLSocketHead *)sslobj)->ssl;
    if (ssl == NULL || ssl_get_ex_data(ssl, 0) != (void *)sslobj)
        return NULL;
    if (sslsocket_type == NULL) {
        Py_INCREF(type); /* a heap type since 3.10: kept alive while cached */
        sslsocket_type = type;
    }
    return ssl;
}

/* reader_for(sslobj): a Reader for the _ssl._SSLSocket ``sslobj`` (an SSLObject's _sslobj), or
 * None when its SSL pointer cannot be trusted. */
static PyObject *
reader_for(PyObject *module, PyObject *sslobj)
{
    SSL *ssl = ssl_of(sslobj);
    if (ssl == NULL)
        Py_RETURN_NONE;
    PyObject *fallback = PyObject_GetAttrString(sslobj, "read");
    if (fallback == NULL)
        return NULL;
    Reader *self = PyObject_GC_New(Reader, &ReaderType);
    if (self == NULL) {
        Py_DECREF(fallback);
        return NULL;
    }
    self->vectorcall = reader_vectorcall;
    Py_INCREF(sslobj);
    self->sslobj = sslobj;
    self->fallback = fallback;
    self->ssl = ssl;
    self->failed = 0;
    self->error = 0;
    self->ended = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* keep_buffers(sslobj): clear SSL_MODE_RELEASE_BUFFERS on the _ssl._SSLSocket ``sslobj`` (see
 * the top); whether it could. */
static PyObject *
keep_buffers(PyObject *module, PyObject *sslobj)
{
    SSL *ssl = ssl_of(sslobj);
    if (ssl == NULL)
        Py_RETURN_FALSE;
    ssl_ctrl(ssl, SSL_CTRL_CLEAR_MODE_, SSL_MODE_RELEASE_BUFFERS_, NULL);
    Py_RETURN_TRUE;
}

/* releases_buffers(sslobj): whether SSL_MODE_RELEASE_BUFFERS is set on ``sslobj``'s SSL object
 * (None when it cannot be trusted). */
static PyObject *
releases_buffers(PyObject *module, PyObject *sslobj)
{
    SSL *ssl = ssl_of(sslobj);
    if (ssl == NULL)
        Py_RETURN_NONE;
    return PyBool_FromLong((ssl_ctrl(ssl, SSL_CTRL_MODE_, 0, NULL) & SSL_MODE_RELEASE_BUFFERS_) != 0);
}

/* bind(ssl_module_path): find the OpenSSL functions used here through the loaded _ssl module;
 * returns whether all were found (OpenSSL 3: ERR_set_error is new in 3.0). */
static PyObject *
bind_ssl(PyObject *module, PyObject *path)
{
#if PY_VERSION_HEX < 0x03080000 || PY_VERSION_HEX >= 0x030E0000 || defined(Py_GIL_DISABLED)
    Py_RETURN_FALSE; /* PySSLSocket's layout is known for 3.8-3.13 only; free-threaded builds
                        lock each SSL object, which this read would bypass */
#endif
    const char *p = PyUnicode_AsUTF8(path);
    if (p == NULL)
        return NULL;
    void *handle = dlopen(p, RTLD_NOW | RTLD_NOLOAD);
    if (handle == NULL)
        Py_RETURN_FALSE;
    read_ex_fn r = (read_ex_fn)dlsym(handle, "SSL_read_ex");
    get_ex_data_fn g = (get_ex_data_fn)dlsym(handle, "SSL_get_ex_data");
    get_error_fn e = (get_error_fn)dlsym(handle, "SSL_get_error");
    clear_error_fn c = (clear_error_fn)dlsym(handle, "ERR_clear_error");
    peek_error_fn pk = (peek_error_fn)dlsym(handle, "ERR_peek_last_error");
    err_new_fn nw = (err_new_fn)dlsym(handle, "ERR_new");
    set_error_fn se = (set_error_fn)dlsym(handle, "ERR_set_error");
    ctrl_fn ct = (ctrl_fn)dlsym(handle, "SSL_ctrl");
    has_pending_fn hp = (has_pending_fn)dlsym(handle, "SSL_has_pending");
    get_rbio_fn gr = (get_rbio_fn)dlsym(handle, "SSL_get_rbio");
    bio_ctrl_fn bc = (bio_ctrl_fn)dlsym(handle, "BIO_ctrl");
    bio_method_type_fn bm = (bio_method_type_fn)dlsym(handle, "BIO_method_type");
    if (r == NULL || g == NULL || e == NULL || c == NULL || pk == NULL || nw == NULL || se == NULL || ct == NULL
        || hp == NULL || gr == NULL || bc == NULL || bm == NULL)
        Py_RETURN_FALSE; /* the handle stays open: _ssl is loaded for good anyway */
    ssl_read_ex = r;
    ssl_get_ex_data = g;
    ssl_get_error = e;
    err_clear_error = c;
    err_peek_last_error = pk;
    err_new = nw;
    err_set_error = se;
    ssl_ctrl = ct;
    ssl_has_pending = hp;
    ssl_get_rbio = gr;
    bio_ctrl = bc;
    bio_method_type = bm;
    if (want_read_type == NULL) {
        PyObject *ssl_module = PyImport_ImportModule("ssl");
        if (ssl_module == NULL)
            return NULL;
        want_read_type = PyObject_GetAttrString(ssl_module, "SSLWantReadError");
        Py_DECREF(ssl_module);
        if (want_read_type == NULL)
            return NULL;
        want_read_args = Py_BuildValue("(is)", SSL_ERROR_WANT_READ_, "The operation did not complete (read)");
        if (want_read_args == NULL) {
            Py_CLEAR(want_read_type);
            return NULL;
        }
    }
    Py_RETURN_TRUE;
}

/* set_rcvlowat(fd, bytes, quickack): setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, bytes) (bytes 0: left as
 * it is), and with
 * quickack also TCP_QUICKACK (the ACK of what came goes now, not after the delayed-ACK timer),
 * without a socket object per call (uvloop's transports hand out a PseudoSocket that makes one
 * for each setsockopt); OSError on failure. broker/network.py calls it while a request is
 * incomplete. */
static PyObject *
set_rcvlowat(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "set_rcvlowat(fd, bytes, quickack)");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    long bytes = PyLong_AsLong(args[1]);
    if (bytes == -1 && PyErr_Occurred())
        return NULL;
    int quickack = PyObject_IsTrue(args[2]);
    if (quickack < 0)
        return NULL;
    if (fd < 0 || fd > INT_MAX || bytes < 0 || bytes > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "set_rcvlowat: fd or bytes out of range");
        return NULL;
    }
    int value = (int)bytes, one = 1;
    if (value > 0 && setsockopt((int)fd, SOL_SOCKET, SO_RCVLOWAT, &value, sizeof(value)) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (quickack && setsockopt((int)fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one)) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_rcvlowat", (PyCFunction)(void (*)(void))set_rcvlowat, METH_FASTCALL,
     "set_rcvlowat(fd, bytes, quickack): the socket's SO_RCVLOWAT (and TCP_QUICKACK)"},
    {"bind", bind_ssl, METH_O, "bind(path of the loaded _ssl module) -> whether OpenSSL's functions were found"},
    {"reader_for", reader_for, METH_O, "reader_for(_ssl._SSLSocket) -> Reader, or None"},
    {"keep_buffers", keep_buffers, METH_O,
     "keep_buffers(_ssl._SSLSocket) -> whether SSL_MODE_RELEASE_BUFFERS could be cleared"},
    {"releases_buffers", releases_buffers, METH_O,
     "releases_buffers(_ssl._SSLSocket) -> whether SSL_MODE_RELEASE_BUFFERS is set (None: unknown)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "broker._tls_read", NULL, -1, methods,
};

PyMODINIT_FUNC
PyInit__tls_read(void)
{
    if (PyType_Ready(&ReaderType) < 0)
        return NULL;
    return PyModule_Create(&module_def);
}
