/* vLLM pieces of the compiled scanner: the header, machinery for every vLLM line (each
 * declared in diag/lines/periodic.py and read by _cscan_prog.c): key1 "LVL MD HMS" (as
 * the RE2 path joins the groups), key2 the process prefix head.
 */
#define _GNU_SOURCE
#include "_cscan.h"

static inline int is_word(uint8_t c) {
    return cs_isdigit(c) || (unsigned)((c | 0x20) - 'a') < 26u || c == '_';
}

/* \((?:[A-Za-z_]\w*(?: rank=\d+)?|) ?pid=\d+(?:, ip=[^)\n]*)?\)[ \t]*  (ASCII only) */
int cs_proc_head(cptr *pp, cptr e) {
    cptr p = *pp + 1;
    if (!(LIT(&p, e, "pid=") || LIT(&p, e, " pid="))) {
        if (p >= e || !((unsigned)((*p | 0x20) - 'a') < 26u || *p == '_'))
            return 0;
        while (p < e && is_word(*p))
            p++;
        if (LIT(&p, e, " rank=")) {
            cptr d = p;
            while (p < e && cs_isdigit(*p))
                p++;
            if (p == d)
                return 0;
        }
        if (!(LIT(&p, e, "pid=") || LIT(&p, e, " pid=")))
            return 0;
    }
    cptr d = p;
    while (p < e && cs_isdigit(*p))
        p++;
    if (p == d)
        return 0;
    if (LIT(&p, e, ", ip=")) {
        while (p < e && *p != ')' && *p != '\n') {
            if (*p >= 0x80)
                return 0; /* the head is decoded per value: keep to ASCII */
            p++;
        }
    }
    if (p >= e || *p != ')')
        return 0;
    p++;
    while (p < e && (*p == ' ' || *p == '\t'))
        p++;
    *pp = p;
    return 1;
}

static int vl_level(cptr *p, cptr e) {
    return LIT(p, e, "DEBUG") || LIT(p, e, "INFO") || LIT(p, e, "WARNING") ||
           LIT(p, e, "WARN") || LIT(p, e, "ERROR") || LIT(p, e, "CRITICAL");
}

static inline int is_blank(uint8_t c) { return c == ' ' || c == '\t'; }

/* the whole header up to the message: key1 "LVL MD HMS", key2 the head */
int cs_vl_header(cptr *pp, cptr e, Row *r) {
    cptr p = *pp, s = *pp, lvl;
    if (p < e && *p == '(') {
        if (!cs_proc_head(&p, e))
            return 0;
        size_t hn = (size_t)(p - s);
        if (hn > CS_KEYMAX)
            return 0;
        memcpy(r->k2, s, hn);
        r->k2n = (int)hn;
    }
    lvl = p;
    if (!vl_level(&p, e) || p >= e || !is_blank(*p))
        return 0;
    size_t ln = (size_t)(p - lvl);
    while (p < e && is_blank(*p))
        p++;
    /* \d\d-\d\d \d\d:\d\d:\d\d */
    static const char shape[] = "dd-dd dd:dd:dd";
    if (e - p < 14)
        return 0;
    for (int i = 0; i < 14; i++) {
        if (shape[i] == 'd') {
            if (!cs_isdigit(p[i]))
                return 0;
        } else if (p[i] != (uint8_t)shape[i])
            return 0;
    }
    memcpy(r->k1, lvl, ln);
    r->k1[ln] = ' ';
    memcpy(r->k1 + ln + 1, p, 5);
    r->k1[ln + 6] = ' ';
    memcpy(r->k1 + ln + 7, p + 6, 8);
    r->k1n = (int)(ln + 15);
    p += 14;
    if (p < e && (*p == '.' || *p == ',')) { /* (?:[.,]\d+)? */
        cptr d = ++p;
        while (p < e && cs_isdigit(*p))
            p++;
        if (p == d)
            return 0;
    }
    if (p >= e || !is_blank(*p))
        return 0;
    while (p < e && is_blank(*p))
        p++;
    if (p < e && *p == '[')
        p++;
    cptr f = p; /* [A-Za-z0-9_./-]+:\d+\] ? */
    while (p < e && (is_word(*p) || *p == '.' || *p == '/' || *p == '-'))
        p++;
    if (p == f || p >= e || *p != ':')
        return 0;
    cptr d = ++p;
    while (p < e && cs_isdigit(*p))
        p++;
    if (p == d || p >= e || *p != ']')
        return 0;
    p++;
    if (p < e && *p == ' ')
        p++;
    *pp = p;
    return 1;
}
