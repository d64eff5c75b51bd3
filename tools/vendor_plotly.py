"""Refresh the vendored plotly.js basic bundle (diag/render/vendor, README there).

    python tools/vendor_plotly.py 4.1.1

Runs ``npm pack plotly.js-basic-dist-min@VERSION`` in a temporary folder (npm's registry),
copies ``plotly-basic.min.js`` and its LICENSE unchanged, and writes ``bundle.json``: the
version, sha256, size and the trace types the bundle registers. Refuses a bundle that lacks a
trace type the report draws (scatter, bar) or that holds ``</script`` (it is inlined).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "plotly.js-basic-dist-min"
FILE = "plotly-basic.min.js"
NEEDED = {"scatter", "bar"}
VENDOR = Path(__file__).resolve().parents[1] / "diag" / "render" / "vendor"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the npm version of plotly.js-basic-dist-min, e.g. 4.1.1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", f"{PACKAGE}@{args.version}"], cwd=tmp, check=True)
        (tgz,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tgz) as tar:
            tar.extractall(tmp, filter="data")
        bundle = (Path(tmp) / "package" / FILE).read_bytes()
        licence = (Path(tmp) / "package" / "LICENSE").read_bytes()
    types = sorted(
        {t.decode() for t in re.findall(rb'moduleType:"trace",name:"([a-z0-9]+)"', bundle)}
    )
    if not NEEDED <= set(types):
        raise SystemExit(
            f"{PACKAGE}@{args.version} lacks trace types {sorted(NEEDED - set(types))}"
        )
    if b"</script" in bundle.lower():
        raise SystemExit(f"{PACKAGE}@{args.version} holds '</script': it cannot be inlined")
    (VENDOR / FILE).write_bytes(bundle)
    (VENDOR / "LICENSE.plotly.js").write_bytes(licence)
    record = {
        "package": PACKAGE,
        "version": args.version,
        "file": FILE,
        "sha256": hashlib.sha256(bundle).hexdigest(),
        "bytes": len(bundle),
        "trace_types": types,
    }
    (VENDOR / "bundle.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"vendored {PACKAGE}@{args.version}: {len(bundle):,} bytes, traces {', '.join(types)}")


if __name__ == "__main__":
    main()
