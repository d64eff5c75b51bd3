/* SGLang pieces of the compiled scanner: the header (machinery for every SGLang line,
 * the declared ones included: diag/parsers/periodic.py) and the free-text request lines
 * sglang.receive and .finish of diag/ingest/hotpath/kinds.py. Column layout of those (the
 * order diag/ingest/hotpath/native.py reads):
 *   receive                                  floats ms                 str rid
 *   finish  ints pt ct                       floats ms                 str rid
 */
#define _GNU_SOURCE
#include "_cscan.h"

/* "dddd-dd-dd" at p */
static int sg_date(cptr p, cptr e) {
    static const char shape[] = "dddd-dd-dd";
    if (e - p < 10)
        return 0;
    for (int i = 0; i < 10; i++)
        if (shape[i] == 'd' ? !cs_isdigit(p[i]) : p[i] != (uint8_t)shape[i])
            return 0;
    return 1;
}

/* "dd:dd:dd" at p */
static int sg_time(cptr p, cptr e) {
    if (e - p < 8)
        return 0;
    for (int i = 0; i < 8; i++)
        if ((i == 2 || i == 5) ? p[i] != ':' : !cs_isdigit(p[i]))
            return 0;
    return 1;
}

/* the forms of normalize.prefix.peel_engine_header an SGLang line has, as far as plain:
 *   (PROCESS pid=N[, ip=...]) ?  a ray actor's prefix (PROCESS_HEADER), then one of
 *   [dddd-dd-dd dd:dd:dd(.ms)? RANKS] ?   (SGLANG_HEADER; the date may be missing)
 *   dddd-dd-dd dd:dd:dd(.ms)? LEVEL PID [RANKS file:N] ?   (python logging, _PYLOG; the
 *   RANKS "TP0 " of SGLang's prefix, if any; not behind a process prefix)
 * key1 (ts): "date|time", "" without a date; key2 (rank): the ranks group, 0x1f, the
 * process prefix. float 0 = 0.<ms> of the bracket form (peel adds it; _PYLOG does not) */
int cs_sg_header(cptr *pp, cptr e, Row *r) {
    cptr s = *pp, p = s, date = NULL, time_;
    size_t hn = 0;
    if (p < e && *p == '(') {
        if (!cs_proc_head(&p, e))
            return 0;
        hn = (size_t)(p - s);
    }
    cptr ranks = NULL, ranks_end = NULL;
    if (p < e && *p == '[') {
        p++;
        if (sg_date(p, e) && e - p > 11 && p[10] == ' ') {
            date = p;
            p += 11;
        }
        if (!sg_time(p, e))
            return 0;
        time_ = p;
        p += 8;
        if (p < e && (*p == '.' || *p == ',')) {
            cptr d = ++p;
            int64_t m = 0;
            while (p < e && cs_isdigit(*p) && p - d < 7) {
                m = m * 10 + (*p - '0');
                p++;
            }
            int n = (int)(p - d);
            if (n == 0 || n > 6)
                return 0;
            static const double p10[] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6};
            r->fv[0] = (double)m / p10[n]; /* float("0." + ms): exact operands, one rounding */
            r->fvd[0] = 1;
        }
        ranks = p;
        while (p < e && *p == ' ') {
            p++;
            if (p >= e || (unsigned)(*p - 'A') >= 26u)
                return 0;
            p++;
            while (p < e && ((unsigned)(*p - 'A') < 26u || *p == '_'))
                p++;
            if (p < e && *p == '-')
                p++;
            cptr d = p;
            while (p < e && cs_isdigit(*p))
                p++;
            if (p == d)
                return 0;
        }
        if (p >= e || *p != ']')
            return 0;
        ranks_end = p++;
    } else if (hn == 0 && sg_date(p, e) && e - p > 19 && p[10] == ' ' && sg_time(p + 11, e)) {
        /* (behind a process prefix: per line, where peel keeps that prefix's rank) */
        date = p;
        time_ = p + 11;
        p += 19;
        if (p < e && (*p == '.' || *p == ',')) {
            cptr d = ++p;
            while (p < e && cs_isdigit(*p))
                p++;
            if (p == d)
                return 0;
        }
        if (!(LIT(&p, e, " DEBUG ") || LIT(&p, e, " INFO ") || LIT(&p, e, " WARNING ") ||
              LIT(&p, e, " ERROR ") || LIT(&p, e, " CRITICAL ")))
            return 0;
        cptr d = p;
        while (p < e && cs_isdigit(*p))
            p++;
        if (p == d || !LIT(&p, e, " ["))
            return 0;
        ranks = p; /* ([A-Z][A-Z_]*-?\d+ )*: SGLang's rank prefix before the file */
        for (;;) {
            cptr q = p;
            if (q >= e || (unsigned)(*q - 'A') >= 26u)
                break;
            q++;
            while (q < e && ((unsigned)(*q - 'A') < 26u || *q == '_'))
                q++;
            if (q < e && *q == '-')
                q++;
            cptr d2 = q;
            while (q < e && cs_isdigit(*q))
                q++;
            if (q == d2 || q >= e || *q != ' ')
                break;
            p = q + 1;
        }
        ranks_end = p;
        cptr f = p; /* [^\]\s:]+:\d+\] */
        while (p < e && *p != ']' && *p != ':' && *p != ' ' && *p != '\t' && *p != '\n' &&
               *p != '\r')
            p++;
        if (p == f || !LIT(&p, e, ":"))
            return 0;
        d = p;
        while (p < e && cs_isdigit(*p))
            p++;
        if (p == d || p >= e || *p != ']')
            return 0;
        p++;
    } else
        return 0;
    size_t rn = ranks != NULL ? (size_t)(ranks_end - ranks) : 0;
    if (rn + 1 + hn > CS_KEYMAX)
        return 0;
    if (date != NULL) {
        memcpy(r->k1, date, 10);
        r->k1[10] = '|';
        memcpy(r->k1 + 11, time_, 8);
        r->k1n = 19;
    } else
        r->k1n = 0; /* no date: peel keeps no timestamp */
    if (rn)
        memcpy(r->k2, ranks, rn);
    r->k2[rn] = 0x1f;
    if (hn)
        memcpy(r->k2 + rn + 1, s, hn);
    r->k2n = (int)(rn + 1 + hn);
    if (p < e && *p == ' ')
        p++;
    *pp = p;
    return 1;
}

/* leftmost rid='([^']+)', ASCII only (the per-line path decodes others with replacement) */
static int sg_rid(cptr s, cptr e, Row *r) {
    cptr q = s;
    while (e - q > 6) {
        cptr hit = cs_find(q, e, "rid='", 5);
        if (hit == NULL)
            return 0;
        cptr a = hit + 5, b = a;
        while (b < e && *b != '\'')
            b++;
        if (b >= e)
            return 0; /* no closing quote after this one: none after later ones either */
        if (b > a) {
            for (cptr c = a; c < b; c++)
                if (*c >= 0x80)
                    return 0;
            r->str = a;
            r->strn = b - a;
            return 1;
        }
        q = hit + 1;
    }
    return 0;
}

/* the message start (after the header) in *msg; fields are searched there, never in the
 * header, as the per-line parser searches line.msg */
static int sg_request(cptr s, cptr e, Row *r, const LitSet *excl, const char *what, size_t n,
                      cptr *msg) {
    cptr p = s;
    if (!cs_sg_header(&p, e, r))
        return 0;
    *msg = p;
    if (!cs_lit(&p, e, what, n) || !cs_plain_rest(p, e))
        return 0;
    if (excl != NULL && cs_litset_any(excl, s, e))
        return 0;
    return sg_rid(*msg, e, r);
}

int cs_sg_receive(cptr s, cptr e, Row *r, const LitSet *excl) {
    cptr msg;
    return sg_request(s, e, r, excl, "Receive: ", 9, &msg);
}

int cs_sg_finish(cptr s, cptr e, Row *r, const LitSet *excl) {
    size_t n;
    cptr d, msg;
    if (!sg_request(s, e, r, excl, "Finish: ", 8, &msg))
        return 0;
    s = msg;
    d = cs_find_digits(s, e, "'prompt_tokens': ", 17, &n);
    if (n > 15)
        return 0;
    if (d != NULL) {
        int64_t v = 0;
        for (size_t i = 0; i < n; i++)
            v = v * 10 + (d[i] - '0');
        r->iv[0] = v;
        r->ivd[0] = 1;
    }
    d = cs_find_digits(s, e, "'completion_tokens': ", 21, &n);
    if (n > 15)
        return 0;
    if (d != NULL) {
        int64_t v = 0;
        for (size_t i = 0; i < n; i++)
            v = v * 10 + (d[i] - '0');
        r->iv[1] = v;
        r->ivd[1] = 1;
    }
    return 1;
}
