"""Which manifest encodings pay: a run's records compressed one by one under alternative encodings.

The measurement behind docs/format.md §11 (version 4) and docs/design-notes.md §1. Builds the 300-turn LangGraph run of
``benchmarks/langgraph_storage.py`` (``--delta``: DeltaChannel) with SnapstoreSaver (or reads the
repository ``--repo DIR``), takes every manifest's JSON body in its version-2 form (full run id)
and reports the mean zstd-19 size of the body (the smallest of raw, plain zstd and zstd with the
dictionary, as the envelope chooses) under each variant:

* ``v2``: as version 2 writes it (dictionary ``MANIFEST_DICT_V1``);
* ``without <field>``: the field dropped (what it costs; not a valid record);
* ``segs base64``: the segment list as base64 of its binary form instead of hex;
* ``core as array``: the core fields in one positional array instead of named members;
* ``rd``: the run named by an 8-hex digest (version 4);
* ``dict V2``: ``MANIFEST_DICT_V2`` instead of V1; ``rd + dict V2``: what version 4 writes;
* log segments: 16 and 256 consecutive bodies in one frame (version 3), per record.

    python benchmarks/manifest_encodings.py [--delta] [--turns 300] [--repo DIR]
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import sys
import tempfile

import zstandard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from snapstore.format.ids import name_from_key, run_digest  # noqa: E402
from snapstore.format.manifest import MANIFEST_DICT_V1, MANIFEST_DICT_V2, open_manifest  # noqa: E402


def _csize(body: bytes, zdict: bytes) -> int:
    zd = zstandard.ZstdCompressionDict(zdict, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return min(len(body), len(zstandard.ZstdCompressor(level=19, write_checksum=False).compress(body)),
               len(zstandard.ZstdCompressor(level=19, dict_data=zd, write_checksum=False,
                                            write_dict_id=False).compress(body)))


def _v2_bodies(root: str) -> list[dict]:
    out = []
    for f in sorted(glob.glob(os.path.join(root, "runs", "*", "m", "*"))):
        rk = f.split(os.sep)[-3]
        _, body = open_manifest(f"runs/{rk}/m/x", open(f, "rb").read())
        d = json.loads(body)
        if "rd" in d:
            d = {"kind": d.pop("kind"), "run": name_from_key(rk), **{k: v for k, v in d.items() if k != "rd"}}
        out.append(d)
    return out


def _dumps(d: dict) -> bytes:
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode()


def variants() -> dict:
    def drop(field):
        return lambda d: {k: v for k, v in d.items() if k != field}

    def segs64(d):
        d = dict(d)
        s = d.get("segs")
        if s:
            raw = b"".join(bytes.fromhex(s[i:i + 16]) + bytes([int(s[i + 16], 36)]) for i in range(0, len(s), 17))
            d["segs"] = base64.b64encode(raw).decode()
        return d

    def rd(d):
        return {"kind": d["kind"], "rd": run_digest(d["run"]), **{k: v for k, v in d.items() if k not in ("kind", "run")}}

    def core_array(d):
        d = rd(d)
        out = {"kind": d.pop("kind"), "rd": d.pop("rd")}
        core = [d.pop("seq"), d.pop("write_id"), d.pop("created")]
        if "id" in d:
            core += [d.pop("id"), d.pop("parent", None)]
        m = d.pop("messages", None)
        if m:
            core += [m["count"], m["bytes"], m["digest"], m["state"]]
        core.append(d.pop("segs", None))
        out["c"] = core
        out.update(d)
        return out

    v = {"v2": (lambda d: d, MANIFEST_DICT_V1)}
    for f in ("run", "write_id", "created", "id", "parent", "metadata", "session_state", "messages", "segs"):
        v[f"without {f}"] = (drop(f), MANIFEST_DICT_V1)
    v["segs base64"] = (segs64, MANIFEST_DICT_V1)
    v["core as array"] = (core_array, MANIFEST_DICT_V1)
    v["rd"] = (rd, MANIFEST_DICT_V1)
    v["dict V2"] = (lambda d: d, MANIFEST_DICT_V2)
    v["rd + dict V2"] = (rd, MANIFEST_DICT_V2)
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--delta", action="store_true")
    ap.add_argument("--repo", metavar="DIR", help="measure this local repository instead of building the run")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        root = a.repo
        if root is None:
            from benchmarks.log_bytes import langgraph_run
            root = os.path.join(work, "lg")
            langgraph_run(root, a.turns, a.delta)
        bodies = _v2_bodies(root)
    n = len(bodies)
    print(f"{n} manifests; mean compressed body (bytes; the envelope adds 22)")
    for name, (tr, zd) in variants().items():
        print(f"  {name:22} {sum(_csize(_dumps(tr(d)), zd) for d in bodies) / n:7.1f}")
    raw = [_dumps(d) for d in bodies]
    zd = zstandard.ZstdCompressionDict(MANIFEST_DICT_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    for span, level in ((16, 19), (256, 19)):
        c = zstandard.ZstdCompressor(level=level, dict_data=zd, write_checksum=False, write_dict_id=False)
        groups = [raw[i:i + span] for i in range(0, n - span + 1, span)]
        if groups:
            total = sum(len(c.compress(b"".join(g))) for g in groups)
            print(f"  log segment of {span:3} bodies, per record {total / (len(groups) * span):7.1f}")


if __name__ == "__main__":
    main()
