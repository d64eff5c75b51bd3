/* Event boundaries of a Chrome-trace event array, and which events are worth decoding.
 *
 * diag/artifacts/trace_reader.py decodes every event it keeps with the stdlib's JSON
 * decoder; most events of a serving trace are python_function / flow / cpu_op events it
 * never keeps (88-91 % python_function in the corpus's capture traces). This walks the
 * array's bytes (UTF-8: every structural byte is ASCII), finds each top-level object,
 * reads its "cat" and "name" strings at depth 1 (any key order), and returns the byte
 * ranges of the objects to decode: those whose category is not dropped, and, for a
 * filtered category, whose name contains one of its substrings (or has no name).
 *
 * scan(buf, pos, drop, filtered, gpu, max_bytes)
 *   -> (ranges, pos, status, objects, (corr, ts, dur), big, big_at)
 *   big: objects longer than max_bytes (never kept), big_at: the first one's offset or -1
 *   ranges: int64 (start, end, count) of each run of consecutive kept objects (decoded as
 *   one JSON array: one decoder call per run, not per event);
 *   GPU ops (ph "X", cat in gpu) with numeric ts, dur and args.correlation are read here
 *   (the bulk of what is kept): corr int64, ts and dur float64 arrays as bytes; any other
 *   shape of them goes to the decoder like every kept event.
 *   status 0: more bytes needed (pos: start of the incomplete object)
 *          1: the array's closing ']' consumed (pos: after it)
 *          2: a byte that is neither ',', whitespace, '{' nor ']' at pos
 * skip(buf, pos, depth, in_string) -> (pos, depth, in_string, done): walk past one value
 *   begun earlier (resumable across blocks; used for values too big to hold).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    Py_ssize_t n;
} span_t;

static int span_eq(span_t s, const char *lit, Py_ssize_t n) {
    return s.n == n && memcmp(s.p, lit, (size_t)n) == 0;
}

static int contains(span_t hay, const char *needle, Py_ssize_t n) {
    if (n == 0) return 1;
    if (hay.n < n) return 0;
    for (Py_ssize_t i = 0; i + n <= hay.n; i++) {
        if (hay.p[i] == needle[0] && memcmp(hay.p + i, needle, (size_t)n) == 0) return 1;
    }
    return 0;
}

/* keep the event? drop: tuple of bytes; filtered: tuple of (bytes cat, tuple of bytes) */
static int keep_event(span_t cat, int has_cat, span_t name, int has_name, PyObject *drop,
                      PyObject *filtered) {
    if (!has_cat) return 1;
    Py_ssize_t nd = PyTuple_GET_SIZE(drop);
    for (Py_ssize_t i = 0; i < nd; i++) {
        PyObject *d = PyTuple_GET_ITEM(drop, i);
        if (span_eq(cat, PyBytes_AS_STRING(d), PyBytes_GET_SIZE(d))) return 0;
    }
    Py_ssize_t nf = PyTuple_GET_SIZE(filtered);
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *pair = PyTuple_GET_ITEM(filtered, i);
        PyObject *c = PyTuple_GET_ITEM(pair, 0);
        if (!span_eq(cat, PyBytes_AS_STRING(c), PyBytes_GET_SIZE(c))) continue;
        if (!has_name) return 1;
        PyObject *subs = PyTuple_GET_ITEM(pair, 1);
        Py_ssize_t ns = PyTuple_GET_SIZE(subs);
        for (Py_ssize_t j = 0; j < ns; j++) {
            PyObject *s = PyTuple_GET_ITEM(subs, j);
            if (contains(name, PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))) return 1;
        }
        return 0;
    }
    return 1;
}

static int check_args(PyObject *drop, PyObject *filtered) {
    if (!PyTuple_Check(drop) || !PyTuple_Check(filtered)) {
        PyErr_SetString(PyExc_TypeError, "drop and filtered must be tuples");
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(drop); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(drop, i))) goto bad;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(filtered); i++) {
        PyObject *pair = PyTuple_GET_ITEM(filtered, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) goto bad;
        if (!PyBytes_Check(PyTuple_GET_ITEM(pair, 0))) goto bad;
        PyObject *subs = PyTuple_GET_ITEM(pair, 1);
        if (!PyTuple_Check(subs)) goto bad;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(subs); j++)
            if (!PyBytes_Check(PyTuple_GET_ITEM(subs, j))) goto bad;
    }
    return 1;
bad:
    PyErr_SetString(PyExc_TypeError, "drop: tuple of bytes; filtered: tuple of (bytes, tuple of bytes)");
    return 0;
}

typedef struct {
    long long *v;
    Py_ssize_t n, cap;
} i64s;

typedef struct {
    double *v;
    Py_ssize_t n, cap;
} f64s;

static int push_i(i64s *a, long long x) {
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 1024;
        long long *g = (long long *)PyMem_Realloc(a->v, sizeof(long long) * (size_t)cap);
        if (g == NULL) return 0;
        a->v = g;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 1;
}

static int push_f(f64s *a, double x) {
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 1024;
        double *g = (double *)PyMem_Realloc(a->v, sizeof(double) * (size_t)cap);
        if (g == NULL) return 0;
        a->v = g;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 1;
}

/* a JSON number at p (the object is complete, so a delimiter follows within the buffer) */
static int number_at(const char *p, double *out, int integer, long long *iout) {
    char *end;
    if (integer) {
        long long v = strtoll(p, &end, 10);
        if (end == p || *end == '.' || *end == 'e' || *end == 'E') return 0;
        *iout = v;
        return 1;
    }
    double v = strtod(p, &end);
    if (end == p) return 0;
    *out = v;
    return 1;
}

enum { K_OTHER, K_CAT, K_NAME, K_PH, K_TS, K_DUR, K_ARGS };

static int is_gpu_cat(span_t cat, PyObject *gpu) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(gpu); i++) {
        PyObject *g = PyTuple_GET_ITEM(gpu, i);
        if (span_eq(cat, PyBytes_AS_STRING(g), PyBytes_GET_SIZE(g))) return 1;
    }
    return 0;
}

/* Is b[i:end) one JSON object in a strict subset of the grammar Python's json reads (no
 * NaN/Infinity, no control character in a string, escapes \" \\ \/ \b \f \n \r \t \uXXXX)?
 * Only such an event is dropped or read here without the decoder; any other goes to the
 * decoder, so both readers say the same of a malformed event (tests/test_trace_agreement.py). */
static int valid_json(const char *b, Py_ssize_t i, Py_ssize_t end) {
    enum { VALUE, KEY_OR_END, KEY, COLON, NEXT, VALUE_OR_END } st = VALUE;
    char stack[64];
    int depth = 0;
    while (i < end) {
        unsigned char c = (unsigned char)b[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            i++;
            continue;
        }
        if (st == COLON) {
            if (c != ':') return 0;
            st = VALUE;
            i++;
            continue;
        }
        if (st == NEXT) {
            if (c == ',') {
                st = stack[depth - 1] == '{' ? KEY : VALUE;
                i++;
                continue;
            }
            if ((c == '}' && stack[depth - 1] == '{') || (c == ']' && stack[depth - 1] == '[')) {
                i++;
                if (--depth == 0) return i == end;
                continue;
            }
            return 0;
        }
        if ((st == KEY_OR_END && c == '}') || (st == VALUE_OR_END && c == ']')) {
            i++;
            if (--depth == 0) return i == end;
            st = NEXT;
            continue;
        }
        if (c == '"') {
            Py_ssize_t j = i + 1;
            for (;;) {
                if (j >= end) return 0;
                unsigned char d = (unsigned char)b[j];
                if (d == '"') break;
                if (d < 0x20) return 0;
                if (d == '\\') {
                    if (j + 1 >= end) return 0;
                    char e = b[j + 1];
                    if (e == 'u') {
                        if (j + 5 >= end) return 0;
                        for (int k = 2; k < 6; k++)
                            if (!isxdigit((unsigned char)b[j + k])) return 0;
                        j += 6;
                        continue;
                    }
                    if (!strchr("\"\\/bfnrt", e) || e == '\0') return 0;
                    j += 2;
                    continue;
                }
                j++;
            }
            i = j + 1;
            st = (st == KEY || st == KEY_OR_END) ? COLON : NEXT;
            continue;
        }
        if (st == KEY || st == KEY_OR_END) return 0;
        if (c == '{' || c == '[') {
            if (depth == 64) return 0;
            stack[depth++] = (char)c;
            st = c == '{' ? KEY_OR_END : VALUE_OR_END;
            i++;
            continue;
        }
        if (depth == 0) return 0; /* an event is an object */
        if (c == 't' || c == 'f' || c == 'n') {
            const char *w = c == 't' ? "true" : c == 'f' ? "false" : "null";
            size_t n = strlen(w);
            if (end - i < (Py_ssize_t)n || memcmp(b + i, w, n) != 0) return 0;
            i += (Py_ssize_t)n;
            st = NEXT;
            continue;
        }
        /* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
        if (c == '-') i++;
        if (i >= end || !isdigit((unsigned char)b[i])) return 0;
        if (b[i] == '0') i++;
        else
            while (i < end && isdigit((unsigned char)b[i])) i++;
        if (i < end && b[i] == '.') {
            i++;
            if (i >= end || !isdigit((unsigned char)b[i])) return 0;
            while (i < end && isdigit((unsigned char)b[i])) i++;
        }
        if (i < end && (b[i] == 'e' || b[i] == 'E')) {
            i++;
            if (i < end && (b[i] == '+' || b[i] == '-')) i++;
            if (i >= end || !isdigit((unsigned char)b[i])) return 0;
            while (i < end && isdigit((unsigned char)b[i])) i++;
        }
        st = NEXT;
    }
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    PyObject *drop, *filtered, *gpu;
    Py_ssize_t max_bytes, big = 0, big_at = -1;
    if (!PyArg_ParseTuple(args, "y*nOOOn", &view, &pos, &drop, &filtered, &gpu, &max_bytes)) return NULL;
    if (!check_args(drop, filtered) || !check_args(gpu, filtered)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *b = (const char *)view.buf;
    Py_ssize_t n = view.len;
    i64s ranges = {NULL, 0, 0}, corr = {NULL, 0, 0};
    f64s ts = {NULL, 0, 0}, dur = {NULL, 0, 0};
    Py_ssize_t objects = 0;
    int status = 0, prev_kept = 0, oom = 0;
    char stack[64];
    if (pos < 0) pos = 0;
    while (!oom) {
        while (pos < n && (b[pos] == ' ' || b[pos] == '\n' || b[pos] == '\r' || b[pos] == '\t' ||
                           b[pos] == ','))
            pos++;
        if (pos >= n) break;
        if (b[pos] == ']') {
            pos++;
            status = 1;
            break;
        }
        if (b[pos] != '{') {
            status = 2;
            break;
        }
        Py_ssize_t start = pos, i = pos + 1;
        int depth = 1, expect_key = 1, complete = 0, in_args = 0;
        int which = K_OTHER, which2 = 0;
        int has_cat = 0, has_name = 0, has_ph = 0;
        span_t cat = {NULL, 0}, name = {NULL, 0}, ph = {NULL, 0};
        Py_ssize_t ts_at = -1, dur_at = -1, corr_at = -1;
        stack[1] = '{';
        while (i < n) {
            char c = b[i];
            if (c == '"') {
                Py_ssize_t s0 = i + 1, j = s0;
                while (j < n && b[j] != '"') {
                    if (b[j] == '\\') j++;
                    j++;
                }
                if (j >= n) break; /* string cut by the block end */
                span_t str = {b + s0, j - s0};
                int is_key = expect_key && depth < 64 && stack[depth] == '{';
                if (is_key) {
                    if (depth == 1) {
                        which = span_eq(str, "cat", 3)    ? K_CAT
                                : span_eq(str, "name", 4) ? K_NAME
                                : span_eq(str, "ph", 2)   ? K_PH
                                : span_eq(str, "ts", 2)   ? K_TS
                                : span_eq(str, "dur", 3)  ? K_DUR
                                : span_eq(str, "args", 4) ? K_ARGS
                                                          : K_OTHER;
                    } else if (depth == 2 && in_args) {
                        which2 = span_eq(str, "correlation", 11);
                    }
                    expect_key = 0;
                } else if (depth == 1) {
                    if (which == K_CAT) cat = str, has_cat = 1;
                    else if (which == K_NAME) name = str, has_name = 1;
                    else if (which == K_PH) ph = str, has_ph = 1;
                    which = K_OTHER;
                } else if (depth == 2) {
                    which2 = 0;
                }
                i = j + 1;
                continue;
            }
            if (c == '{' || c == '[') {
                depth++;
                if (depth < 64) stack[depth] = c;
                if (depth == 2) in_args = (c == '{' && which == K_ARGS);
                if (c == '{') expect_key = 1;
                which = K_OTHER;
                which2 = 0;
            } else if (c == '}' || c == ']') {
                depth--;
                if (depth == 1) in_args = 0;
                if (depth == 0) {
                    i++;
                    complete = 1;
                    break;
                }
            } else if (c == ',') {
                if (depth < 64 && stack[depth] == '{') expect_key = 1;
                which = K_OTHER;
                which2 = 0;
            } else if (c != ':' && c != ' ' && c != '\n' && c != '\r' && c != '\t') {
                /* the first byte of a number or literal */
                if (depth == 1 && which == K_TS) ts_at = i;
                else if (depth == 1 && which == K_DUR) dur_at = i;
                else if (depth == 2 && in_args && which2) corr_at = i;
                which = K_OTHER;
                which2 = 0;
                /* a literal ends at structure too: "1{" is a number and an object, as the
                   text reader's walk (trace_json.skip_value) reads it */
                while (i + 1 < n && b[i + 1] != ',' && b[i + 1] != '}' && b[i + 1] != ']' &&
                       b[i + 1] != '{' && b[i + 1] != '[' && b[i + 1] != ' ' &&
                       b[i + 1] != '\n' && b[i + 1] != '"')
                    i++;
            }
            i++;
        }
        if (!complete) break; /* pos stays at the object's start: more bytes needed */
        objects++;
        pos = i;
        if (i - start > max_bytes) { /* never decoded: the reader notes it, as in Python */
            if (big_at < 0) big_at = start;
            big++;
            prev_kept = 0;
            continue;
        }
        int sure = valid_json(b, start, i); /* else the decoder reads it, and says why not */
        if (sure && has_cat && has_ph && span_eq(ph, "X", 1) && is_gpu_cat(cat, gpu) && ts_at >= 0 &&
            dur_at >= 0 && corr_at >= 0) {
            double t, d;
            long long cr;
            if (number_at(b + ts_at, &t, 0, NULL) && number_at(b + dur_at, &d, 0, NULL) &&
                number_at(b + corr_at, NULL, 1, &cr)) {
                if (!push_i(&corr, cr) || !push_f(&ts, t) || !push_f(&dur, d)) oom = 1;
                prev_kept = 0;
                continue;
            }
        }
        if (sure && !keep_event(cat, has_cat, name, has_name, drop, filtered)) {
            prev_kept = 0;
        } else if (prev_kept) {
            ranges.v[ranges.n - 2] = (long long)i;
            ranges.v[ranges.n - 1] += 1;
        } else {
            prev_kept = 1;
            if (!push_i(&ranges, start) || !push_i(&ranges, i) || !push_i(&ranges, 1)) oom = 1;
        }
    }
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (!oom) {
        result = Py_BuildValue(
            "(y#nin(y#y#y#)nn)", ranges.v ? (const char *)ranges.v : "", (Py_ssize_t)(sizeof(long long) * (size_t)ranges.n),
            pos, status, objects, corr.v ? (const char *)corr.v : "", (Py_ssize_t)(sizeof(long long) * (size_t)corr.n),
            ts.v ? (const char *)ts.v : "", (Py_ssize_t)(sizeof(double) * (size_t)ts.n), dur.v ? (const char *)dur.v : "",
            (Py_ssize_t)(sizeof(double) * (size_t)dur.n), big, big_at);
    } else {
        PyErr_NoMemory();
    }
    PyMem_Free(ranges.v);
    PyMem_Free(corr.v);
    PyMem_Free(ts.v);
    PyMem_Free(dur.v);
    return result;
}

static PyObject *skip(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    int depth, in_string;
    if (!PyArg_ParseTuple(args, "y*nii", &view, &pos, &depth, &in_string)) return NULL;
    const char *b = (const char *)view.buf;
    Py_ssize_t n = view.len;
    int done = 0;
    while (pos < n) {
        char c = b[pos];
        if (in_string) {
            if (c == '\\') {
                if (pos + 1 >= n) break; /* the escaped byte is in the next block */
                pos += 2;
                continue;
            }
            if (c == '"') {
                in_string = 0;
                if (depth == 0) {
                    pos++;
                    done = 1;
                    break;
                }
            }
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
            if (depth <= 0) {
                pos++;
                done = 1;
                break;
            }
        }
        pos++;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(niii)", pos, depth, in_string, done);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Byte ranges of the events to decode in a trace event array."},
    {"skip", skip, METH_VARARGS, "Walk past one JSON value, resumable across blocks."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tracescan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tracescan(void) { return PyModule_Create(&module); }
