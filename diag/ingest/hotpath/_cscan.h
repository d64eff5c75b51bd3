/* The compiled scanner of the hot path: shared pieces of the per-engine line matchers.
 *
 * A matcher reads one line (header included, the "\n" kept) and either rejects it or fills a
 * Row with the same fields the kind's RE2 pattern (+ validate, exclude, extras) captures
 * (diag/ingest/hotpath/kinds.py). It accepts a SUBSET of what RE2 accepts: a rejected line
 * goes to the per-line parsers (slower, same result), an accepted one must give exactly the
 * RE2 path's values. No allocation and no Python object inside: the loops run without the GIL.
 */
#ifndef GRAPHDIAG_CSCAN_H
#define GRAPHDIAG_CSCAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CS_MAXI 8     /* int columns of one kind (ints, bools) */
#define CS_MAXF 8     /* float columns of one kind */
#define CS_KEYMAX 160 /* header key bytes: longer keys reject the line */

typedef const uint8_t *cptr;

/* One line's fields; iv/fv valid flags say null or not. */
typedef struct {
    int64_t iv[CS_MAXI];
    uint8_t ivd[CS_MAXI];
    double fv[CS_MAXF];
    uint8_t fvd[CS_MAXF];
    char k1[CS_KEYMAX]; /* ts key: SGLang "date|time", vLLM "lvl md hms" */
    int k1n;
    char k2[CS_KEYMAX]; /* rank key: SGLang ranks group, vLLM process prefix head ("") */
    int k2n;
    cptr str; /* request id (or vLLM mode) span, NULL for none */
    int64_t strn;
} Row;

/* A set of literals found anywhere in a line, in one pass. Literals of 4+ bytes: each is
 * indexed by one 4-byte window of it (``off`` bytes in: the window whose bytes are rarest in
 * text, by a fixed letter-frequency rank, so that common words such as "stream" or "the "
 * at a literal's head do not make most positions of request text candidates); at every
 * position the hash of the next 4 bytes indexes a byte map (1 + the first literal whose
 * window hashes there, chained by `next`), OR-ed over 16 positions so the common case is a
 * branch-free loop of ~5 instructions a byte; a chunk with a hit is read again, the window's
 * 4 bytes compared before the literal's. With 179 literals in 65536 slots ~1 % of
 * positions of request text are candidates (prefix windows in 16384 slots: 2.8 %, and 54 %
 * of 32-byte chunks read twice). Shorter literals: cs_find. */
#define CS_HBITS 16
typedef struct {
    uint8_t head[1 << CS_HBITS]; /* window hash -> 1 + a literal's index, 0 none */
    uint8_t next[256];           /* literal -> 1 + the next with the same hash, 0 none */
    int n;                       /* literals of 4+ bytes */
    uint16_t len[256];
    uint16_t off[256]; /* where the literal's indexed window starts */
    uint32_t key[256]; /* the window's 4 bytes */
    const uint8_t *lit[256];
    int nshort; /* literals of 2-3 bytes */
    uint16_t slen[256];
    const uint8_t *slit[256];
    uint8_t store[1]; /* literal bytes follow (allocated with the struct) */
} LitSet;

/* the hash of the 4 bytes at p (multiplicative; the top CS_HBITS bits) */
static inline unsigned cs_hash4(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return (uint32_t)(w * 2654435761u) >> (32 - CS_HBITS);
}

/* ---------------------------------------------------------------- small parsers */

static inline int cs_isdigit(uint8_t c) { return (unsigned)(c - '0') < 10u; }

/* the literal at *p: advance past it */
static inline int cs_lit(cptr *p, cptr e, const char *lit, size_t n) {
    if ((size_t)(e - *p) < n || memcmp(*p, lit, n) != 0)
        return 0;
    *p += n;
    return 1;
}
#define LIT(p, e, s) cs_lit((p), (e), (s), sizeof(s) - 1)

/* \d{1,15} not followed by a digit (every use is followed by a non-digit literal) */
static inline int cs_int15(cptr *p, cptr e, int64_t *v) {
    cptr q = *p;
    int64_t x = 0;
    while (q < e && cs_isdigit(*q)) {
        if (q - *p >= 15)
            return 0;
        x = x * 10 + (*q - '0');
        q++;
    }
    if (q == *p)
        return 0;
    *p = q;
    *v = x;
    return 1;
}

/* True|False */
static inline int cs_bool(cptr *p, cptr e, int64_t *v) {
    if (LIT(p, e, "True")) {
        *v = 1;
        return 1;
    }
    if (LIT(p, e, "False")) {
        *v = 0;
        return 1;
    }
    return 0;
}

/* the text of a number (-?\d+(?:\.\d+)?) to double, correctly rounded (as float()) */
int cs_to_double(cptr s, size_t n, double *out);

/* -?\d+(?:\.\d+)? (signed) or \d+(?:\.\d+)? ; a "." not followed by a digit is left */
static inline int cs_num(cptr *p, cptr e, int sign, double *v) {
    cptr q = *p, d;
    if (sign && q < e && *q == '-')
        q++;
    d = q;
    while (q < e && cs_isdigit(*q))
        q++;
    if (q == d)
        return 0;
    if (q + 1 < e && *q == '.' && cs_isdigit(q[1])) {
        q += 2;
        while (q < e && cs_isdigit(*q))
            q++;
    }
    if (!cs_to_double(*p, (size_t)(q - *p), v))
        return 0;
    *p = q;
    return 1;
}

/* [ \t]*\r?\n?$ : trailing blanks, CRLF, the last line without its newline */
static inline int cs_end(cptr p, cptr e) {
    while (p < e && (*p == ' ' || *p == '\t'))
        p++;
    if (p < e && *p == '\r')
        p++;
    if (p < e && *p == '\n')
        p++;
    return p == e;
}

/* (?:cuda|cpu|npu|musa|xpu|device) */
static inline int cs_dev(cptr *p, cptr e) {
    return LIT(p, e, "cuda") || LIT(p, e, "cpu") || LIT(p, e, "npu") || LIT(p, e, "musa") ||
           LIT(p, e, "xpu") || LIT(p, e, "device");
}

/* any literal of the set in [s, e) */
int cs_litset_any(const LitSet *ls, cptr s, cptr e);
int cs_plain_rest(cptr p, cptr e);

/* the leftmost `lit` (n >= 1) in [s, e), or NULL. glibc's memmem builds a shift table on
 * every call (~0.3 us); here memchr (SIMD) hops between the occurrences of one byte of the
 * needle (its "_", else its first punctuation byte: rarer than letters here), then memcmp. */
static inline cptr cs_find(cptr s, cptr e, const char *lit, size_t n) {
    size_t pv = 0;
    const char *us = memchr(lit, '_', n); /* "_" is rarer than quotes in request dicts */
    if (us != NULL)
        pv = (size_t)(us - lit);
    else
        for (size_t i = 0; i < n; i++) {
            uint8_t c = (uint8_t)lit[i];
            if (!(cs_isdigit(c) || (unsigned)((c | 0x20) - 'a') < 26u || c == ' ')) {
                pv = i;
                break;
            }
        }
    if ((size_t)(e - s) < n)
        return NULL;
    cptr last = e - (n - pv); /* the pivot byte of the last possible match */
    for (cptr q = s + pv; q <= last;) {
        cptr hit = memchr(q, lit[pv], (size_t)(last - q) + 1);
        if (hit == NULL)
            return NULL;
        if (memcmp(hit - pv, lit, n) == 0)
            return hit - pv;
        q = hit + 1;
    }
    return NULL;
}

/* leftmost `lit` followed by a digit run: the run (n = 0 when none) */
static inline cptr cs_find_digits(cptr s, cptr e, const char *lit, size_t n, size_t *len) {
    cptr q = s;
    while ((size_t)(e - q) > n) {
        cptr hit = cs_find(q, e, lit, n);
        if (hit == NULL)
            break;
        cptr d = hit + n, x = d;
        while (x < e && cs_isdigit(*x))
            x++;
        if (x > d) {
            *len = (size_t)(x - d);
            return d;
        }
        q = hit + 1;
    }
    *len = 0;
    return NULL;
}

/* ---------------------------------------------------------------- headers (machinery) */
/* the engine's header up to the message: *pp advanced, the row's key1/key2 (and for SGLang
 * float 0, the fraction of a second) filled */
int cs_sg_header(cptr *pp, cptr e, Row *r);
/* \((?:[A-Za-z_]\w*(?: rank=\d+)?|) ?pid=\d+(?:, ip=[^)\n]*)?\)[ \t]* (ASCII only): a process prefix */
int cs_proc_head(cptr *pp, cptr e);
int cs_vl_header(cptr *pp, cptr e, Row *r);

/* ---------------------------------------------------------------- declared lines */
#define CS_HDR_SGLANG 0
#define CS_HDR_VLLM 1

/* one line shape's op table (diag/lines/spec.py LineSpec.program), see _cscan_prog.c */
typedef struct {
    int header;  /* CS_HDR_* */
    int ni, nf;  /* row columns it fills */
    int has_str; /* an UPPER, QUOTED or ID field is kept (r->str) */
    int64_t nops;
    int32_t *ops;
    size_t nlits;
    uint8_t *lits;
} Prog;

int cs_prog_check(const Prog *pg);
/* excl (or NULL): literals a free-text line must not hold (other parsers' triggers) */
int cs_prog_match(const Prog *pg, cptr s, cptr e, Row *r, const LitSet *excl);

#endif
