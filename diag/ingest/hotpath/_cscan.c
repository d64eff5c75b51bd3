/* diag.ingest.hotpath._cscan: the compiled scanner of the hot path.
 *
 *   program(header, ops, lits, n ints, n floats, has str) -> capsule: a declared line
 *       (diag/lines/periodic.py) for scan, interpreted by _cscan_prog.c.
 *   scan(program, block, offsets, idx, excl, rows, ints, ivalid, floats, fvalid, key1, key2,
 *        stroff) -> (count, keys1, keys2, strdata)
 *       matches the candidate lines ``idx`` of one kind; the accepted ones are written
 *       compacted (row r < count): line index, int/float columns (column c at [c*m, (c+1)*m),
 *       m = len(idx)) with validity, the header key codes (the distinct key bytes come back
 *       in code order), the request id bytes (strdata, int32 offsets in stroff).
 *   locate(block, heads, head_kind) -> (offsets, kind_of): the lines and the locator.
 *   litset(literals) -> capsule;  anchor_lines(block, offsets, idx, litset, out) -> None
 *       out[i] = 1 when line idx[i] contains any literal of the set (the per-line
 *       prefilter's choice among the lines not consumed).
 *
 * The loops run without the GIL. Python allocates every output (native.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <locale.h>
#include <stdlib.h>

#include "_cscan.h"

/* ---------------------------------------------------------------- numbers */

static locale_t c_locale;

int cs_to_double(cptr s, size_t n, double *out) {
    /* Clinger's fast path: an exact integer mantissa < 2^53 divided by an exact power of
     * ten <= 1e22 is one correctly rounded IEEE operation, so it equals float(text). */
    static const double p10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    size_t i = 0;
    int neg = 0, frac = -1, digits = 0;
    uint64_t m = 0;
    if (i < n && s[i] == '-') {
        neg = 1;
        i++;
    }
    for (; i < n; i++) {
        uint8_t c = s[i];
        if (c == '.') {
            frac = 0;
            continue;
        }
        if (m || c != '0')
            digits++;
        m = m * 10 + (uint64_t)(c - '0');
        if (frac >= 0)
            frac++;
        if (digits > 15)
            break;
    }
    if (digits <= 15 && frac <= 22) {
        double d = (double)m;
        if (frac > 0)
            d /= p10[frac];
        *out = neg ? -d : d;
        return 1;
    }
    /* the rare long number: the C library, in the "C" numeric locale */
    char buf[80];
    if (n >= sizeof buf || c_locale == (locale_t)0)
        return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    *out = strtod_l(buf, NULL, c_locale);
    return 1;
}

/* ---------------------------------------------------------------- literal sets */

/* a plain request-line body (SGLang's and vLLM's request lines: the rule of kinds.py's
 * _PLAIN_BODY): no byte split_logical/peel would treat (control chars but \t,
 * DEL, ^; a "<" right after a digit: normalize.lines._TQDM_TAIL, the only use of "<" there,
 * needs "dd:dd<", so a "<" after anything else, as in chat templates, stays), then \r?\n?$.
 * Compares only, no table and no early exit, so the compiler vectorises the loop (16-32 bytes
 * a step: ~10x the table loop on 1-2.5 KB request lines) */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
int cs_plain_rest(cptr p, cptr e) {
    uint8_t bad = 0;
    if (p < e && e[-1] == '\n')
        e--;
    if (p < e && e[-1] == '\r')
        e--;
    if (p >= e)
        return 1;
    bad |= (uint8_t)((p[0] < 0x20 && p[0] != '\t') | (p[0] == 0x7f) | (p[0] == '^'));
    const size_t n = (size_t)(e - p);
    for (size_t i = 1; i < n; i++) {
        const uint8_t c = p[i], prev = p[i - 1];
        bad |= (uint8_t)((c < 0x20) & (c != '\t')) | (uint8_t)(c == 0x7f) | (uint8_t)(c == '^') |
               (uint8_t)((c == '<') & ((uint8_t)(prev - '0') < 10u));
    }
    return !bad;
}

int cs_litset_any(const LitSet *ls, cptr s, cptr e) {
    for (int k = 0; k < ls->nshort; k++)
        if (cs_find(s, e, (const char *)ls->slit[k], ls->slen[k]) != NULL)
            return 1;
    if (ls->n == 0 || e - s < 4)
        return 0;
    const cptr last = e - 4; /* the last position with 4 bytes */
    for (cptr c = s; c <= last; c += 16) {
        const cptr ce = last - c > 15 ? c + 15 : last;
        uint8_t any = 0;
        for (cptr q = c; q <= ce; q++)
            any |= ls->head[cs_hash4(q)];
        if (!any)
            continue;
        for (cptr q = c; q <= ce; q++)
            for (int k = ls->head[cs_hash4(q)]; k != 0; k = ls->next[k - 1]) {
                uint32_t w;
                memcpy(&w, q, 4);
                if (w != ls->key[k - 1] || q - s < ls->off[k - 1])
                    continue;
                const cptr at = q - ls->off[k - 1];
                const size_t n = ls->len[k - 1];
                if ((size_t)(e - at) >= n && memcmp(at, ls->lit[k - 1], n) == 0)
                    return 1;
            }
    }
    return 0;
}

/* how common a byte is in text (0 most): space, then English letters by frequency, either
 * case; digits and punctuation rarest. Only picks which window of a literal is indexed. */
static int byte_rank(uint8_t b) {
    static const char order[] = " etaoinshrdlcumwfgypbvkjxqz";
    if (b >= 'A' && b <= 'Z')
        b = (uint8_t)(b - 'A' + 'a');
    const char *at = memchr(order, b, sizeof order - 1);
    return at != NULL ? (int)(at - order) : (b >= '0' && b <= '9' ? 28 : 32);
}

/* the offset of a literal's rarest 4-byte window (the first of equals) */
static int rarest_window(const uint8_t *lit, size_t len) {
    int best = 0, best_score = -1;
    for (size_t o = 0; o + 4 <= len; o++) {
        int score = 0;
        for (int j = 0; j < 4; j++)
            score += byte_rank(lit[o + (size_t)j]);
        if (score > best_score) {
            best_score = score;
            best = (int)o;
        }
    }
    return best;
}

static void litset_free(PyObject *cap) {
    PyMem_Free(PyCapsule_GetPointer(cap, "graphdiag.litset"));
}

/* litset(literals: sequence of bytes, each >= 2 bytes) -> capsule */
static PyObject *py_litset(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *seq = PySequence_Fast(arg, "literals must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), total = 0;
    if (n > 255) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "at most 255 literals");
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) < 2 || PyBytes_GET_SIZE(b) > 65535) {
            Py_DECREF(seq);
            return PyErr_Format(PyExc_ValueError, "literals must be bytes of 2..65535");
        }
        total += PyBytes_GET_SIZE(b) + 2;
    }
    LitSet *ls = PyMem_Calloc(1, sizeof(LitSet) + (size_t)total);
    if (ls == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    /* each literal stored as 2 length bytes + its bytes */
    uint8_t *w = ls->store;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t len = PyBytes_GET_SIZE(b);
        w[0] = (uint8_t)(len >> 8);
        w[1] = (uint8_t)len;
        memcpy(w + 2, PyBytes_AS_STRING(b), (size_t)len);
        if (len < 4) {
            ls->slit[ls->nshort] = w + 2;
            ls->slen[ls->nshort++] = (uint16_t)len;
        } else {
            int k = ls->n++;
            int off = rarest_window(w + 2, (size_t)len);
            unsigned hh = cs_hash4(w + 2 + off);
            ls->lit[k] = w + 2;
            ls->len[k] = (uint16_t)len;
            ls->off[k] = (uint16_t)off;
            memcpy(&ls->key[k], w + 2 + off, 4);
            ls->next[k] = ls->head[hh];
            ls->head[hh] = (uint8_t)(k + 1);
        }
        w += len + 2;
    }
    Py_DECREF(seq);
    PyObject *cap = PyCapsule_New(ls, "graphdiag.litset", litset_free);
    if (cap == NULL)
        PyMem_Free(ls);
    return cap;
}

/* ---------------------------------------------------------------- header keys */

typedef struct {
    char *arena;
    size_t used, cap;
    uint32_t *slot; /* 1 + key number, 0 empty */
    size_t nslot;
    size_t *off; /* per key: offset in arena (length prefix int32 before it) */
    int32_t nkeys, capkeys;
} KeyTab;

static uint32_t fnv1a(const char *s, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static int keytab_init(KeyTab *t) {
    memset(t, 0, sizeof *t);
    t->nslot = 1024;
    t->slot = calloc(t->nslot, sizeof *t->slot);
    return t->slot != NULL;
}

static void keytab_free(KeyTab *t) {
    free(t->arena);
    free(t->slot);
    free(t->off);
}

static const char *key_at(const KeyTab *t, int32_t k, int *n) {
    const char *p = t->arena + t->off[k];
    memcpy(n, p - sizeof(int), sizeof(int));
    return p;
}

/* the code of key s[0:n], added when new; -1 when out of memory */
static int32_t keytab_code(KeyTab *t, const char *s, int n) {
    uint32_t h = fnv1a(s, n);
    size_t mask = t->nslot - 1, i = h & mask;
    for (;; i = (i + 1) & mask) {
        uint32_t v = t->slot[i];
        if (v == 0)
            break;
        int kn;
        const char *k = key_at(t, (int32_t)(v - 1), &kn);
        if (kn == n && memcmp(k, s, (size_t)n) == 0)
            return (int32_t)(v - 1);
    }
    if (t->nkeys == t->capkeys) {
        int32_t c = t->capkeys ? t->capkeys * 2 : 256;
        size_t *o = realloc(t->off, (size_t)c * sizeof *o);
        if (o == NULL)
            return -1;
        t->off = o;
        t->capkeys = c;
    }
    if (t->used + (size_t)n + sizeof(int) > t->cap) {
        size_t c = t->cap ? t->cap * 2 : 8192;
        while (c < t->used + (size_t)n + sizeof(int))
            c *= 2;
        char *a = realloc(t->arena, c);
        if (a == NULL)
            return -1;
        t->arena = a;
        t->cap = c;
    }
    memcpy(t->arena + t->used, &n, sizeof(int));
    memcpy(t->arena + t->used + sizeof(int), s, (size_t)n);
    int32_t code = t->nkeys++;
    t->off[code] = t->used + sizeof(int);
    t->used += (size_t)n + sizeof(int);
    t->slot[i] = (uint32_t)code + 1;
    if ((size_t)t->nkeys * 2 > t->nslot) { /* grow and rehash */
        size_t ns = t->nslot * 2;
        uint32_t *sl = calloc(ns, sizeof *sl);
        if (sl == NULL)
            return -1;
        for (int32_t k = 0; k < t->nkeys; k++) {
            int kn;
            const char *ks = key_at(t, k, &kn);
            size_t j = fnv1a(ks, kn) & (ns - 1);
            while (sl[j])
                j = (j + 1) & (ns - 1);
            sl[j] = (uint32_t)k + 1;
        }
        free(t->slot);
        t->slot = sl;
        t->nslot = ns;
    }
    return code;
}

static PyObject *keytab_list(const KeyTab *t) {
    PyObject *out = PyList_New(t->nkeys);
    if (out == NULL)
        return NULL;
    for (int32_t k = 0; k < t->nkeys; k++) {
        int n;
        const char *s = key_at(t, k, &n);
        PyObject *b = PyBytes_FromStringAndSize(s, n);
        if (b == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, b);
    }
    return out;
}

static int need(Py_buffer *b, Py_ssize_t items, Py_ssize_t size, const char *what) {
    if (b->len < items * size) {
        PyErr_Format(PyExc_ValueError, "%s: buffer too small", what);
        return 0;
    }
    return 1;
}

static void program_free(PyObject *cap) {
    PyMem_Free(PyCapsule_GetPointer(cap, "graphdiag.program"));
}

/* program(header, ops, lits, n ints, n floats, has str) -> capsule: a declared line's op
 * table (diag/lines/periodic.py), checked whole before any line is read */
static PyObject *py_program(PyObject *self, PyObject *args) {
    (void)self;
    int header, ni, nf, has_str;
    Py_buffer ops, lits;
    if (!PyArg_ParseTuple(args, "iy*y*iii", &header, &ops, &lits, &ni, &nf, &has_str))
        return NULL;
    PyObject *cap = NULL;
    size_t size = sizeof(Prog) + (size_t)ops.len + (size_t)lits.len + 8;
    Prog *pg = ops.len % 4 || ops.len > (1 << 20) || lits.len > (1 << 20) ? NULL : PyMem_Calloc(1, size);
    if (pg == NULL) {
        PyErr_SetString(PyExc_ValueError, "bad program size");
        goto done;
    }
    pg->header = header;
    pg->ni = ni;
    pg->nf = nf;
    pg->has_str = has_str != 0;
    pg->nops = ops.len / 4;
    pg->ops = (int32_t *)(pg + 1);
    memcpy(pg->ops, ops.buf, (size_t)ops.len);
    pg->lits = (uint8_t *)pg->ops + ops.len;
    pg->nlits = (size_t)lits.len;
    memcpy(pg->lits, lits.buf, (size_t)lits.len);
    if (!cs_prog_check(pg)) {
        PyMem_Free(pg);
        PyErr_SetString(PyExc_ValueError, "malformed program");
        goto done;
    }
    cap = PyCapsule_New(pg, "graphdiag.program", program_free);
    if (cap == NULL)
        PyMem_Free(pg);
done:
    PyBuffer_Release(&ops);
    PyBuffer_Release(&lits);
    return cap;
}

static PyObject *py_scan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *kind_obj;
    PyObject *excl_obj;
    Py_buffer block, offs, idxb, rows, ints, ival, flts, fval, key1, key2, stroff;
    if (!PyArg_ParseTuple(args, "Oy*y*y*Ow*w*w*w*w*w*w*w*", &kind_obj, &block, &offs, &idxb,
                          &excl_obj, &rows, &ints, &ival, &flts, &fval, &key1, &key2, &stroff))
        return NULL;
    PyObject *result = NULL;
    Py_buffer *all[] = {&block, &offs, &idxb, &rows, &ints, &ival, &flts, &fval, &key1, &key2,
                        &stroff};
    const LitSet *excl = NULL;
    const Prog *prog = NULL;
    Py_ssize_t m = idxb.len / 8, nlines = offs.len / 8 - 1;
    if ((prog = PyCapsule_GetPointer(kind_obj, "graphdiag.program")) == NULL)
        goto done;
    if (excl_obj != Py_None &&
        (excl = PyCapsule_GetPointer(excl_obj, "graphdiag.litset")) == NULL)
        goto done;
    if (!need(&rows, m, 8, "rows") || !need(&ints, m * prog->ni, 8, "ints") ||
        !need(&ival, m * prog->ni, 1, "ivalid") || !need(&flts, m * prog->nf, 8, "floats") ||
        !need(&fval, m * prog->nf, 1, "fvalid") || !need(&key1, m, 4, "key1") ||
        !need(&key2, m, 4, "key2") || !need(&stroff, m + 1, 4, "stroff"))
        goto done;
    const uint8_t *buf = block.buf;
    const int64_t *off = offs.buf, *idx = idxb.buf;
    int64_t *o_rows = rows.buf, *o_int = ints.buf;
    uint8_t *o_ival = ival.buf, *o_fval = fval.buf;
    double *o_flt = flts.buf;
    int32_t *o_k1 = key1.buf, *o_k2 = key2.buf, *o_so = stroff.buf;
    KeyTab kt1, kt2;
    char *sdata = NULL;
    size_t sused = 0, scap = 0;
    int failed = 0, bad_index = 0;
    Py_ssize_t count = 0;
    if (!keytab_init(&kt1) || !keytab_init(&kt2)) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    Row r;
    o_so[0] = 0;
    for (Py_ssize_t j = 0; j < m && !failed; j++) {
        int64_t i = idx[j];
        if (i < 0 || i >= nlines || off[i] < 0 || off[i] > off[i + 1] ||
            off[i + 1] > (int64_t)block.len) {
            bad_index = 1;
            break;
        }
        memset(r.ivd, 0, sizeof r.ivd);
        memset(r.fvd, 0, sizeof r.fvd);
        r.k1n = r.k2n = 0;
        r.str = NULL;
        r.strn = 0;
        if (!cs_prog_match(prog, buf + off[i], buf + off[i + 1], &r, excl))
            continue;
        int32_t c1 = keytab_code(&kt1, r.k1, r.k1n);
        int32_t c2 = keytab_code(&kt2, r.k2, r.k2n);
        if (c1 < 0 || c2 < 0) {
            failed = 1;
            break;
        }
        if (prog->has_str) {
            if (sused + (size_t)r.strn > (size_t)INT32_MAX) {
                failed = 1;
                break;
            }
            if (sused + (size_t)r.strn > scap) {
                size_t c = scap ? scap * 2 : 65536;
                while (c < sused + (size_t)r.strn)
                    c *= 2;
                char *nd = realloc(sdata, c);
                if (nd == NULL) {
                    failed = 1;
                    break;
                }
                sdata = nd;
                scap = c;
            }
            memcpy(sdata + sused, r.str, (size_t)r.strn);
            sused += (size_t)r.strn;
            o_so[count + 1] = (int32_t)sused;
        }
        o_rows[count] = i;
        for (int c = 0; c < prog->ni; c++) {
            o_int[c * m + count] = r.ivd[c] ? r.iv[c] : 0;
            o_ival[c * m + count] = r.ivd[c];
        }
        for (int c = 0; c < prog->nf; c++) {
            o_flt[c * m + count] = r.fvd[c] ? r.fv[c] : 0.0;
            o_fval[c * m + count] = r.fvd[c];
        }
        o_k1[count] = c1;
        o_k2[count] = c2;
        count++;
    }
    Py_END_ALLOW_THREADS;
    if (bad_index)
        PyErr_SetString(PyExc_IndexError, "line index or offsets out of range");
    else if (failed)
        PyErr_NoMemory();
    else {
        PyObject *k1 = keytab_list(&kt1), *k2 = keytab_list(&kt2);
        PyObject *sd = PyBytes_FromStringAndSize(sdata ? sdata : "", (Py_ssize_t)sused);
        if (k1 && k2 && sd)
            result = Py_BuildValue("(nOOO)", count, k1, k2, sd);
        Py_XDECREF(k1);
        Py_XDECREF(k2);
        Py_XDECREF(sd);
    }
    keytab_free(&kt1);
    keytab_free(&kt2);
    free(sdata);
done:
    for (size_t b = 0; b < sizeof all / sizeof all[0]; b++)
        PyBuffer_Release(all[b]);
    return result;
}

/* anchor_lines(block, offsets, idx, litset, out): out[j] = line idx[j] holds a literal */
static PyObject *py_anchor_lines(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer block, offs, idxb, out;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "y*y*y*Ow*", &block, &offs, &idxb, &cap, &out))
        return NULL;
    PyObject *result = NULL;
    const LitSet *ls = PyCapsule_GetPointer(cap, "graphdiag.litset");
    Py_ssize_t m = idxb.len / 8, nlines = offs.len / 8 - 1;
    int bad = 0;
    if (ls == NULL || !need(&out, m, 1, "out"))
        goto done;
    const uint8_t *buf = block.buf;
    const int64_t *off = offs.buf, *idx = idxb.buf;
    uint8_t *o = out.buf;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t i = idx[j];
        if (i < 0 || i >= nlines || off[i] < 0 || off[i] > off[i + 1] ||
            off[i + 1] > (int64_t)block.len) {
            bad = 1;
            break;
        }
        o[j] = (uint8_t)cs_litset_any(ls, buf + off[i], buf + off[i + 1]);
    }
    Py_END_ALLOW_THREADS;
    if (bad)
        PyErr_SetString(PyExc_IndexError, "line index or offsets out of range");
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&block);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&idxb);
    PyBuffer_Release(&out);
    return result;
}

/* locate(block, heads, head_kind) -> (offsets, kind_of)
 * offsets: int64[n + 1] line starts (line i is block[offsets[i]:offsets[i+1]], its "\n"
 * kept; a last line without one ends the block); kind_of: int8[n], per line the kind whose
 * head (uint32 of heads) is the 4 bytes after the line's first "]" and one blank, -1 none:
 * the numpy locator of extract._msg_words, in one pass. Only a locator: matchers decide. */
static PyObject *py_locate(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer block, heads, hk;
    if (!PyArg_ParseTuple(args, "y*y*y*", &block, &heads, &hk))
        return NULL;
    PyObject *offs = NULL, *kinds = NULL, *result = NULL;
    const uint8_t *u8 = block.buf;
    Py_ssize_t size = block.len, n = 0, nh = heads.len / 4;
    if (hk.len < nh) {
        PyErr_SetString(PyExc_ValueError, "one kind per head");
        goto done;
    }
    for (const uint8_t *p = u8, *e = u8 + size; p < e; n++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(e - p));
        p = nl ? nl + 1 : e;
    }
    offs = PyBytes_FromStringAndSize(NULL, (n + 1) * 8);
    kinds = PyBytes_FromStringAndSize(NULL, n);
    if (offs == NULL || kinds == NULL)
        goto done;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(offs);
    int8_t *k = (int8_t *)PyBytes_AS_STRING(kinds);
    const uint32_t *hw = heads.buf;
    const int8_t *hkind = hk.buf;
    Py_BEGIN_ALLOW_THREADS;
    const uint8_t *p = u8, *e = u8 + size;
    o[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(e - p));
        const uint8_t *end = nl ? nl + 1 : e;
        int8_t kind = -1;
        const uint8_t *rb = size >= 8 ? memchr(p, ']', (size_t)(end - p)) : NULL;
        if (rb != NULL) {
            Py_ssize_t ms = rb - u8 + 1;
            if (ms > size - 1)
                ms = size - 1;
            ms += u8[ms] == ' ';
            if (ms > size - 4)
                ms = size - 4;
            uint32_t w = (uint32_t)u8[ms] | (uint32_t)u8[ms + 1] << 8 |
                         (uint32_t)u8[ms + 2] << 16 | (uint32_t)u8[ms + 3] << 24;
            for (Py_ssize_t h = 0; h < nh; h++)
                if (hw[h] == w) {
                    kind = hkind[h];
                    break;
                }
        }
        k[i] = kind;
        o[i + 1] = end - u8;
        p = end;
    }
    Py_END_ALLOW_THREADS;
    result = PyTuple_Pack(2, offs, kinds);
done:
    Py_XDECREF(offs);
    Py_XDECREF(kinds);
    PyBuffer_Release(&block);
    PyBuffer_Release(&heads);
    PyBuffer_Release(&hk);
    return result;
}

/* count_newlines(buffer) -> int: the b"\n" bytes of a block. Byte compares summed into 16
   8-bit lanes for up to 255 rounds, which the compiler turns into SIMD compare-and-subtract
   (~7 GB/s: twice memchr on ~130-byte log lines, a few times numpy's compare-and-count, and
   nothing allocated) */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
static Py_ssize_t newlines_in(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t count = 0;
    while (n > 0) {
        Py_ssize_t m = n < 255 * 16 ? n : 255 * 16, i = 0;
        unsigned char lanes[16] = {0};
        for (; i + 16 <= m; i += 16)
            for (int j = 0; j < 16; j++)
                lanes[j] += p[i + j] == '\n';
        for (int j = 0; j < 16; j++)
            count += lanes[j];
        for (; i < m; i++)
            count += p[i] == '\n';
        p += m;
        n -= m;
    }
    return count;
}

static PyObject *py_count_newlines(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t count;
    Py_BEGIN_ALLOW_THREADS
    count = newlines_in(view.buf, view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, "Match the candidate lines of one kind (see module doc)."},
    {"litset", py_litset, METH_O, "A literal set for anchor_lines and scan's exclusions."},
    {"anchor_lines", py_anchor_lines, METH_VARARGS, "Which lines hold any literal of a set."},
    {"locate", py_locate, METH_VARARGS, "Line offsets and the located kind of each line."},
    {"count_newlines", py_count_newlines, METH_O, "How many newline bytes a buffer holds."},
    {"program", py_program, METH_VARARGS, "A declared line's op table, checked (see _cscan_prog.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cscan", "The compiled scanner of the hot path.", -1, methods,
};

PyMODINIT_FUNC PyInit__cscan(void) {
    if (c_locale == (locale_t)0)
        c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    return PyModule_Create(&module);
}
