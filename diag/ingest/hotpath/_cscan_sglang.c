/* SGLang pieces of the compiled scanner: the header, machinery for every SGLang line (the
 * lines themselves are declared in diag/lines/periodic.py and run by _cscan_prog.c). */
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
