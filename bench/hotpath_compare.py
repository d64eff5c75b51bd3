"""Side by side: engines for locating and extracting the periodic lines, vs grep -F.

    python bench/hotpath_compare.py LOG [--engine sglang|vllm]
        [--repeat 3] [--only a,b]

Each approach runs in its own child process on the whole file (page cache warm) and is timed
with ``os.wait4`` (wall, user+sys CPU, peak RSS of that child, interpreter and imports
included). Each run is paired with a ``LC_ALL=C grep -c -F -f anchors LOG`` run right before
it (anchors: every anchor of the parsers graphdiag runs on that engine, as bench/run_bench.py
does), and the ratio is taken against that grep run, so a busy neighbour slows both. Medians
over ``--repeat`` runs.

Kinds: SGLang decode + prefill batches, Receive/Finish request lines; vLLM DEBUG step lines,
stats lines, Received/Added request lines. Every approach extracts every field of those
kinds (as RE2/Rust/Python groups) for the common shape. Only ``hotpath`` / ``hotpath-2t``
(the compiled C scanner, ``diag/ingest/hotpath/_cscan*.c``) and ``hotpath-re2`` (the same
with the RE2 kernels, ``GRAPHDIAG_NATIVE=0``) also compute line numbers, ts, rank and typed
columns, and the per-line fallback candidates (a pass of all anchors): it is the full
bulk-path cost, the others are lower bounds of locate + extract.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK = 8 << 20


def blocks(path: str, size: int = BLOCK):  # type: ignore[no-untyped-def]
    """Whole-line byte blocks of about ``size``; yields (block, first line number)."""
    lineno = 1
    carry = b""
    with open(path, "rb", buffering=0) as fh:
        while True:
            chunk = fh.read(size)
            if not chunk:
                break
            buf = carry + chunk if carry else chunk
            end = buf.rfind(b"\n") + 1
            if end == 0:
                carry = buf
                continue
            block, carry = buf[:end], buf[end:]
            yield block, lineno
            lineno += block.count(b"\n")
    if carry:
        yield carry, lineno


def kinds(engine: str):  # type: ignore[no-untyped-def]
    from diag.ingest.hotpath import kinds as hotpath

    return hotpath.ENGINE_KINDS[engine]


def _strip_end(p: str) -> str:
    """The hot path patterns without their line-end part (engines that cut lines)."""
    return p.replace(r"\r?\n?$", "$")


# ---------------------------------------------------------------- approaches (child side)
def run_duckdb(path: str, engine: str) -> int:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    con.execute(
        f"CREATE VIEW l AS SELECT column0 AS l FROM read_csv('{path}', columns={{'column0': 'VARCHAR'}}, "
        f"header=false, delim='{chr(1)}', quote='', escape='', strict_mode=false, null_padding=true, "
        "auto_detect=false)"
    )
    parts = []
    for k in kinds(engine):
        names = re.findall(r"\(\?P<(\w+)>", k.pattern)
        pat = re.sub(r"\?P<\w+>", "", _strip_end(k.pattern)).replace("'", "''")
        full = re.sub(r"\?P<\w+>", "", _strip_end(k.validate or k.pattern)).replace("'", "''")
        if k.validate is not None:
            pat = pat.rstrip("$")
        lit = k.literal.decode().replace("'", "''")
        names_sql = ", ".join(f"'{n}'" for n in names)
        parts.append(
            f"SELECT regexp_extract(l, '{pat}', [{names_sql}]) AS s FROM l "
            f"WHERE contains(l, '{lit}') AND regexp_full_match(l, '{full}')"
        )
    rows = 0
    for q in parts:
        t = con.sql(q).to_arrow_table()
        rows += t.num_rows
    return rows


def run_polars(path: str, engine: str) -> int:
    import polars as pl

    lf = pl.scan_csv(
        path,
        has_header=False,
        separator="\x01",
        quote_char=None,
        new_columns=["l"],
        schema={"l": pl.String},
        truncate_ragged_lines=True,
        encoding="utf8-lossy",
    )
    rows = 0
    for k in kinds(engine):
        pat = _strip_end(k.pattern)
        q = lf.filter(pl.col("l").str.contains(k.literal.decode(), literal=True))
        if k.validate is not None:
            q = q.filter(pl.col("l").str.contains(_strip_end(k.validate)))
        df = q.select(pl.col("l").str.extract_groups(pat).alias("s")).collect()
        first = df["s"].struct.field(df["s"].struct.fields[0])
        rows += int(first.is_not_null().sum())
    return rows


def run_pyarrow(path: str, engine: str) -> int:
    """Zero-copy line array per block, memmem filter, RE2 extract (no typing, no fallback)."""
    import pyarrow.compute as pc

    from diag.ingest.hotpath import HotPath

    rows = 0
    ks = kinds(engine)
    for block, _first in blocks(path):
        arr, _ = HotPath.lines(block)
        for k in ks:
            m = pc.match_substring(arr, k.literal)
            sub = arr.filter(m)
            st = pc.extract_regex(sub, k.pattern)
            if k.validate is not None:
                st = st.filter(pc.match_substring_regex(sub, k.validate))
            rows += len(st) - st.null_count
        del arr
    return rows


def run_re_block(path: str, engine: str) -> int:
    """One combined bytes regex over each block (re.finditer), groups as Python tuples,
    line numbers by counting newlines between consecutive matches."""
    pats = []
    for k in kinds(engine):
        if k.validate and not k.validate.startswith(k.pattern):
            full = k.validate  # the strict pattern carries the groups itself
        else:
            full = k.pattern + (k.validate[len(k.pattern) :] if k.validate else "")
        p = full.replace(r"\r?\n?$", r"\r?$").lstrip("^")
        p = re.sub(r"\(\?P<\w+>", "(", p)
        pats.append(p)
    rx = re.compile(("(?m)^(?:" + "|".join(f"({p})" for p in pats) + ")").encode())
    rows = 0
    out: list[tuple[int, tuple[bytes | None, ...]]] = []
    for block, first in blocks(path):
        count = block.count
        line, last = first, 0
        for m in rx.finditer(block):
            s = m.start()
            line += count(b"\n", last, s)
            last = s
            out.append((line, m.groups()))
        rows += len(out)
        out.clear()
    return rows


def run_re_anchor_arrow(path: str, engine: str) -> int:
    """Lines located by Python re (the scanner's rarest-byte pivot regex over the kinds'
    literals), then pyarrow extract_regex on the candidate lines only."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from diag.ingest.hotpath import HotPath
    from diag.parsers.scan import pivot_regex

    class _P:
        def __init__(self, anchors: tuple[str, ...]) -> None:
            self.anchors = anchors

    ks = kinds(engine)
    rows = 0
    rx = None
    for block, _first in blocks(path):
        if rx is None:
            rx = pivot_regex([_P(tuple(k.literal.decode() for k in ks))], block[:65536])
        arr, offsets = HotPath.lines(block)
        hits = np.fromiter((m.start() for m in rx.finditer(block)), np.int64)
        idx = np.unique(np.searchsorted(offsets, hits, side="right") - 1)
        sub = arr.take(pa.array(idx))
        for k in ks:
            m = pc.match_substring(sub, k.literal)
            sub2 = sub.filter(m)
            st = pc.extract_regex(sub2, k.pattern)
            if k.validate is not None:
                st = st.filter(pc.match_substring_regex(sub2, k.validate))
            rows += len(st) - st.null_count
    return rows


def _hotpath(path: str, engine: str, threads: int, native: bool = True) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from diag.ingest import parsers_for
    from diag.ingest.hotpath import HotPath

    hp = HotPath.for_parsers(engine, parsers_for(engine), native=native)
    assert hp is not None
    assert hp.uses_native == native, "the C extension is not built (pip install -e .)"
    src = os.path.basename(path)
    rows = 0
    fallback = 0
    if threads == 1:
        for block, first in blocks(path):
            r = hp.extract(block, first, src)
            rows += r.rows()
            fallback += len(r.fallback)
    else:
        with ThreadPoolExecutor(threads) as ex:
            pending = []
            for block, first in blocks(path):
                pending.append(ex.submit(hp.extract, block, first, src))
                if len(pending) > threads:
                    r = pending.pop(0).result()
                    rows += r.rows()
                    fallback += len(r.fallback)
            for f in pending:
                r = f.result()
                rows += r.rows()
                fallback += len(r.fallback)
    print(json.dumps({"fallback": fallback}), file=sys.stderr)
    return rows


def run_hotpath(path: str, engine: str) -> int:
    return _hotpath(path, engine, 1)


def run_hotpath_2t(path: str, engine: str) -> int:
    return _hotpath(path, engine, 2)


def run_hotpath_re2(path: str, engine: str) -> int:
    return _hotpath(path, engine, 1, native=False)


APPROACHES = {
    "duckdb": run_duckdb,
    "polars": run_polars,
    "pyarrow": run_pyarrow,
    "re-block": run_re_block,
    "re-anchor+arrow": run_re_anchor_arrow,
    "hotpath": run_hotpath,
    "hotpath-2t": run_hotpath_2t,
    "hotpath-re2": run_hotpath_re2,
}


# ---------------------------------------------------------------- parent side
def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, stdout) of one child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read().decode()  # type: ignore[union-attr]
    proc.stderr.read()  # type: ignore[union-attr]
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {proc.returncode}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, out


def anchors_file(engine: str) -> str:
    from diag.ingest import parsers_for

    anchors = sorted({a for p in parsers_for(engine) for a in p.anchors})
    fd, name = tempfile.mkstemp(suffix=".anchors")
    os.write(fd, ("\n".join(anchors) + "\n").encode())
    os.close(fd)
    return name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--engine", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default=",".join(APPROACHES))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    engine = a.engine or ("vllm" if "vllm" in Path(a.log).name else "sglang")
    if a.child:
        print(APPROACHES[a.child](a.log, engine))
        return
    anchors = anchors_file(engine)
    env = {**os.environ, "LC_ALL": "C"}
    size = os.path.getsize(a.log)
    print(
        f"{a.log}: {size / 1e6:.0f} MB, engine {engine}, medians of {a.repeat}; each row paired "
        f"with a grep -c -F run just before it (2 shared cores: figures are noisy)"
    )
    print(
        f"{'approach':<16} {'rows':>9} {'wall s':>7} {'CPU s':>6} {'RSS MB':>7} {'grep s':>7} {'x grep':>7}"
    )
    results = {}
    for name in a.only.split(","):
        runs = []
        for _ in range(a.repeat):
            g = timed(["grep", "-c", "-F", "-f", anchors, a.log], env)
            r = timed([sys.executable, __file__, a.log, "--engine", engine, "--child", name])
            runs.append((r[0], r[1], r[2], g[0], r[0] / g[0], int(r[3].strip().splitlines()[-1])))
        med = [statistics.median(x[i] for x in runs) for i in range(5)]
        rows = runs[0][5]
        results[name] = {
            "rows": rows,
            "wall": med[0],
            "cpu": med[1],
            "rss_mb": med[2],
            "grep": med[3],
            "ratio": med[4],
        }
        print(
            f"{name:<16} {rows:>9} {med[0]:>7.2f} {med[1]:>6.2f} {med[2]:>7.0f} {med[3]:>7.2f} {med[4]:>6.1f}x",
            flush=True,
        )
    os.unlink(anchors)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
