/* The op-table interpreter of the compiled scanner: a line shape declared once in
 * diag/lines/periodic.py (its op table: LineSpec.program of diag/lines/spec.py) is
 * matched here, with no knowledge of any particular line. The machinery stays C: the engine's header (cs_sg_header /
 * cs_vl_header), numbers (cs_int15, cs_num), the tail (cs_end).
 *
 * Ops (int32; opcodes as linespec.py's OP_*):
 *   LIT off len | ONEOF n (off len)*n | INT col | BOOL col | NUM col signed | UPPER col
 *   OPT ncommit len body[len] | ALT n (ncommit len body[len])*n | TAIL flags
 *   FIND required len body[len] | QUOTED col | ID col | SKIP | BOUND | DOTID col | PAD
 * col -1: read, not kept. A group decides by its first `ncommit` ops: failing there skips
 * it (OPT) or tries the next branch (ALT); failing later rejects the line, so the C form
 * accepts a subset of what the derived regexes accept, with the same fields. FIND searches
 * its body (a LIT first) at each occurrence of that literal ahead, leftmost match wins, the
 * position stays (re.search in the message); QUOTED reads [^']+ (ASCII, else the line stays
 * per line); ID reads [A-Za-z0-9_-]{1,256}, DOTID [A-Za-z0-9_.-]{1,256}; inside a FIND body
 * only: SKIP is .*? (the rest of the body at the leftmost place from here where it matches,
 * found by cs_find of the literal that follows), BOUND an ASCII word boundary; PAD skips [ \t]* (a table cell's blanks); TAIL flags: 1 a trailing "," may precede the end, 2 free text up to the end,
 * as far as plain. An int of 16+ digits rejects the line (the per-line path's note).
 */
#define _GNU_SOURCE
#include "_cscan.h"

enum {
    OP_LIT = 1,
    OP_ONEOF,
    OP_INT,
    OP_BOOL,
    OP_NUM,
    OP_UPPER,
    OP_OPT,
    OP_ALT,
    OP_TAIL,
    OP_FIND,
    OP_QUOTED,
    OP_ID,
    OP_SKIP,
    OP_BOUND,
    OP_DOTID,
    OP_PAD
};
#define REJECT (-2) /* run(): the line stays per line, whatever group it is in */

static inline int is_word(uint8_t c) {
    return cs_isdigit(c) || (unsigned)((c | 0x20) - 'a') < 26u || c == '_';
}

/* how many int32 words the op at o takes, or -1 when it does not fit [o, end) */
static int64_t op_size(const int32_t *o, const int32_t *end) {
    int64_t left = end - o;
    if (left < 1)
        return -1;
    switch (o[0]) {
    case OP_LIT:
        return left >= 3 ? 3 : -1;
    case OP_ONEOF:
        if (left < 2 || o[1] < 1 || o[1] > 64 || left < 2 + 2 * (int64_t)o[1])
            return -1;
        return 2 + 2 * (int64_t)o[1];
    case OP_INT:
    case OP_BOOL:
    case OP_UPPER:
    case OP_QUOTED:
    case OP_ID:
    case OP_DOTID:
    case OP_TAIL:
        return left >= 2 ? 2 : -1;
    case OP_SKIP:
    case OP_BOUND:
    case OP_PAD:
        return 1;
    case OP_NUM:
        return left >= 3 ? 3 : -1;
    case OP_OPT:
    case OP_FIND:
        if (left < 3 || o[2] < 0 || left < 3 + (int64_t)o[2])
            return -1;
        return 3 + (int64_t)o[2];
    case OP_ALT: {
        if (left < 2 || o[1] < 1)
            return -1;
        const int32_t *b = o + 2;
        for (int i = 0; i < o[1]; i++) {
            if (end - b < 2 || b[1] < 0 || end - b - 2 < b[1])
                return -1;
            b += 2 + b[1];
        }
        return b - o;
    }
    default:
        return -1;
    }
}

static int check_lit(const Prog *pg, int32_t off, int32_t len) {
    return off >= 0 && len >= 1 && (size_t)off + (size_t)len <= pg->nlits;
}

/* the LIT a SKIP at o jumps to (after BOUNDs), or NULL */
static const int32_t *skip_lit(const int32_t *o, const int32_t *end) {
    for (o++; o < end && o[0] == OP_BOUND; o++)
        ;
    return end - o >= 3 && o[0] == OP_LIT ? o : NULL;
}

/* every op well formed: sizes, literal spans, columns inside the row; in_find: inside a
 * FIND body, after its first literal (SKIP and BOUND read p[-1]: never before the line) */
static int check(const Prog *pg, const int32_t *o, const int32_t *end, int depth,
                 int in_find) {
    if (depth > 16)
        return 0;
    while (o < end) {
        int64_t n = op_size(o, end);
        if (n < 0)
            return 0;
        switch (o[0]) {
        case OP_LIT:
            if (!check_lit(pg, o[1], o[2]))
                return 0;
            break;
        case OP_ONEOF:
            for (int i = 0; i < o[1]; i++)
                if (!check_lit(pg, o[2 + 2 * i], o[3 + 2 * i]))
                    return 0;
            break;
        case OP_INT:
        case OP_BOOL:
            if (o[1] < -1 || o[1] >= pg->ni)
                return 0;
            break;
        case OP_NUM:
            if (o[1] < -1 || o[1] >= pg->nf || (o[1] == 0 && pg->header == CS_HDR_SGLANG))
                return 0; /* float 0 of an SGLang row is the header's fraction of a second */
            break;
        case OP_UPPER:
        case OP_QUOTED:
        case OP_ID:
        case OP_DOTID:
            if (o[1] < -1 || o[1] > 0 || (o[1] == 0 && !pg->has_str))
                return 0;
            break;
        case OP_OPT:
            if (o[1] < 1 || !check(pg, o + 3, o + n, depth + 1, in_find))
                return 0;
            break;
        case OP_ALT: {
            const int32_t *b = o + 2;
            for (int i = 0; i < o[1]; i++) {
                if (b[0] < 1 || !check(pg, b + 2, b + 2 + b[1], depth + 1, in_find))
                    return 0;
                b += 2 + b[1];
            }
            break;
        }
        case OP_FIND: /* its body: a literal first (what cs_find looks for) */
            if ((o[1] != 0 && o[1] != 1) || o[2] < 3 || o[3] != OP_LIT ||
                !check_lit(pg, o[4], o[5]) || !check(pg, o + 6, o + n, depth + 1, 1))
                return 0;
            break;
        case OP_SKIP:
            if (!in_find || skip_lit(o, end) == NULL)
                return 0;
            break;
        case OP_BOUND:
            if (!in_find)
                return 0;
            break;
        case OP_PAD:
            break;
        case OP_TAIL:
            if (o[1] < 0 || o[1] > 3)
                return 0;
            break;
        default:
            return 0;
        }
        o += n;
    }
    return 1;
}

int cs_prog_check(const Prog *pg) {
    if (pg->header != CS_HDR_SGLANG && pg->header != CS_HDR_VLLM)
        return 0;
    if (pg->ni < 0 || pg->ni > CS_MAXI || pg->nf < 0 || pg->nf > CS_MAXF)
        return 0;
    if (pg->header == CS_HDR_SGLANG && pg->nf < 1)
        return 0;
    return check(pg, pg->ops, pg->ops + pg->nops, 0, 0);
}

/* the fields a failed FIND try may have set, put back */
typedef struct {
    int64_t iv[CS_MAXI];
    uint8_t ivd[CS_MAXI];
    double fv[CS_MAXF];
    uint8_t fvd[CS_MAXF];
    cptr str;
    int64_t strn;
} Fields;

static void fields_save(Fields *f, const Row *r) {
    memcpy(f->iv, r->iv, sizeof f->iv);
    memcpy(f->ivd, r->ivd, sizeof f->ivd);
    memcpy(f->fv, r->fv, sizeof f->fv);
    memcpy(f->fvd, r->fvd, sizeof f->fvd);
    f->str = r->str;
    f->strn = r->strn;
}

static void fields_restore(const Fields *f, Row *r) {
    memcpy(r->iv, f->iv, sizeof f->iv);
    memcpy(r->ivd, f->ivd, sizeof f->ivd);
    memcpy(r->fv, f->fv, sizeof f->fv);
    memcpy(r->fvd, f->fvd, sizeof f->fvd);
    r->str = f->str;
    r->strn = f->strn;
}

/* 1 matched (p advanced), 0 failed within the first ncommit ops, -1 failed after,
 * REJECT the line cannot be read in bulk */
static int run(const Prog *pg, const int32_t *o, const int32_t *end, cptr *pp, cptr e, Row *r,
               int ncommit) {
    cptr p = *pp;
    const uint8_t *lits = pg->lits;
    int k = 0;
    while (o < end) {
        int ok = 0;
        int64_t n = op_size(o, end);
        switch (o[0]) {
        case OP_LIT:
            ok = cs_lit(&p, e, (const char *)lits + o[1], (size_t)o[2]);
            break;
        case OP_ONEOF:
            for (int i = 0; i < o[1] && !ok; i++)
                ok = cs_lit(&p, e, (const char *)lits + o[2 + 2 * i], (size_t)o[3 + 2 * i]);
            break;
        case OP_INT:
        case OP_BOOL: {
            int64_t v;
            ok = o[0] == OP_INT ? cs_int15(&p, e, &v) : cs_bool(&p, e, &v);
            if (!ok && o[0] == OP_INT && p < e && cs_isdigit(*p))
                return REJECT; /* 16+ digits: past the int's range */
            if (ok && o[1] >= 0) {
                r->iv[o[1]] = v;
                r->ivd[o[1]] = 1;
            }
            break;
        }
        case OP_NUM: {
            double v;
            ok = cs_num(&p, e, o[2], &v);
            if (ok && o[1] >= 0) {
                r->fv[o[1]] = v;
                r->fvd[o[1]] = 1;
            }
            break;
        }
        case OP_UPPER: {
            cptr m = p;
            while (p < e && ((unsigned)(*p - 'A') < 26u || *p == '_'))
                p++;
            ok = p > m;
            if (ok && o[1] >= 0) {
                r->str = m;
                r->strn = p - m;
            }
            break;
        }
        case OP_QUOTED: {
            cptr m = p;
            while (p < e && *p != '\'') {
                if (*p >= 0x80)
                    return REJECT; /* decoded with replacement per line */
                p++;
            }
            ok = p > m && p < e;
            if (ok && o[1] >= 0) {
                r->str = m;
                r->strn = p - m;
            }
            break;
        }
        case OP_ID:
        case OP_DOTID: {
            cptr m = p;
            int dot = o[0] == OP_DOTID;
            while (p < e && p - m <= 256 && (is_word(*p) || *p == '-' || (dot && *p == '.')))
                p++;
            ok = p > m && p - m <= 256;
            if (ok && o[1] >= 0) {
                r->str = m;
                r->strn = p - m;
            }
            break;
        }
        case OP_SKIP: { /* the rest of this body, leftmost, at an occurrence of its literal */
            const int32_t *lit = skip_lit(o, end);
            for (cptr q = p;;) {
                cptr hit = cs_find(q, e, (const char *)lits + lit[1], (size_t)lit[2]);
                if (hit == NULL)
                    break;
                cptr x = hit;
                int g = run(pg, o + n, end, &x, e, r, 0);
                if (g == REJECT)
                    return REJECT;
                if (g > 0) {
                    *pp = x;
                    return 1;
                }
                q = hit + 1;
            }
            break;
        }
        case OP_PAD:
            while (p < e && (*p == ' ' || *p == '\t'))
                p++;
            ok = 1;
            break;
        case OP_BOUND: /* \b: p > the line start inside a FIND (check) */
            ok = is_word(p[-1]) != (p < e && is_word(*p));
            break;
        case OP_FIND: {
            const int32_t *body = o + 3;
            const char *lit = (const char *)lits + body[1];
            size_t ln = (size_t)body[2];
            Fields saved;
            fields_save(&saved, r);
            for (cptr q = p;;) {
                cptr hit = cs_find(q, e, lit, ln);
                if (hit == NULL)
                    break;
                cptr x = hit;
                int g = run(pg, body, o + n, &x, e, r, 1);
                if (g == REJECT)
                    return REJECT;
                if (g > 0) {
                    ok = 1;
                    break;
                }
                fields_restore(&saved, r);
                q = hit + 1;
            }
            if (!ok && o[1])
                return REJECT; /* required: the per-line path reads it as missing */
            ok = 1;
            break;
        }
        case OP_OPT: {
            cptr q = p;
            int g = run(pg, o + 3, o + n, &q, e, r, o[1]);
            if (g == REJECT)
                return REJECT;
            if (g < 0)
                return -1;
            if (g > 0)
                p = q;
            ok = 1;
            break;
        }
        case OP_ALT: {
            const int32_t *b = o + 2;
            for (int i = 0; i < o[1]; i++) {
                if (!ok) {
                    cptr q = p;
                    int g = run(pg, b + 2, b + 2 + b[1], &q, e, r, b[0]);
                    if (g == REJECT)
                        return REJECT;
                    if (g < 0)
                        return -1;
                    if (g > 0) {
                        p = q;
                        ok = 1;
                    }
                }
                b += 2 + b[1];
            }
            break;
        }
        case OP_TAIL: {
            cptr q = p;
            if ((o[1] & 1) && q < e && *q == ',')
                q++;
            ok = o[1] & 2 ? cs_plain_rest(q, e) : cs_end(q, e);
            if (ok)
                p = e;
            break;
        }
        default:
            return -1;
        }
        if (!ok)
            return k < ncommit ? 0 : -1;
        k++;
        o += n;
    }
    *pp = p;
    return 1;
}

int cs_prog_match(const Prog *pg, cptr s, cptr e, Row *r, const LitSet *excl) {
    cptr p = s;
    int ok = pg->header == CS_HDR_SGLANG ? cs_sg_header(&p, e, r) : cs_vl_header(&p, e, r);
    if (!ok)
        return 0;
    if (!(run(pg, pg->ops, pg->ops + pg->nops, &p, e, r, 0) > 0 && p == e))
        return 0;
    return excl == NULL || !cs_litset_any(excl, s, e);
}
