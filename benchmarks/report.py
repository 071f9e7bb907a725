"""``benchmarks/RESULTS.md`` and the PNG plots, from the records of :mod:`benchmarks.harness`.

Everything here is computed from the records (``benchmarks/results/latest.json``) and their metadata;
nothing is typed in by hand except the prices (:data:`PRICES`) and the explanations of why a figure
goes the way it does (:data:`WHY`), which name the mechanism, not a number.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

PRICES = {"storage_gb_month": 0.023, "put_per_1000": 0.005, "get_per_1000": 0.0004}
"""S3 Standard list prices, us-east-1: storage per GB-month (first 50 TB), PUT/COPY/POST/LIST and
GET/SELECT per 1,000 requests (DELETE is free)."""

ME = "snapstore-local"
LOCAL_PEERS = ("json-files", "sqlite-rows", "langgraph-sqlitesaver", "langgraph-deltachannel", "restic", "borg")

WHY = {
    ("stored_bytes", "restic"): "restic 0.14 (Debian) cuts 0.5-8 MiB chunks: a checkpoint file smaller than a chunk "
                                "is one chunk, stored again whenever it changes (no compression in repository v1)",
    ("stored_bytes", "borg"): "borg's chunks (about 2 MiB) are far larger than a message: every changed checkpoint "
                              "file is stored again, lz4-compressed",
    ("stored_bytes", "langgraph-deltachannel"): "DeltaChannel stores each step's new messages once (msgpack, "
                                                "uncompressed) plus a full snapshot every 100 updates; snapstore "
                                                "adds per checkpoint a manifest, an index record and tree/state "
                                                "nodes (a few hundred bytes) that dominate runs of short messages",
    ("stored_bytes", "*"): "whole history per checkpoint: O(n^2) bytes in the run length",
    ("disk_bytes", "*"): "the local store keeps one small file per manifest and index record; each takes at "
                         "least one 4 KiB file-system block, so du counts several times the object bytes",
    ("save_p50_ms", "langgraph-deltachannel"): "a snapstore save creates 2-3 files (pack, manifest, sometimes an "
                                               "index record), each journaled with one fdatasync (the files are "
                                               "fsynced later, off the save's path), and every 4th save merges a "
                                               "tier; SqliteSaver appends to one WAL file and fsyncs it once per commit",
    ("save_p50_ms", "*"): "a snapstore save creates 2-3 files (pack, manifest, sometimes an index record), each "
                          "journaled with one fdatasync, and hashes and compresses what is new; a small "
                          "whole-history write with one fsync costs less while the history is short",
    ("save_p50_ms", "langgraph-objectstorage"): "on S3 a snapstore save sends a pack and a manifest (two PUTs, "
                                                "in sequence: data before the manifest), plus in part of the saves "
                                                "a tier pack, an index record or a log segment; the objectstorage "
                                                "saver sends one PUT of the whole checkpoint",
    ("restore_ms", "langgraph-objectstorage"): "on S3 snapstore's latest() opens the repository (a GET of config "
                                               "and a versioning check), LISTs the run's newest manifest, GETs it, "
                                               "then GETs its segments in one parallel wave and verifies every "
                                               "message; the objectstorage saver LISTs the thread and GETs one object",
    ("resume_ms_at_latency", "*"): "snapstore's resume makes more sequential round trips (config, versioning "
                                   "check, LIST, manifest, segments; `resume RT` in the tables) than the objectstorage "
                                   "saver (LIST, GET, LIST of pending writes)",
    ("restore_ms", "*"): "snapstore's latest() opens the repository (config), lists the run's newest manifest, "
                         "reads its segments, decompresses them, verifies every message's content id and "
                         "decodes each message; a whole-history file is one read and one json.loads",
}


def _why(figure: str, peer: str) -> str:
    return WHY.get((figure, peer)) or WHY.get((figure, "*"), "")


def _kb(n) -> str:
    return "" if n is None else f"{n / 1000:,.1f}"


def _ms(x) -> str:
    return "" if x is None else (f"{x:,.2f}" if x < 10 else f"{x:,.1f}")


def _ratio(a, b) -> str:
    if a is None or b is None or not b:
        return ""
    return f"{a / b:.2f}x"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()


def by_workload(records: list) -> dict:
    out: dict = {}
    for r in records:
        out.setdefault(r["workload"], []).append(r)
    return out


def _ok(r) -> bool:
    return r is not None and r.get("status") == "ok"


def _find(rows: list, system: str):
    return next((r for r in rows if r["system"] == system), None)


def bytes_for(r: dict, n: int | None = None) -> int | None:
    """Stored bytes of a record at the workload's full length: the extrapolation when it was capped."""
    ex = r.get("extrapolated_stored_bytes") or {}
    if n is not None and str(n) in ex:
        return ex[str(n)]
    return r["stored_bytes"]


# ------------------------------------------------------------------------------------------------
# targets

def targets(records: list) -> list:
    """``[(target, verdict, detail)]``: the issue's targets, each shown or marked missed."""
    wls = by_workload(records)
    traj = {w: rows for w, rows in wls.items() if w.startswith("traj:")}
    out = []
    ratios = []
    for w, rows in traj.items():
        me = _find(rows, ME)
        if _ok(me):
            budget = 3 * me["lower_bound_bytes"] + 512 * me["checkpoints"]
            ratios.append((me["stored_bytes"] / budget, w))
    if ratios:
        med = statistics.median(x for x, _ in ratios)
        worst = max(ratios)
        out.append(("traj: snapstore-local stored <= 3 x LB + 512 B per checkpoint (median over workloads)",
                    "met" if med <= 1 else "MISSED",
                    f"median stored / budget {med:.2f}; worst {worst[0]:.2f} ({worst[1]}); "
                    f"{sum(x <= 1 for x, _ in ratios)}/{len(ratios)} workloads within"))
    for figure, label, better in (("stored_bytes", "stored bytes at most half of DeltaChannel's on every traj "
                                   "workload", lambda me, dc: me <= dc / 2),
                                  ("save_p50_ms", "save p50 no slower than DeltaChannel's at equal durability "
                                   "(both fsync every save)", lambda me, dc: me <= dc)):
        res = [(w, a, b, better(a, b)) for w, a, b in _figure_pairs(traj, ME, "langgraph-deltachannel", figure)]
        if res:
            miss = [f"{w.split(':', 1)[1]} ({_fmt(figure, a)} vs {_fmt(figure, b)})" for w, a, b, ok in res if not ok]
            out.append((label, "met" if not miss else "MISSED",
                        f"{len(res) - len(miss)}/{len(res)} workloads" + (("; missed on " + ", ".join(miss)) if miss else "")))
        else:
            out.append((label, "not measured", "langgraph-deltachannel did not run"))
    res = _restore_pairs(wls, ME, LOCAL_PEERS)
    if res:
        miss = [(w, p, a, b) for w, p, a, b in res if a > b]
        peers_lost = sorted({p for _, p, _, _ in miss})
        detail = f"{len(res) - len(miss)}/{len(res)} (workload, local peer) pairs"
        if miss:
            detail += "; slower than " + ", ".join(
                f"{p} on {sum(1 for _, q, _, _ in miss if q == p)} workload(s)" for p in peers_lost)
        out.append(("restore of the latest checkpoint no slower than any peer's on the local store",
                    "met" if not miss else "MISSED", detail))
    out.extend(sqlite_targets(wls))
    return out


def _figure_pairs(wls: dict, system: str, peer: str, figure: str) -> list:
    """``[(workload, system's figure, peer's figure)]`` over the workloads of ``wls`` where both ran."""
    out = []
    for w, rows in wls.items():
        me, pr = _find(rows, system), _find(rows, peer)
        if _ok(me) and _ok(pr):
            out.append((w, me[figure], pr[figure]))
    return out


def _restore_pairs(wls: dict, system: str, peers) -> list:
    """``[(workload, peer, system's restore ms, peer's restore ms)]`` for every workload of ``wls``
    where ``system`` ran and each of ``peers`` that ran there."""
    out = []
    for w, rows in wls.items():
        me = _find(rows, system)
        if not _ok(me):
            continue
        for p in peers:
            pr = _find(rows, p)
            if _ok(pr):
                out.append((w, p, me["restore_ms"], pr["restore_ms"]))
    return out


def sqlite_targets(wls: dict) -> list:
    """``[(target, verdict, detail)]``: issue 22's targets for the SQLite-file rows
    (``snapstore-sqlite``, ``snapstore-saver-sqlite``): save p50 and p99 at most DeltaChannel's on
    every ``traj:`` workload (both fsync every save), and restore at most every local peer's except
    a single JSON file (``json-files``) on every workload. ``wls`` as :func:`by_workload`."""
    out = []
    for system in ("snapstore-sqlite", "snapstore-saver-sqlite"):
        for figure in ("save_p50_ms", "save_p99_ms"):
            res = _figure_pairs({w: rows for w, rows in wls.items() if w.startswith("traj:")}, system,
                                "langgraph-deltachannel", figure)
            label = f"{system}: {figure[:-3].replace('_', ' ')} at most DeltaChannel's on every traj workload"
            if not res:
                out.append((label, "not measured", f"{system} or langgraph-deltachannel did not run"))
                continue
            miss = [f"{w.split(':', 1)[1]} ({_fmt(figure, a)} vs {_fmt(figure, b)})" for w, a, b in res if a > b]
            out.append((label, "met" if not miss else "MISSED",
                        f"{len(res) - len(miss)}/{len(res)} workloads" + (("; missed on " + ", ".join(miss)) if miss else "")))
        res = _restore_pairs(wls, system, [p for p in LOCAL_PEERS if p != "json-files"])
        label = f"{system}: restore at most every local peer's but a single JSON file's, on every workload"
        if not res:
            out.append((label, "not measured", f"{system} or no local peer ran"))
            continue
        miss = [f"{p} on {w.split(':', 1)[1]} ({a:.2f} vs {b:.2f} ms)" for w, p, a, b in res if a > b]
        out.append((label, "met" if not miss else "MISSED",
                    f"{len(res) - len(miss)}/{len(res)} (workload, peer) pairs"
                    + (("; slower than " + ", ".join(miss[:6]) + (" and more" if len(miss) > 6 else "")) if miss else "")))
    return out


def glance(records: list, meta: dict) -> list:
    """Markdown lines: for stored bytes, save p50 and restore time, a matrix of workloads x systems of
    each system's figure divided by snapstore-local's (above 1: snapstore-local is ahead)."""
    wls = by_workload(records)
    systems = []
    for r in records:
        if r["system"] != ME and r["system"] not in systems and any(_ok(x) for x in records if x["system"] == r["system"]):
            systems.append(r["system"])
    L = ["## Ratios at a glance", "",
         "Each cell: the system's figure / snapstore-local's on the same workload, in this run (above 1: "
         "snapstore-local is ahead; `fit`: extrapolated bytes of a capped quadratic system; blank: not run). "
         "The first column is snapstore-local's own figure.", ""]
    for figure, label, unit in (("stored_bytes", "stored bytes", "kB"), ("save_p50_ms", "save p50", "ms"),
                                ("restore_ms", "restore of the latest checkpoint (fresh process)", "ms")):
        L.append(f"**{label}**")
        L.append("")
        L.append("| workload | snapstore-local | " + " | ".join(systems) + " |")
        L.append("|---|---|" + "---|" * len(systems))
        for w, rows in wls.items():
            me = _find(rows, ME)
            if not _ok(me) or not me.get(figure):
                continue
            mine = me[figure]
            own = f"{mine / 1000:,.1f} kB" if unit == "kB" else f"{mine:,.2f} ms"
            if figure == "stored_bytes":
                own += f" ({mine / me['lower_bound_bytes']:.2f}x LB)"
            cells = []
            for sname in systems:
                r = _find(rows, sname)
                if not _ok(r) or r.get(figure) is None:
                    cells.append("")
                    continue
                v = r[figure]
                tag = ""
                if figure == "stored_bytes" and r.get("extrapolated_stored_bytes"):
                    full = _wl_len(meta, w)
                    if str(full) in r["extrapolated_stored_bytes"]:
                        v, tag = r["extrapolated_stored_bytes"][str(full)], " fit"
                cells.append(f"{v / mine:,.2f}{tag}")
            L.append(f"| {w} | {own} | " + " | ".join(cells) + " |")
        L.append("")
    return L


def _fmt(figure: str, v) -> str:
    return f"{v / 1000:,.1f} kB" if figure == "stored_bytes" else f"{v:.2f} ms"


S3_PEERS = ("langgraph-objectstorage",)
"""Peers on S3: compared with snapstore-s3 (same moto server), not with the local store."""


def losses(records: list) -> list:
    """``[(workload, figure, peer, mine, theirs)]`` where snapstore does worse than a peer: local
    peers against snapstore-local, S3 peers (:data:`S3_PEERS`) against snapstore-s3."""
    out = []
    for w, rows in by_workload(records).items():
        for pr in rows:
            if not _ok(pr) or pr["system"].startswith("snapstore"):
                continue
            me = _find(rows, "snapstore-s3" if pr["system"] in S3_PEERS else ME)
            if not _ok(me):
                continue
            for figure in ("stored_bytes", "disk_bytes", "save_p50_ms", "restore_ms", "resume_ms_at_latency"):
                a, b = me.get(figure), pr.get(figure)
                if figure == "stored_bytes":
                    b = bytes_for(pr, me["checkpoints"]) if pr.get("extrapolated_stored_bytes") else b
                if a is None or b is None:
                    continue
                if a > b:
                    out.append((w, figure, pr["system"], a, b))
    return out


# ------------------------------------------------------------------------------------------------
# cost

def cost_table(records: list) -> list:
    """Per system: bytes and requests per checkpoint pooled over the ``traj:`` workloads it ran, and
    the dollars to keep 1 million such checkpoints on S3 Standard for a month (storage), to write them
    (requests, once) and to resume one run (requests of one restore through the proxy)."""
    pooled: dict = {}
    for r in records:
        if not _ok(r) or not r["workload"].startswith("traj:"):
            continue
        p = pooled.setdefault(r["system"], {"bytes": 0, "ckpts": 0, "put": 0, "get": 0, "s3": False,
                                            "workloads": 0, "resume": []})
        p["bytes"] += r["stored_bytes"]
        p["ckpts"] += r["checkpoints"]
        p["workloads"] += 1
        req = r.get("requests") or {}
        if any(k in req for k in ("PUT", "GET", "LIST", "HEAD", "DELETE")):
            p["s3"] = True
            p["put"] += req.get("PUT", 0) + req.get("LIST", 0)
            p["get"] += req.get("GET", 0) + req.get("HEAD", 0)
        if r.get("resume_requests"):
            p["resume"].append(sum(r["resume_requests"].values()))
    rows = []
    for name, p in pooled.items():
        per = p["bytes"] / p["ckpts"]
        storage = per * 1e6 / 1e9 * PRICES["storage_gb_month"]
        if p["s3"]:
            write = (p["put"] / p["ckpts"] * 1e6 / 1000 * PRICES["put_per_1000"]
                     + p["get"] / p["ckpts"] * 1e6 / 1000 * PRICES["get_per_1000"])
            req = f"{p['put'] / p['ckpts']:.2f} PUT/LIST + {p['get'] / p['ckpts']:.2f} GET/HEAD"
        elif name == "json-files":
            write = 1e6 / 1000 * PRICES["put_per_1000"]
            req = "1 PUT (one object per checkpoint, if stored on S3)"
        else:
            write, req = None, "n/a (a local database or repository, not objects)"
        rows.append({"system": name, "bytes_per_checkpoint": per, "storage_usd_month": storage,
                     "write_usd": write, "requests_per_checkpoint": req, "workloads": p["workloads"],
                     "checkpoints": p["ckpts"]})
    rows.sort(key=lambda x: x["storage_usd_month"])
    return rows


# ------------------------------------------------------------------------------------------------
# plots

def plot_workloads(records: list) -> list:
    """The workloads plotted: the longest synthetic run, the traj workload of the longest single run,
    and the state workload."""
    wls = by_workload(records)
    names = []
    synth = [w for w in wls if w.startswith("synth:")]
    if synth:
        names.append(max(synth, key=lambda w: int(w.rsplit("-", 1)[1])))
    traj = [w for w in wls if w.startswith("traj:")]
    if traj:
        def longest(w):
            me = [r for r in wls[w] if _ok(r)]
            return max((r["checkpoints"] for r in me), default=0) if "conversation" not in w else 0
        names.append(max(traj, key=lambda w: max((r.get("restored_messages") or 0) for r in wls[w])))
    if "state:image" in wls:
        names.append("state:image")
    return names


def plots(records: list, meta: dict, out: Path) -> list:
    """Write ``bytes-<workload>.png`` and ``latency-<workload>.png``; ``[(workload, bytes png, latency png)]``.
    Without matplotlib, returns [] (the report says so)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        meta.setdefault("notes", []).append("matplotlib not installed: no plots (pip install '.[bench]')")
        return []
    made = []
    wls = by_workload(records)
    for w in plot_workloads(records):
        rows = [r for r in wls[w] if _ok(r) and r.get("series")]
        if not rows:
            continue
        files = []
        for what, ylabel, key, logy in (("bytes", "stored bytes", "stored_bytes", True),
                                        ("latency", "save latency, ms (median per window)", "save_ms", True)):
            fig, ax = plt.subplots(figsize=(8, 4.8), dpi=100)
            for r in rows:
                s = r["series"]
                line, = ax.plot(s["index"], s[key], label=r["system"], linewidth=1.6)
                if key == "stored_bytes" and r.get("extrapolated_stored_bytes"):
                    from benchmarks._lib import quadratic_coefficients

                    a, b, c = quadratic_coefficients(s["index"], s[key])
                    x0, x1 = s["index"][-1], max(s["index"][-1], _wl_len(meta, w))
                    ex = [x0 + (x1 - x0) * j / 49 for j in range(50)]
                    ax.plot(ex, [a * x * x + b * x + c for x in ex], linestyle="--", color=line.get_color(),
                            linewidth=1)
            ax.set_xlabel("checkpoint index")
            ax.set_ylabel(ylabel)
            if logy:
                ax.set_yscale("log")
            ax.set_title(f"{w}: {ylabel} (dashed: fitted extrapolation)" if key == "stored_bytes" else f"{w}: {ylabel}",
                         fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8, loc="best")
            fig.tight_layout()
            p = out / f"{what}-{_slug(w)}.png"
            fig.savefig(p)
            plt.close(fig)
            files.append(p)
        made.append((w, files[0], files[1]))
    return made


def _wl_len(meta: dict, name: str) -> int:
    for w in meta.get("workloads", []):
        if w["name"] == name:
            return w["checkpoints"]
    return 0


# ------------------------------------------------------------------------------------------------
# Markdown

def markdown(records: list, meta: dict, plots_made: list, report_dir: Path) -> str:
    """The report, as Markdown."""
    L = []
    v = meta["versions"]
    L.append("# snapstore against what users would pick instead")
    L.append("")
    L.append("Generated by the committed command; rerun it to refresh every figure here.")
    L.append("")
    L.append(f"- command: `{meta['command']}` (from the repository root; wall time {meta['total_s']:.0f} s)")
    L.append(f"- date: {meta['date_utc']}; commit {meta['commit']}{' (+ uncommitted changes)' if meta['dirty'] else ''}")
    load = meta.get("load_avg_start")
    L.append(f"- machine: {meta['cores']} cores, {meta['platform']}; load average at start "
             f"{', '.join(f'{x:.2f}' for x in load) if load else '?'}"
             + (f". **{meta['machine_note']}**" if meta.get("machine_note") else ""))
    L.append(f"- Python {meta['python']}; " + ", ".join(f"{k} {val}" for k, val in v.items() if val))
    L.append(f"- restores: fresh process each, median of {meta['trials']}; S3: moto's HTTP server on 127.0.0.1; "
             f"resume through the latency proxy of `benchmarks/latency.py`, {meta['delay_ms']:g} ms per response")
    for n in meta.get("notes", []):
        L.append(f"- note: {n}")
    L.append("")
    L.append("## How the comparison is made fair")
    L.append("")
    L.append("- Same checkpoint lists: every system saves the same Python message lists (the workloads below), one "
             "save per checkpoint, in the same order. The LangGraph systems run a real graph (`START -> agent -> END`, "
             "an `add_messages` channel, or the same reducer in a `DeltaChannel`) whose deterministic node returns "
             "each checkpoint's new messages; one `invoke(..., durability=\"exit\")` per checkpoint writes exactly "
             "one checkpoint. Their messages carry the same dicts, round-tripped exactly.")
    L.append("- Same byte measure: `stored_bytes` is the sum of the sizes of the files or objects a system keeps "
             "(what S3 bills); `disk_bytes` is `du`'s measure (file blocks x 512; directory entries not counted) "
             "for local stores.")
    L.append("- Durability: equal where the peer allows it (JSON files fsynced with their directory; SQLite "
             "`synchronous=FULL` in WAL mode), stated per system below where it cannot be.")
    L.append("- Save latency: the wall time of one save; for LangGraph the time inside the checkpointer's `put` and "
             "`put_writes` only (the graph's own overhead per invoke is `invoke p50` in latest.json). restic and "
             "borg are run as a user runs them: one process per snapshot.")
    L.append("- Restore: the latest checkpoint of the workload's heaviest run, in a fresh process (imports not "
             "timed), compared with what was saved (sha256 of its JSON).")
    L.append("")
    L.append("| system | durability per save | notes |")
    L.append("|---|---|---|")
    seen = set()
    for r in records:
        if r["system"] in seen:
            continue
        seen.add(r["system"])
        notes = {x["note"] for x in records if x["system"] == r["system"] and x.get("note") and x["status"] != "ok"
                 and "quick" not in (x["note"] or "")}
        L.append(f"| {r['system']} | {r['durability']} | {'; '.join(sorted(notes))[:300]} |")
    L.append("")
    L.append("## Workloads")
    L.append("")
    L.append("| workload | runs | checkpoints | lower bound LB | LB definition | what |")
    L.append("|---|---|---|---|---|---|")
    for w in meta["workloads"]:
        L.append(f"| {w['name']} | {w['runs']} | {w['checkpoints']:,} | {_kb(w['lower_bound_bytes'])} kB | {w['lb_def']} "
                 f"| {w['description']}{'; quadratic systems capped at ' + format(w['quadratic_cap'], ',') if w['quadratic_cap'] else ''} |")
    L.append("")

    L.append("## Targets")
    L.append("")
    L.append("| target | verdict | detail |")
    L.append("|---|---|---|")
    for t, verdict, detail in targets(records):
        L.append(f"| {t} | **{verdict}** | {detail} |")
    L.append("")

    L += glance(records, meta)
    ls = losses(records)
    L.append("## Where snapstore loses")
    L.append("")
    if not ls:
        L.append("Nowhere in this run: snapstore-local is ahead of every peer on stored bytes, disk bytes, save p50 "
                 "and restore time on every workload.")
    else:
        L.append("Every (workload, figure, peer) where snapstore's figure is worse than the peer's (local peers "
                 "against snapstore-local, S3 peers against snapstore-s3), grouped by figure and peer, and why:")
        L.append("")
        groups: dict = {}
        for w, fig, peer, a, b in ls:
            groups.setdefault((fig, peer), []).append((w, a, b))
        L.append("| figure | peer | workloads | snapstore / peer (worst) | why |")
        L.append("|---|---|---|---|---|")
        for (fig, peer), items in sorted(groups.items()):
            worst = max(items, key=lambda x: x[1] / x[2] if x[2] else 0)
            names = ", ".join(w for w, _, _ in items[:6]) + (f" and {len(items) - 6} more" if len(items) > 6 else "")
            extra = ""
            if fig == "save_p50_ms" and peer not in S3_PEERS:
                mine = [r for r in records if r["system"] == ME and _ok(r) and r.get("fsyncs_per_save")
                        and r["workload"] in {w for w, _, _ in items}]
                if mine:
                    extra = (f" Measured here: {statistics.median(r['fsyncs_per_save'] for r in mine):.1f} fsyncs per "
                             f"save (median over these workloads); save p50 without the time in fsync "
                             f"{statistics.median(r['save_p50_ms_without_fsync'] for r in mine):.2f} ms.")
            L.append(f"| {fig} | {peer} | {len(items)}: {names} | {worst[1] / worst[2]:.2f}x ({worst[0]}) | "
                     f"{_why(fig, peer)}{extra} |")
    costs = {c["system"]: c for c in cost_table(records)}
    me_c, js_c = costs.get(ME), costs.get("json-files")
    if me_c and js_c and me_c["write_usd"] and js_c["write_usd"] and me_c["write_usd"] > js_c["write_usd"]:
        L.append("")
        L.append(f"Requests (cost table below): writing 1 million checkpoints costs snapstore "
                 f"${me_c['write_usd']:,.2f} in PUT/LIST requests against ${js_c['write_usd']:,.2f} for one object "
                 f"per checkpoint ({me_c['requests_per_checkpoint']} per checkpoint): a save writes a pack and a "
                 f"manifest, and in part of the saves a tier pack, an index record or a log segment. At these "
                 f"sizes the requests cost more than a month of storage.")
    L.append("")

    L.append("## Cost of 1 million checkpoints of a typical run (S3 Standard list prices)")
    L.append("")
    L.append(f"Typical run: bytes and requests per checkpoint pooled over the `traj:` workloads each system ran. "
             f"Prices (us-east-1): ${PRICES['storage_gb_month']}/GB-month, ${PRICES['put_per_1000']} per 1,000 "
             f"PUT/LIST, ${PRICES['get_per_1000']} per 1,000 GET. Requests of local systems are what they would be "
             f"with one object per file where that maps to S3.")
    L.append("")
    L.append("| system | traj workloads | bytes / checkpoint | storage $/month | write requests / checkpoint | "
             "writing them, $ once |")
    L.append("|---|---|---|---|---|---|")
    for c in cost_table(records):
        L.append(f"| {c['system']} | {c['workloads']} ({c['checkpoints']:,} ckpts) | {c['bytes_per_checkpoint']:,.0f} | "
                 f"{c['storage_usd_month']:,.2f} | {c['requests_per_checkpoint']} | "
                 f"{'' if c['write_usd'] is None else format(c['write_usd'], ',.2f')} |")
    L.append("")

    L.append("## Per workload")
    L.append("")
    L.append("Ratios are against snapstore-local (`bytes x`: this system's stored bytes / snapstore-local's; "
             "`save x`, `restore x` likewise: above 1 means snapstore-local is ahead). `resume` is through the "
             "latency proxy (S3 systems): sequential round trips and wall time. Capped quadratic systems show "
             "their measured bytes and, in `fit`, the extrapolation to the workload's length.")
    for w, rows in by_workload(records).items():
        me = _find(rows, ME)
        L.append("")
        meta_w = next((x for x in meta["workloads"] if x["name"] == w), None)
        lb = rows[0]["lower_bound_bytes"]
        L.append(f"### {w}")
        L.append("")
        if meta_w:
            L.append(f"{meta_w['description']}; {meta_w['checkpoints']:,} checkpoints; LB {_kb(lb)} kB.")
            L.append("")
        L.append("| system | ckpts | stored kB | fit kB | stored/LB | bytes x | disk kB | objects | save p50 ms | "
                 "save p99 ms | save x | restore ms | restore x | resume RT | resume ms | replay s | note |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        not_run = [r for r in rows if not _ok(r)]
        for r in rows:
            if not _ok(r):
                continue
            ex = r.get("extrapolated_stored_bytes") or {}
            full = meta_w["checkpoints"] if meta_w else None
            fit = ", ".join(f"{_kb(b)} @ {int(n):,}" for n, b in ex.items())
            mine_b = me["stored_bytes"] if _ok(me) else None
            their_b = ex.get(str(full), r["stored_bytes"]) if ex else r["stored_bytes"]
            note = r.get("note") or ""
            if r.get("restore_ok") is False:
                note = "RESTORE MISMATCH; " + note
            L.append(
                f"| {r['system']} | {r['checkpoints']:,} | {_kb(r['stored_bytes'])} | {fit} | "
                f"{r['stored_bytes'] / lb:.2f} | {_ratio(their_b, mine_b) if r is not me else ''} | {_kb(r['disk_bytes'])} | "
                f"{r['objects']:,} | {_ms(r['save_p50_ms'])} | {_ms(r['save_p99_ms'])} | "
                f"{_ratio(r['save_p50_ms'], me['save_p50_ms']) if _ok(me) and r is not me else ''} | "
                f"{_ms(r['restore_ms'])} | {_ratio(r['restore_ms'], me['restore_ms']) if _ok(me) and r is not me else ''} | "
                f"{r['resume_round_trips'] if r['resume_round_trips'] is not None else ''} | "
                f"{_ms(r['resume_ms_at_latency'])} | {r['total_s']:.1f} | {note[:160]} |")
        if not_run:
            L.append("")
            reasons: dict = {}
            for r in not_run:
                reasons.setdefault(f"{r['status']}: {r.get('note') or ''}", []).append(r["system"])
            L.append("Not run here: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in reasons.items()) + ".")
    L.append("")
    if plots_made:
        L.append("## Plots")
        L.append("")
        for w, pb, pl in plots_made:
            L.append(f"**{w}**")
            L.append("")
            L.append(f"![stored bytes, {w}]({pb.relative_to(report_dir).as_posix() if pb.is_relative_to(report_dir) else pb})")
            L.append(f"![save latency, {w}]({pl.relative_to(report_dir).as_posix() if pl.is_relative_to(report_dir) else pl})")
            L.append("")
    L.append("Raw records: `benchmarks/results/latest.json` (one per system x workload); run metadata: "
             "`benchmarks/results/meta.json`.")
    L.append("")
    return "\n".join(L)
