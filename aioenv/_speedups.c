/* aioenv._speedups: the compiled part of a pool's hot path.
 *
 * A send()/recv() batch costs the pool's process a dozen small steps in Python, each run once per batch or once
 * per worker message, and on a loaded machine each finds its caches cold. The steps here are the ones whose work
 * is a loop over plain integers: checking a batch's env ids, marking them busy, cutting them into each worker's
 * run, framing each worker's lane step and writing the steps to the workers' pipes (one call, the GIL released once),
 * taking apart what the done pipe brought, and ticking off the rows a thread or async worker's reply lists. Each
 * function has a pure-Python twin, which
 * defines what it does (the module named beside each below); aioenv/_hot.py picks this module where pip built it,
 * and the tests run both against each other (tests/core/test_speedups.py).
 *
 * Nothing here keeps state, allocates beyond its inputs' size, or trusts its input: the done pipe is writable by
 * any process holding it, so read_records checks every byte as its twin does. send_each writes to descriptors its
 * caller read from open ports in the same synchronous step (no port closes in between: ports close on the loop's
 * thread), so none can have been reused for another file.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>

#define MARK 0xC1
#define RECORD_SIZE 24 /* aioenv.wire.lane.RECORD: <BBHIQQ */
#define INFOS_DONE 1
#define STEP_SIZE 20        /* aioenv.wire.lane.STEP: <BBHIIQ */
#define FRAMED_STEP_SIZE 32 /* <IQ> framing (one frame of STEP_SIZE bytes), then the step */

static uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32); }

static void put16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v) {
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

/* Append (a, b) or (a, b, c) of unsigned integers to list; -1 on error. */
static int append_pair(PyObject *list, unsigned long long a, unsigned long long b) {
    PyObject *t = Py_BuildValue("(KK)", a, b);
    if (t == NULL) return -1;
    int rc = PyList_Append(list, t);
    Py_DECREF(t);
    return rc;
}

static int append_triple(PyObject *list, unsigned long long a, unsigned long long b, unsigned long long c) {
    PyObject *t = Py_BuildValue("(KKK)", a, b, c);
    if (t == NULL) return -1;
    int rc = PyList_Append(list, t);
    Py_DECREF(t);
    return rc;
}

PyDoc_STRVAR(read_records_doc,
             "read_records(data, tokens, /)\n--\n\n"
             "aioenv.wire.lane.read_records: ``(records, infos, rows, used, skipped)`` of the done pipe's ``data``.");

static PyObject *read_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "read_records takes 2 arguments (data, tokens), got %zd", nargs);
        return NULL;
    }
    PyObject *tokens_obj = args[1];
    if (!PyList_Check(tokens_obj)) {
        PyErr_Format(PyExc_TypeError, "tokens must be a list of ints, got %.100s", Py_TYPE(tokens_obj)->tp_name);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL, *infos = NULL, *rows = NULL, *result = NULL;
    Py_ssize_t known = PyList_GET_SIZE(tokens_obj);
    uint64_t small[64];
    uint64_t *tokens = known <= 64 ? small : PyMem_Malloc((size_t)known * sizeof(uint64_t));
    if (tokens == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < known; i++) {
        /* a token that is no u64 matches no record (a record's token 0 is refused before it is compared) */
        unsigned long long t = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(tokens_obj, i));
        if (t == (unsigned long long)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError) && !PyErr_ExceptionMatches(PyExc_TypeError)) goto done;
            PyErr_Clear();
            t = 0;
        }
        tokens[i] = t;
    }
    out = PyList_New(0);
    infos = PyList_New(0);
    rows = PyList_New(0);
    if (out == NULL || infos == NULL || rows == NULL) goto done;
    const unsigned char *data = view.buf;
    Py_ssize_t pos = 0, end = view.len, skipped = 0;
    while (end - pos >= RECORD_SIZE) {
        Py_ssize_t whole = pos + (end - pos) / RECORD_SIZE * RECORD_SIZE;
        int broke = 0;
        while (pos < whole) {
            const unsigned char *r = data + pos;
            unsigned kind = r[1], flags = le16(r + 2);
            uint32_t slot = le32(r + 4);
            uint64_t token = le64(r + 8), req_id = le64(r + 16);
            if (r[0] != MARK || (Py_ssize_t)slot >= known || token == 0 || tokens[slot] != token) {
                broke = 1;
                break;
            }
            int rc = 0;
            if (kind == 'R' && flags == 0) {
                rc = append_pair(out, slot, req_id);
            } else if (kind == 'R' && flags == INFOS_DONE) {
                rc = append_pair(infos, slot, req_id);
            } else if (kind == 'W') {
                rc = append_triple(rows, slot, req_id, flags);
            } else if (kind != 'K' || flags) {
                broke = 1;
                break;
            }
            if (rc < 0) goto done;
            pos += RECORD_SIZE;
        }
        if (!broke) break; /* every whole record taken: what is left is shorter than one */
        const unsigned char *next = memchr(data + pos + 1, MARK, (size_t)(end - pos - 1));
        Py_ssize_t nxt = next == NULL ? end : next - data;
        skipped += nxt - pos;
        pos = nxt;
    }
    result = Py_BuildValue("(OOOnn)", out, infos, rows, pos, skipped);
done:
    if (tokens != NULL && tokens != small) PyMem_Free(tokens);
    Py_XDECREF(out);
    Py_XDECREF(infos);
    Py_XDECREF(rows);
    PyBuffer_Release(&view);
    return result;
}

/* A 1-D C-contiguous buffer of ``itemsize``-byte items whose format (after a native byte-order prefix) is
 * ``format`` or ``alias`` (NULL: none), writable when ``flags`` asks; else a TypeError naming ``what`` and ``kind``. */
static int typed_buffer(PyObject *obj, Py_buffer *view, const char *what, int flags, Py_ssize_t itemsize,
                        const char *kind, const char *format, const char *alias) {
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | flags) < 0) return -1;
    const char *given = view->format == NULL ? "B" : view->format, *f = given;
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int ok = view->ndim == 1 && view->itemsize == itemsize &&
             (strcmp(f, format) == 0 || (alias != NULL && strcmp(f, alias) == 0));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s must be a 1-D contiguous %s array, got format %s of %zd dimension(s)", what,
                     kind, given, (Py_ssize_t)view->ndim);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* A 1-D C-contiguous buffer of int64 (format "q", or "l" where a long is 8 bytes). */
static int int64_buffer(PyObject *obj, Py_buffer *view, const char *what) {
    return typed_buffer(obj, view, what, 0, 8, "int64", "q", "l");
}

static int cmp_int64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A sorted copy of n int64s (PyMem_Malloc'ed; NULL with MemoryError set). */
static int64_t *sorted_copy(const int64_t *ids, Py_ssize_t n) {
    int64_t *s = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (s == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(s, ids, (size_t)n * sizeof(int64_t));
    if (n <= 32) { /* a send()'s few ids: insertion sort */
        for (Py_ssize_t i = 1; i < n; i++) {
            int64_t v = s[i];
            Py_ssize_t j = i;
            for (; j > 0 && s[j - 1] > v; j--) s[j] = s[j - 1];
            s[j] = v;
        }
    } else {
        qsort(s, (size_t)n, sizeof(int64_t), cmp_int64);
    }
    return s;
}

PyDoc_STRVAR(check_ids_doc,
             "check_ids(ids, num_envs, /)\n--\n\n"
             "aioenv.core.scheduler.Scheduler._check's finding for ``ids`` (int64, 1-D): None when every id is in\n"
             "``0 .. num_envs - 1`` and none repeats; else ``(False, id)``, the first unknown id in ``ids``' order, or\n"
             "``(True, id)``, the smallest id named twice.");

static PyObject *check_ids(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "check_ids takes 2 arguments (ids, num_envs), got %zd", nargs);
        return NULL;
    }
    long long num_envs = PyLong_AsLongLong(args[1]);
    if (num_envs == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (int64_buffer(args[0], &view, "ids") < 0) return NULL;
    const int64_t *ids = view.buf;
    Py_ssize_t n = view.len / 8;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= num_envs) {
            result = Py_BuildValue("(OL)", Py_False, (long long)ids[i]);
            goto done;
        }
    }
    int64_t *s = sorted_copy(ids, n);
    if (s == NULL) goto done;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (s[i] == s[i - 1]) {
            result = Py_BuildValue("(OL)", Py_True, (long long)s[i]);
            break;
        }
    }
    PyMem_Free(s);
    if (result == NULL && !PyErr_Occurred()) result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

/* A 1-D C-contiguous buffer of bools (numpy's format "?"), writable when asked. */
static int bool_buffer(PyObject *obj, Py_buffer *view, const char *what, int writable) {
    return typed_buffer(obj, view, what, writable ? PyBUF_WRITABLE : 0, 1, "bool", "?", NULL);
}

PyDoc_STRVAR(claim_ids_doc,
             "claim_ids(ids, busy, unread, /)\n--\n\n"
             "aioenv.core.scheduler.py_claim_ids: when no env of ``ids`` (int64, 1-D) is ``busy`` (bool, one per env)\n"
             "or ``unread`` (the same, or None), mark each busy and return -1; else change nothing and return the first\n"
             "such env in ``ids``' order. ``IndexError`` (nothing changed) for an id out of ``busy``'s range.");

static PyObject *claim_ids(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "claim_ids takes 3 arguments (ids, busy, unread), got %zd", nargs);
        return NULL;
    }
    Py_buffer ids_view, busy_view, unread_view;
    int has_unread = args[2] != Py_None;
    if (int64_buffer(args[0], &ids_view, "ids") < 0) return NULL;
    if (bool_buffer(args[1], &busy_view, "busy", 1) < 0) {
        PyBuffer_Release(&ids_view);
        return NULL;
    }
    if (has_unread && bool_buffer(args[2], &unread_view, "unread", 0) < 0) {
        PyBuffer_Release(&busy_view);
        PyBuffer_Release(&ids_view);
        return NULL;
    }
    const int64_t *ids = ids_view.buf;
    char *busy = busy_view.buf;
    const char *unread = has_unread ? unread_view.buf : NULL;
    Py_ssize_t n = ids_view.len / 8, envs = busy_view.len;
    PyObject *result = NULL;
    long long found = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t env = ids[i];
        if (env < 0 || env >= envs || (has_unread && env >= unread_view.len)) {
            PyErr_Format(PyExc_IndexError, "env id %lld is out of bounds for %zd envs", (long long)env, envs);
            goto done;
        }
        if (found < 0 && (busy[env] || (unread != NULL && unread[env]))) found = env;
    }
    if (found < 0) {
        for (Py_ssize_t i = 0; i < n; i++) busy[ids[i]] = 1;
    }
    result = PyLong_FromLongLong(found);
done:
    if (has_unread) PyBuffer_Release(&unread_view);
    PyBuffer_Release(&busy_view);
    PyBuffer_Release(&ids_view);
    return result;
}

PyDoc_STRVAR(runs_by_owner_doc,
             "runs_by_owner(env_ids, worker_of, /)\n--\n\n"
             "aioenv.core.scheduler._few_runs_by_owner: ``(workers, firsts, counts)``, each worker's part of the unique\n"
             "``env_ids`` (int64) as one run of envs, in id order, ``worker_of[env]`` (int64) the worker of ``env``;\n"
             "None when some worker's part is not one run.");

static PyObject *runs_by_owner(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "runs_by_owner takes 2 arguments (env_ids, worker_of), got %zd", nargs);
        return NULL;
    }
    Py_buffer ids_view, owner_view;
    if (int64_buffer(args[0], &ids_view, "env_ids") < 0) return NULL;
    if (int64_buffer(args[1], &owner_view, "worker_of") < 0) {
        PyBuffer_Release(&ids_view);
        return NULL;
    }
    const int64_t *owner_of = owner_view.buf;
    Py_ssize_t n = ids_view.len / 8, envs = owner_view.len / 8;
    PyObject *workers = NULL, *firsts = NULL, *counts = NULL, *result = NULL;
    int64_t *s = sorted_copy(ids_view.buf, n);
    if (s == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || s[i] >= envs) {
            PyErr_Format(PyExc_IndexError, "env id %lld is out of bounds for %zd envs", (long long)s[i], envs);
            goto done;
        }
    }
    workers = PyList_New(0);
    firsts = PyList_New(0);
    counts = PyList_New(0);
    if (workers == NULL || firsts == NULL || counts == NULL) goto done;
    Py_ssize_t i = 0;
    while (i < n) { /* a piece: the envs of one worker in a row of the sorted ids */
        int64_t owner = owner_of[s[i]], first = s[i];
        Py_ssize_t j = i + 1;
        while (j < n && owner_of[s[j]] == owner) {
            if (s[j] != s[j - 1] + 1) { /* a gap within one worker's envs */
                result = Py_NewRef(Py_None);
                goto done;
            }
            j++;
        }
        PyObject *w = PyLong_FromLongLong(owner), *f = PyLong_FromLongLong(first), *c = PyLong_FromSsize_t(j - i);
        int rc = w == NULL || f == NULL || c == NULL || PyList_Append(workers, w) < 0 || PyList_Append(firsts, f) < 0 ||
                 PyList_Append(counts, c) < 0;
        Py_XDECREF(w);
        Py_XDECREF(f);
        Py_XDECREF(c);
        if (rc) goto done;
        i = j;
    }
    result = PyTuple_Pack(3, workers, firsts, counts);
done:
    PyMem_Free(s);
    Py_XDECREF(workers);
    Py_XDECREF(firsts);
    Py_XDECREF(counts);
    PyBuffer_Release(&ids_view);
    PyBuffer_Release(&owner_view);
    return result;
}

PyDoc_STRVAR(framed_steps_doc,
             "framed_steps(base, firsts, counts, flags, /)\n--\n\n"
             "aioenv.wire.lane.framed_step of each message ``k`` of a lane call: request ``base + k``, envs ``firsts[k]``\n"
             "..., ``counts[k]`` of them, ``flags`` (the module's bits, already or-ed); a list of bytes.");

static PyObject *framed_steps(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "framed_steps takes 4 arguments (base, firsts, counts, flags), got %zd", nargs);
        return NULL;
    }
    unsigned long long base = PyLong_AsUnsignedLongLong(args[0]);
    if (base == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    PyObject *firsts = args[1], *counts = args[2];
    if (!PyList_Check(firsts) || !PyList_Check(counts) || PyList_GET_SIZE(firsts) != PyList_GET_SIZE(counts)) {
        PyErr_SetString(PyExc_TypeError, "firsts and counts must be lists of the same length");
        return NULL;
    }
    unsigned long flags = PyLong_AsUnsignedLong(args[3]);
    if (flags == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    if (flags > 0xFFFF) {
        PyErr_Format(PyExc_OverflowError, "flags must fit 16 bits, got %lu", flags);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(firsts);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned long first = PyLong_AsUnsignedLong(PyList_GET_ITEM(firsts, k));
        if (first == (unsigned long)-1 && PyErr_Occurred()) goto fail;
        unsigned long count = PyLong_AsUnsignedLong(PyList_GET_ITEM(counts, k));
        if (count == (unsigned long)-1 && PyErr_Occurred()) goto fail;
        if (first > 0xFFFFFFFFUL || count > 0xFFFFFFFFUL) {
            PyErr_Format(PyExc_OverflowError, "a lane step's first env and count fit 32 bits, got %lu and %lu", first,
                         count);
            goto fail;
        }
        PyObject *b = PyBytes_FromStringAndSize(NULL, FRAMED_STEP_SIZE);
        if (b == NULL) goto fail;
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(b);
        put32(p, 1);
        put64(p + 4, STEP_SIZE);
        p[12] = MARK;
        p[13] = 'S';
        put16(p + 14, (uint16_t)flags);
        put32(p + 16, (uint32_t)first);
        put32(p + 20, (uint32_t)count);
        put64(p + 24, (uint64_t)(base + (unsigned long long)k));
        PyList_SET_ITEM(out, k, b);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(take_listed_doc,
             "take_listed(listed, marks, rows, out, /)\n--\n\n"
             "aioenv.core.scheduler.Scheduler.finish_listed's rows of one request: when every item of ``rows`` is an\n"
             "int in ``0 .. len(listed) - 1`` whose byte of ``marks`` (a bytearray) is 0, each once, mark each and append\n"
             "``listed[row]`` to ``out``, in order, and return True; else change nothing and return False.");

static PyObject *take_listed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "take_listed takes 4 arguments (listed, marks, rows, out), got %zd", nargs);
        return NULL;
    }
    PyObject *listed = args[0], *marks_obj = args[1], *rows = args[2], *out = args[3];
    if (!PyList_Check(listed) || !PyByteArray_Check(marks_obj) || !PyList_Check(rows) || !PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "take_listed takes a list, a bytearray, a list and a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(listed), k = PyList_GET_SIZE(rows);
    if (PyByteArray_GET_SIZE(marks_obj) != n) {
        PyErr_Format(PyExc_ValueError, "marks has %zd bytes for %zd listed rows", PyByteArray_GET_SIZE(marks_obj), n);
        return NULL;
    }
    char *marks = PyByteArray_AS_STRING(marks_obj);
    Py_ssize_t i = 0;
    for (; i < k; i++) { /* marked as checked: a row named twice finds its own mark */
        PyObject *item = PyList_GET_ITEM(rows, i);
        if (!PyLong_CheckExact(item)) break;
        Py_ssize_t row = PyLong_AsSsize_t(item);
        if (row == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            break;
        }
        if (row < 0 || row >= n || marks[row]) break;
        marks[row] = 1;
    }
    if (i < k) { /* refused: undo the marks this call set */
        for (Py_ssize_t j = 0; j < i; j++) marks[PyLong_AsSsize_t(PyList_GET_ITEM(rows, j))] = 0;
        Py_RETURN_FALSE;
    }
    for (i = 0; i < k; i++) {
        if (PyList_Append(out, PyList_GET_ITEM(listed, PyLong_AsSsize_t(PyList_GET_ITEM(rows, i)))) < 0) return NULL;
    }
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(send_each_doc,
             "send_each(fds, datas, /)\n--\n\n"
             "aioenv.transport.pipe.py_send_each's sends: ``datas[k]`` (bytes) written to the non-blocking stream socket\n"
             "``fds[k]`` with one send(2) each (MSG_NOSIGNAL), in order, the GIL released once for all. Returns\n"
             "``[(k, n)]`` for each message not sent whole: ``n`` >= 0 bytes of it were sent, or ``n`` = -errno (EAGAIN:\n"
             "nothing fitted; another: the socket failed). An empty list: every message went whole.");

static PyObject *send_each(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "send_each takes 2 arguments (fds, datas), got %zd", nargs);
        return NULL;
    }
    PyObject *fds_obj = args[0], *datas = args[1];
    if (!PyList_Check(fds_obj) || !PyList_Check(datas) || PyList_GET_SIZE(fds_obj) != PyList_GET_SIZE(datas)) {
        PyErr_SetString(PyExc_TypeError, "send_each takes two lists of the same length: fds (ints) and datas (bytes)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(datas);
    int small_fds[64];
    Py_ssize_t small_sent[64];
    int *fds = n <= 64 ? small_fds : PyMem_Malloc((size_t)n * sizeof(int));
    Py_ssize_t *sent = n <= 64 ? small_sent : PyMem_Malloc((size_t)n * sizeof(Py_ssize_t));
    PyObject *result = NULL;
    if (fds == NULL || sent == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) { /* checked before any byte goes out */
        PyObject *fd = PyList_GET_ITEM(fds_obj, k), *data = PyList_GET_ITEM(datas, k);
        if (!PyLong_CheckExact(fd) || !PyBytes_CheckExact(data)) {
            PyErr_Format(PyExc_TypeError, "send_each: item %zd is not an int fd and bytes", k);
            goto done;
        }
        long v = PyLong_AsLong(fd);
        if ((v == -1 && PyErr_Occurred()) || v < 0 || v > INT32_MAX) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "send_each: fds[%zd] is no file descriptor", k);
            goto done;
        }
        fds[k] = (int)v;
    }
    /* the bytes objects stay alive and unchanged without the GIL: the lists hold them, and bytes are immutable */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *data = PyList_GET_ITEM(datas, k);
        ssize_t got;
        do {
            got = send(fds[k], PyBytes_AS_STRING(data), (size_t)PyBytes_GET_SIZE(data), MSG_DONTWAIT | MSG_NOSIGNAL);
        } while (got < 0 && errno == EINTR);
        sent[k] = got < 0 ? -(Py_ssize_t)errno : (Py_ssize_t)got;
    }
    Py_END_ALLOW_THREADS
    result = PyList_New(0);
    if (result == NULL) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (sent[k] == PyBytes_GET_SIZE(PyList_GET_ITEM(datas, k))) continue;
        PyObject *pair = Py_BuildValue("(nn)", k, sent[k]);
        if (pair == NULL || PyList_Append(result, pair) < 0) {
            Py_XDECREF(pair);
            Py_CLEAR(result);
            goto done;
        }
        Py_DECREF(pair);
    }
done:
    if (fds != small_fds) PyMem_Free(fds);
    if (sent != small_sent) PyMem_Free(sent);
    return result;
}

static PyMethodDef methods[] = {
    {"read_records", (PyCFunction)(void (*)(void))read_records, METH_FASTCALL, read_records_doc},
    {"check_ids", (PyCFunction)(void (*)(void))check_ids, METH_FASTCALL, check_ids_doc},
    {"runs_by_owner", (PyCFunction)(void (*)(void))runs_by_owner, METH_FASTCALL, runs_by_owner_doc},
    {"framed_steps", (PyCFunction)(void (*)(void))framed_steps, METH_FASTCALL, framed_steps_doc},
    {"take_listed", (PyCFunction)(void (*)(void))take_listed, METH_FASTCALL, take_listed_doc},
    {"claim_ids", (PyCFunction)(void (*)(void))claim_ids, METH_FASTCALL, claim_ids_doc},
    {"send_each", (PyCFunction)(void (*)(void))send_each, METH_FASTCALL, send_each_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "aioenv._speedups", "The compiled part of a pool's hot path (see aioenv/_hot.py).", 0,
    methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModuleDef_Init(&module); }
