"""The commands that look after a whole repository: ``prune`` (retention), ``gc`` (reclaim and
repack), ``stats``, ``verify`` and ``serve`` (the HTTP service, with the ``server`` extra).

Each is a click command; :data:`COMMANDS` lists them in the order ``snapstore --help`` shows them.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import timedelta

import click

from ..errors import (IntegrityError, InvalidInputError, KeyRequired, RepositoryError, RepositoryNotFound,
                      RunNotFound, SnapstoreError, StoreError)
from ..manager import retention
from ..manager.facade import CheckpointManager
from ..stores.probe import probe_store
from .output import (CommandError, Progress, current_activity, emit_json, human_duration, human_size, iso_time,
                     kv_text, plan_progress, plural, prices_text, stdin_interactive, summary_json, table_text, usd,
                     write)
from .params import DURATION, SIZE
from .state import state_of

__all__ = ["COMMANDS", "gc_lines"]


_COUNT_RULES = (("keep_last", "newest"), ("keep_hourly", "hour"), ("keep_daily", "day"),
                ("keep_weekly", "ISO week"), ("keep_monthly", "month"), ("keep_yearly", "year"))
_RULE_ORDER = ("keep_last", "keep_within", "older_than", "keep_hourly", "keep_daily", "keep_weekly",
               "keep_monthly", "keep_yearly")
_GC_HINT = "space is reclaimed by 'snapstore gc' (prune deletes checkpoint records, not the data they used)"


def _policy_text(policy: dict) -> str:
    """``keep-last 3, older-than 7d`` (rules in the CLI's spelling)."""
    out = []
    for k in _RULE_ORDER:
        v = policy.get(k)
        if v is None:
            continue
        if isinstance(v, timedelta):
            v = human_duration(v.total_seconds())
        out.append(f"{k.replace('_', '-')} {v}")
    return ", ".join(out)



def _can_delete_runs(policy: dict) -> bool:
    """True if ``policy`` (CLI rule name -> value) may delete a run's newest checkpoint: no rule
    that always keeps it (a count of at least 1, or ``keep_within``)."""
    return not any(k == "keep_within" or (k.startswith("keep_") and v) for k, v in policy.items())


def _confirm_whole_runs(mgr, run_id, policy: dict, progress) -> None:
    """Plan ``policy`` (a dry run) and, if it deletes every checkpoint of a run, ask on a terminal;
    off a terminal raise :class:`CommandError` (exit 2) naming the runs and ``--yes``. Returns if
    the prune may go on; raises ``click.Abort``-free :class:`CommandError` when the user says no."""
    decisions: list = []
    progress.update("prune: planning")
    retention.prune(mgr, run_id=run_id, dry_run=True, decisions=decisions, **policy)
    runs: dict[str, list[bool]] = {}
    for d in decisions:
        runs.setdefault(d.checkpoint.run_id, []).append(d.keep)
    whole = sorted(r for r, keeps in runs.items() if not any(keeps))
    if not whole:
        return
    n = sum(len(runs[r]) for r in whole)
    names = ", ".join(whole[:5]) + (f" and {len(whole) - 5} more" if len(whole) > 5 else "")
    what = (f"this deletes {len(whole)} of {len(runs)} run(s) entirely ({names}: {n} checkpoint(s), "
            f"policy: {_policy_text(policy)})")
    progress.clear()
    if not stdin_interactive():
        raise CommandError(f"refusing to prune without confirmation: {what}; stdin is not a terminal "
                           "(pass --yes, or --dry-run to see the plan)", 2)
    activity = current_activity()
    if activity is not None:
        activity.suspend()
    try:
        ok = click.confirm(f"{what[0].upper()}{what[1:]}. Continue?", default=False, err=True)
    finally:
        if activity is not None:
            activity.resume()
    if not ok:
        raise CommandError("not pruned: nothing was deleted", 1)


@click.command("prune")
@click.option("--keep-last", type=click.IntRange(min=0), metavar="N",
              help="Keep the N newest checkpoints of each run.")
@click.option("--keep-within", type=DURATION, metavar="DURATION",
              help="Keep checkpoints created within DURATION of their run's newest checkpoint.")
@click.option("--older-than", type=DURATION, metavar="DURATION",
              help="Keep checkpoints created less than DURATION ago (older ones go).")
@click.option("--keep-hourly", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N hours that have checkpoints.")
@click.option("--keep-daily", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N days that have checkpoints.")
@click.option("--keep-weekly", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N ISO weeks that have checkpoints.")
@click.option("--keep-monthly", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N months that have checkpoints.")
@click.option("--keep-yearly", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N years that have checkpoints.")
@click.option("--run", "run_id", metavar="RUN", help="Only this run (default: every run).")
@click.option("-n", "--dry-run", is_flag=True, help="Show what each checkpoint's fate would be and why; "
              "delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the summary line, not a line per checkpoint.")
@click.option("-y", "--yes", is_flag=True, help="Delete whole runs without asking (a policy of --older-than alone "
              "can delete every checkpoint of a run; it asks first on a terminal and needs --yes elsewhere).")
@click.pass_context
def prune_cmd(ctx, run_id, dry_run, as_json, quiet, yes, **rules):
    """Delete checkpoints by retention policy (restic 'forget' rules).

    A checkpoint is kept if ANY rule keeps it; every rule that keeps it is shown as a reason.
    Durations: seconds or 90s, 30m, 12h, 7d, 2w, 1y (or combinations like 1d12h). Times are UTC.
    Deleting every checkpoint of a run deletes the run.

    Pruning deletes checkpoint records only: the space their data used is reclaimed by
    'snapstore gc'.

    Every rule but --older-than keeps each run's newest checkpoint. A policy that can delete
    whole runs (--older-than alone, or beside counts of 0) is planned first: if it would delete
    every checkpoint of some run, prune asks on a terminal and otherwise refuses (exit 2) unless
    --yes is given, as 'delete RUN' does.
    """
    policy = {k: v for k, v in rules.items() if v is not None}
    if not policy:
        raise click.UsageError("give at least one retention rule: --keep-last, --keep-within, --older-than, "
                               "--keep-hourly, --keep-daily, --keep-weekly, --keep-monthly or --keep-yearly")
    mgr = state_of(ctx).manager()
    progress = Progress(not (as_json or quiet))  # -q: the summary line only, no progress lines either
    try:
        if run_id is not None and mgr.head(run_id) is None:
            raise RunNotFound(f"run {run_id!r} not found")  # a typo must not look like "nothing to prune"
        if not (dry_run or yes) and _can_delete_runs(policy):
            _confirm_whole_runs(mgr, run_id, policy, progress)
        decisions: list = []
        progress.update("prune: listing runs")
        # one listing per run: the plan shown is the one the deletion used (runs several at once)
        deleted = retention.prune(mgr, run_id=run_id, dry_run=dry_run, decisions=decisions,
                                  progress=lambda done, total: progress.update(f"prune: {done:,}/{total:,} runs"),
                                  **policy)
    finally:
        progress.clear()
    by_key = {(d.checkpoint.run_id, d.checkpoint.id): d for d in decisions}
    if dry_run:
        gone = [(d.checkpoint, list(d.reasons)) for d in decisions if not d.keep]
        kept = [(d.checkpoint, list(d.reasons)) for d in decisions if d.keep]
    else:
        gone, gone_keys = [], set()
        for s in deleted:
            d = by_key.get((s.run_id, s.id))
            gone.append((s, list(d.reasons) if d is not None and not d.keep else ["matched no keep rule"]))
            gone_keys.add((s.run_id, s.id))
        kept = [(d.checkpoint, list(d.reasons)) for d in decisions
                if d.keep and (d.checkpoint.run_id, d.checkpoint.id) not in gone_keys]

    if as_json:
        def item(s, reasons):
            d = summary_json(s)
            d["reasons"] = reasons
            d["reason"] = "; ".join(reasons)
            return d
        out = {"dry_run": dry_run,
               "policy": {k: (v.total_seconds() if isinstance(v, timedelta) else v) for k, v in policy.items()},
               "pruned": [item(s, r) for s, r in gone], "kept": [item(s, r) for s, r in kept]}
        if gone:
            out["note"] = _GC_HINT
        emit_json(out)
        return

    def line(verb, s, reasons):
        return f"{verb} {s.run_id} {s.id} (seq {s.seq}, created {iso_time(s.created_at)}): {'; '.join(reasons)}\n"

    lines = []
    if quiet:
        pass
    elif dry_run:
        fate = {(s.run_id, s.id): False for s, _ in gone}
        for d in decisions:
            lines.append(line("would keep  " if fate.get((d.checkpoint.run_id, d.checkpoint.id), True)
                              else "would delete", d.checkpoint, d.reasons))
    else:
        lines += [line("deleted", s, r) for s, r in gone]
    runs = len({s.run_id for s, _ in gone})
    ptext = _policy_text(policy)
    whole = sorted({s.run_id for s, _ in gone} - {s.run_id for s, _ in kept})
    if whole and not quiet:
        names = ", ".join(whole[:5]) + (f" and {len(whole) - 5} more" if len(whole) > 5 else "")
        lines.append(f"note: {'would delete' if dry_run else 'deleted'} every checkpoint of {len(whole)} run(s), "
                     f"so the run(s) {'would go' if dry_run else 'went'} too: {names}\n")
    if gone:
        verb, keep = ("would delete", "would keep") if dry_run else ("deleted", "kept")
        lines.append(f"{verb} {len(gone)} checkpoint(s) from {runs} run(s); {keep} {len(kept)} "
                     f"(policy: {ptext})\n")
        lines.append(f"note: {_GC_HINT}\n")
    else:
        lines.append(f"nothing to prune: {len(kept)} checkpoint(s) kept (policy: {ptext})\n")
    kept_keys = {(s.run_id, s.id) for s, _ in kept}
    needed = [d for d in decisions if d.needed_by is not None and (d.checkpoint.run_id, d.checkpoint.id) in kept_keys]
    if needed and not quiet:
        whys = sorted({d.needed_by[1] for d in needed})
        lines.append(f"note: {len(needed)} of the kept checkpoint(s) matched no keep rule but are needed by a "
                     f"kept one to restore ({'; '.join(whys)[:200]}); --dry-run names each\n")
    write("".join(lines))


# ------------------------------------------------------------------------------------------------
# repository-wide

_GC_CATEGORIES = (("packs", "pack"), ("manifests", "manifest"), ("index", "index record"),
                  ("forward", "forwarding-map object"), ("gc", "gc record"), ("bundles", "archive bundle"),
                  ("bundle index", "bundle index record"))


def gc_lines(rep) -> list[tuple[str, str]]:
    """Human-readable rows of a :class:`snapstore.maintenance.gc.GCReport`."""
    dry = bool(rep.dry_run)
    would = "would " if dry else ""
    deleted = {k: int(v) for k, v in dict(rep.deleted).items() if v}
    n_deleted = sum(deleted.values())
    known = dict(_GC_CATEGORIES)
    what = ", ".join(plural(deleted[k], known[k]) for k, _ in _GC_CATEGORIES if k in deleted)
    what = ", ".join(x for x in [what] + [f"{v} {k}" for k, v in deleted.items() if k not in known] if x)
    waiting = (int(rep.pending_candidates) + int(rep.pending_objects) + int(rep.pending_bundles)
               + int(rep.leftovers_pending))
    grace = human_duration(rep.grace_period)
    # the three counts a user asks for first, each saying what it counts (the rows below detail them)
    rows = [("summary", f"{n_deleted} {'object' if n_deleted == 1 else 'objects'} "
                        f"{'would be deleted' if dry else 'deleted'} now; {rep.live_packs} "
                        f"{'pack' if rep.live_packs == 1 else 'packs'} kept (live checkpoints use them); "
                        + (f"{waiting} {'object' if waiting == 1 else 'objects'} no longer needed but kept until "
                           f"the grace period ({grace}) has passed (a later gc deletes them)" if waiting else
                           f"nothing waiting for the grace period ({grace})")),
            ("live", f"{plural(rep.live_checkpoints, 'checkpoint')} using {plural(rep.live_packs, 'hot pack')}"
                     + (" (and the archive bundles serving them)" if rep.live_checkpoints and not rep.live_packs
                        else ""))]
    if n_deleted:
        rows.append((f"{would}delete" if dry else "deleted",
                     f"{plural(n_deleted, 'object')}, {human_size(rep.deleted_bytes)} ({what})"))
    else:
        rows.append((f"{would}delete" if dry else "deleted", "nothing"))
    if rep.live_packs and not rep.repacked_packs:
        # why nothing of the packs was reclaimed: data that live checkpoints use is never deleted
        rows.append(("kept", f"{plural(rep.live_packs, 'pack')}, each holding data a live checkpoint uses (gc "
                             f"rewrites a pack once more than {rep.max_unused:.0%} of it is dead)"))
    if rep.repacked_packs:
        into = plural(rep.new_packs, "new pack") + f" ({human_size(rep.repack_bytes_out)})"
        rows.append((f"{would}repack" if dry else "repacked",
                     f"{plural(rep.repacked_packs, 'pack')} ({human_size(rep.repack_bytes_in)}) into {into}"))
    changes = [(rep.added_forward, "added"), (rep.redirected_forward, "redirected"), (rep.removed_forward, "dropped")]
    if any(n for n, _ in changes):
        # where readers find the entries of repacked packs: at most 16 shard objects (fwd/)
        rows.append(("forwarding", ", ".join(f"{plural(n, 'record')} {what}" for n, what in changes if n)
                     + f" ({plural(rep.forward_writes, 'map shard')} "
                       + ("would be written)" if dry else "written)")))
    b, o = rep.reclaimed_bytes, rep.reclaimed_objects
    if o >= 0:
        objs = f"{plural(o, 'object')} fewer"
    else:  # new packs and forwarding-map shards outnumber what was deleted
        objs = f"{plural(-o, 'object')} more (new packs, forwarding-map shards and gc state)"
    if b >= 0:
        rows.append((f"{would}reclaim" if dry else "reclaimed", f"{human_size(b)} ({b} bytes); {objs}"))
    elif rep.repacked_packs and rep.grace_period > 0:
        rows.append((f"{would}reclaim" if dry else "reclaimed",
                     f"none yet: {human_size(-b)} ({-b} bytes) more stored until the repacked packs are "
                     f"deleted (after the grace period, by a later gc); {objs}"))
    else:
        rows.append((f"{would}reclaim" if dry else "reclaimed",
                     f"nothing: {human_size(-b)} ({-b} bytes) more stored; {objs}"))
    if rep.pending_candidates:
        rows.append(("pending", f"{plural(rep.pending_candidates, 'unreferenced pack')} not deleted yet: "
                                f"{'they wait' if rep.pending_candidates != 1 else 'it waits'} for the grace period "
                                f"({human_duration(rep.grace_period)}); a gc run after it has passed deletes "
                                f"{'them' if rep.pending_candidates != 1 else 'it'}"))
    refetched = rep.refetched_packs
    if refetched:
        rows.append(("refetched", f"{plural(refetched, 'pack')} fetched again after mark (they left the pack "
                                  "cache before their live entries could be copied)"))
    held = rep.pending_objects
    if held:
        names = {"manifests": "log record", "index": "index record", "log": "log segment"}
        kinds = ", ".join(plural(n, names.get(k, k)) for k, n in sorted(dict(rep.pending_kinds).items()) if n)
        rows.append(("waiting", f"{kinds} no longer needed ({human_size(rep.pending_bytes)}) "
                                f"{'are' if held != 1 else 'is'} younger than the grace period "
                                f"({human_duration(rep.grace_period)}); a gc run after it has passed deletes "
                                f"{'them' if held != 1 else 'it'}"))
    corrupt = list(rep.corrupt_packs)
    if corrupt:
        rows.append(("damaged", f"{plural(len(corrupt), 'pack')} ({', '.join(corrupt[:3])}"
                                f"{', ...' if len(corrupt) > 3 else ''}): their live entries are read from other "
                                "copies; deleted like unreferenced packs (run 'snapstore verify --read-data')"))
    n_left = rep.leftovers_removed
    if n_left:
        rows.append((f"{would}remove" if dry else "removed",
                     f"{plural(n_left, 'crash leftover')} ({human_size(rep.leftover_bytes_removed)}: temporary "
                     "files or incomplete uploads of interrupted writes)"))
    if rep.leftovers_pending:
        rows.append(("leftovers", f"{plural(rep.leftovers_pending, 'temporary file or upload')} younger than the "
                                  "grace period left in place (a write may still be running)"))
    rows += bundle_lines(rep)
    rows.append(("elapsed", f"{rep.elapsed:.2f} s"))
    return rows


def bundle_lines(rep) -> list[tuple[str, str]]:
    """Rows of a GCReport about archive bundles (docs/format.md §28): waiting, held for their
    class's minimum duration (with the fee), deleted early (``--force``), kept partly dead."""
    rows = []
    if rep.pending_bundles:
        rows.append(("bundles", f"{plural(rep.pending_bundles, 'archive bundle')} serving no live checkpoint "
                                f"wait for the grace period ({human_duration(rep.grace_period)})"))
    if rep.held_bundles:
        days = min(h["days_left"] for h in rep.held_bundles)
        rows.append(("held", f"{plural(len(rep.held_bundles), 'dead archive bundle')} kept for the storage "
                             f"class's minimum duration ({days:.1f} days left at least); deleting "
                             f"{'them' if len(rep.held_bundles) != 1 else 'it'} now would cost {usd(rep.held_fee)} "
                             "in early-deletion fees ('snapstore gc --force')"))
    if rep.early_deletion_fee:
        rows.append(("fee", f"{usd(rep.early_deletion_fee)} early-deletion fee for the bundles --force deleted"))
    if rep.partly_dead_bundles:
        rows.append(("kept", f"{plural(len(rep.partly_dead_bundles), 'archive bundle')} partly dead, kept whole "
                             "(a bundle is never rewritten: that would cost a retrieval and an early deletion)"))
    return rows


def _utc(seconds: float) -> str:
    from datetime import datetime, timezone
    return iso_time(datetime.fromtimestamp(seconds, timezone.utc))


def _partitioned_gc(ctx, plan_dir, executor, scheduler, partitions, dry_run, as_json, grace_period, inventory):
    """``gc --plan DIR``: the partitioned mark (:mod:`snapstore.maintenance.partitions`), with
    ``--dry-run`` a report only, else also the partitioned sweep (:mod:`snapstore.maintenance.partsweep`)."""
    from ..maintenance.partitions import partitioned_mark
    from ..maintenance.partsweep import partitioned_gc

    if os.path.exists(plan_dir) and not os.path.isdir(plan_dir):
        raise CommandError(f"--plan {plan_dir}: not a directory (give a directory for the job's files)", 2)
    location = state_of(ctx).location
    progress = Progress(not as_json)
    show = plan_progress(progress)
    try:
        if dry_run:
            rep = partitioned_mark(location, plan_dir, partitions, executor, scheduler, inventory=inventory,
                                   progress=show)
        else:
            g = 3600.0 if grace_period is None else grace_period.total_seconds()
            rep = partitioned_gc(location, plan_dir, partitions, executor, scheduler, grace_period=g,
                                 inventory=inventory, progress=show)
    except SnapstoreError as e:  # a job directory of another repository, a bad --scheduler: exit 2
        raise CommandError(str(e), 2 if isinstance(e, InvalidInputError) else 1) from e
    finally:
        progress.clear()
    d = {k: v for k, v in rep.items() if k not in ("live", "candidate_ids")}
    if as_json:
        emit_json(d)
        return
    listing = "a LIST of packs/" if d["listing"] == "LIST" else \
        f"{d['listing'].split(' ', 1)[1]} (created {_utc(d['inventory_created'])})"
    rows = [("partitions", f"{d['partitions_done']}/{d['partitions']} marked ({executor})"),
            ("listed", f"{d['listed_packs']} packs, from {listing}"),
            ("marked", f"{d['live_checkpoints']} live checkpoints, {d['live_packs']} live packs")]
    if dry_run:
        head = "dry run: no data was changed (each partition writes and deletes one clock probe, gc/clock-*)\n"
        rows.append(("candidates", f"{d['candidates']} unreferenced packs, {human_size(d['bytes_to_reclaim'])} to "
                                   "reclaim (a gc after the grace period deletes them)"))
    else:
        sw = d["sweep"]
        head = "resumed an interrupted job\n" if d.get("resumed") else ""
        rows += [("deleted", f"{d['deleted_packs']} packs, {human_size(d['deleted_bytes'])} "
                             f"({d['sweep_partitions_done']}/{d['sweep_partitions']} sweep partitions)"),
                 ("pending", f"{sw['pending_candidates']} unreferenced packs wait for the grace period "
                             f"({sw['new_candidates']} newly recorded as candidates)"),
                 ("note", "packs only: forwarding and log records are collected by 'snapstore gc' without --plan")]
    rows += [("requests", ", ".join(f"{k} {v}" for k, v in sorted(d["requests"].items()) if v)),
             ("results", plan_dir)]
    write(head + kv_text(rows))


@click.command("gc")
@click.option("--grace-period", type=DURATION, metavar="DURATION",
              help="How long unreferenced data must stay unreferenced before it is deleted: seconds or "
                   "90s, 30m, 12h, 7d. 0 deletes it at once: only safe when nothing else writes to the "
                   "repository. [default: 1h]")
@click.option("-n", "--dry-run", is_flag=True, help="Report what would be done; change nothing.")
@click.option("--max-unused", type=click.FloatRange(0, 1), metavar="FRACTION",
              help="Repack a pack when more than this fraction of its bytes is unused. [default: 0.25]")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--break-lock", is_flag=True,
              help="First remove the GC lock, whoever holds it: for a gc killed on another machine (its "
                   "lock goes stale 5 minutes after its last refresh; one killed on this machine is taken "
                   "over at once). Only when no gc is running.")
@click.option("--force", is_flag=True,
              help="Also delete dead archive bundles still within their storage class's minimum duration "
                   "(S3 bills the rest of it; without --force they are kept and the fee is reported).")
@click.option("--plan", "plan_dir", metavar="DIR",
              help="GC of packs as partitions by run key: each partition's live packs go to "
                   "DIR/mark-*.parquet, the packs none needs to DIR/candidates.parquet, the deletions to "
                   "DIR/sweep-*.parquet (with --dry-run: mark and report only); a re-run after a kill resumes.")
@click.option("--inventory", metavar="S3_URL",
              help="List the packs from an S3 Inventory report (s3://BUCKET/.../manifest.json, CSV or Parquet) "
                   "instead of LISTing them: packs it does not list, or newer than it, are kept.")
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
              help="With --plan: threads here, or a Dask distributed cluster (--scheduler).")
@click.option("--scheduler", metavar="ADDR", help="With --executor dask: the scheduler, tcp://HOST:PORT.")
@click.option("--partitions", type=click.IntRange(1), default=8, show_default=True,
              help="With --plan: number of run-key partitions.")
@click.pass_context
def gc_cmd(ctx, grace_period, dry_run, max_unused, as_json, break_lock, force, plan_dir, executor, scheduler,
           partitions, inventory):
    """Garbage-collect: reclaim the space no live checkpoint needs; repack small and mostly-unused packs.

    Run it after 'prune' or 'delete'. Unreferenced data is first marked; a later gc deletes it once
    the grace period has passed (so a concurrent writer that still relies on it is safe). Only one
    gc runs at a time.
    """
    from click.core import ParameterSource

    given = [f"--{n.replace('_', '-')}" for n in ("executor", "scheduler", "partitions")
             if ctx.get_parameter_source(n) not in (ParameterSource.DEFAULT, None)]
    if plan_dir is None and given:
        raise CommandError(f"{', '.join(given)} only apply to a partitioned mark: add --plan DIR", 2)
    if plan_dir is not None:
        moot = [f"--{n.replace('_', '-')}" for n in ("max_unused", "force", "break_lock")
                if ctx.get_parameter_source(n) not in (ParameterSource.DEFAULT, None)]
        if dry_run and grace_period is not None:
            moot.insert(0, "--grace-period")
        if moot:
            what = "gc --plan --dry-run (a partitioned mark that deletes nothing)" if moot[0] == "--grace-period" \
                else "gc --plan (a partitioned GC of packs)"
            raise CommandError(f"{', '.join(moot)} do not apply to {what}: leave them out, or run 'snapstore gc' "
                               "without --plan", 2)
        _partitioned_gc(ctx, plan_dir, executor, scheduler, partitions, dry_run, as_json, grace_period, inventory)
        return
    if inventory is not None:
        kwargs_inv = {"inventory": inventory}
    else:
        kwargs_inv = {}
    mgr = state_of(ctx).manager()
    kwargs = {}
    if grace_period is not None:
        kwargs["grace_period"] = grace_period.total_seconds()
        if kwargs["grace_period"] == 0:
            write("snapstore: note: --grace-period 0 assumes no other process is writing to this repository "
                   "(unreferenced data is deleted at once)\n", err=True)
        elif kwargs["grace_period"] < mgr.gc_grace_period:
            g = human_duration(kwargs["grace_period"])
            write(f"snapstore: note: --grace-period {g} is shorter than the default "
                   f"{human_duration(mgr.gc_grace_period)}: safe only if every active writer uses "
                   f"gc_grace_period={kwargs['grace_period']:g} or less\n", err=True)
    if max_unused is not None:
        kwargs["max_unused"] = max_unused
    kwargs.update(kwargs_inv)
    if force:
        kwargs["force"] = True
    progress = Progress(True)
    try:
        if break_lock:
            kwargs["break_lock"] = True
            from ..maintenance.gc import LOCK_KEY
            try:
                held = mgr.store.get(LOCK_KEY).decode("utf-8", "replace")[:200]
                write(f"snapstore: note: removing the GC lock ({held})\n", err=True)
            except SnapstoreError:
                pass
        try:
            rep = mgr.gc(dry_run=dry_run, progress=lambda phase, done, total: progress.update(
                f"gc {phase}: {done}/{total}"), **kwargs)
        except IntegrityError as e:
            # GC deletes nothing while a live checkpoint's data is unreadable: say how to get past it
            raise CommandError(f"{e} (gc deleted nothing; 'snapstore verify' names the damaged runs: "
                               "put the object back from a copy, or delete those runs, then run gc again)") from e
    finally:
        progress.clear()
    if as_json:
        d = rep.as_dict()
        d.setdefault("deleted_bytes", rep.deleted_bytes)
        d.setdefault("written_bytes", rep.written_bytes)
        emit_json(d)
        return
    head = "dry run: nothing was changed\n" if dry_run else ""
    write(head + kv_text(gc_lines(rep)))


def _partitioned_stats(ctx, plan_dir, executor, scheduler, partitions, prices, kw, as_json):
    """``stats --plan DIR``: :func:`snapstore.maintenance.partstats.partitioned_stats`; returns the
    report and the job's figures (partitions, partitions done, resumed, executor)."""
    from ..maintenance.partstats import partitioned_stats

    progress = Progress(not as_json)
    try:
        got = partitioned_stats(state_of(ctx).location, plan_dir, partitions, executor, scheduler, prices=prices or None,
                                progress=plan_progress(progress, "stats --plan"), **kw)
    except SnapstoreError as e:  # a job directory of another repository, a bad --scheduler: exit 2
        raise CommandError(str(e), 2 if isinstance(e, InvalidInputError) else 1) from e
    finally:
        progress.clear()
    return got["report"], {"partitions": got["partitions"], "partitions_done": got["partitions_done"],
                           "resumed": got["resumed"], "executor": executor}


@click.command("stats")
@click.option("--price-gb-month", type=click.FloatRange(min=0), metavar="USD",
              help="Storage price per GB-month for the cost estimate. [default: S3 Standard, 0.023]")
@click.option("--price-put", type=click.FloatRange(min=0), metavar="USD",
              help="Price per 1,000 PUT and LIST requests. [default: S3 Standard, 0.005]")
@click.option("--price-get", type=click.FloatRange(min=0), metavar="USD",
              help="Price per 1,000 GET and HEAD requests. [default: S3 Standard, 0.0004]")
@click.option("--cost", is_flag=True,
              help="Also the bill per storage class (archive bundles in theirs): $/month with S3's per-object "
                   "rules, the early-deletion charge still owed, the transition and a restore of every bundle.")
@click.option("--tier", type=click.Choice(("bulk", "standard", "expedited")), default="standard", show_default=True,
              help="Restore tier of the --cost restore estimate.")
@click.option("--prices", "prices_file", type=click.File("r"), metavar="FILE.json",
              help="Price overrides for --cost: {\"gb_month\": {\"DEEP_ARCHIVE\": 0.0018}, ...} "
                   "(tables gb_month, put_per_1000, get_per_1000, retrieval_per_gb, restore_per_1000).")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@click.option("--plan", "plan_dir", metavar="DIR",
              help="Count as run-key partitions, the job's files (Parquet per partition) in DIR (shared with the "
                   "workers); the same figures (the requests are the job's). A re-run of an interrupted job resumes.")
@click.option("--executor", type=click.Choice(["local", "dask"]), default=None,
              help="With --plan: threads here (default), or a Dask distributed cluster (--scheduler).")
@click.option("--scheduler", metavar="ADDR", help="With --executor dask: the scheduler, tcp://HOST:PORT.")
@click.option("--partitions", type=click.IntRange(1, 100_000), default=None,
              help="With --plan: number of run-key partitions. [default: 8]")
@click.pass_context
def stats_cmd(ctx, price_gb_month, price_put, price_get, as_json, cost, tier, prices_file, plan_dir, executor,
              scheduler, partitions):
    """Repository size, deduplication ratio, object counts, this command's store requests and an
    estimated cost (S3 Standard list prices, us-east-1, unless overridden)."""
    given = [f"--{n}" for n, v in (("executor", executor), ("scheduler", scheduler), ("partitions", partitions))
             if v is not None]
    if given and plan_dir is None:
        raise CommandError(f"{', '.join(given)} only apply to a partitioned stats: add --plan DIR", 2)
    if plan_dir is not None and os.path.exists(plan_dir) and not os.path.isdir(plan_dir):
        raise CommandError(f"--plan {plan_dir}: not a directory (give a directory for the job's files)", 2)
    mgr = state_of(ctx).manager() if plan_dir is None else None
    prices = {}
    if price_gb_month is not None:
        prices["gb_month"] = price_gb_month
    if price_put is not None:
        prices["PUT"] = prices["LIST"] = price_put / 1000
    if price_get is not None:
        prices["GET"] = prices["HEAD"] = price_get / 1000
    kw = {}
    if cost:
        kw = {"cost": True, "tier": tier}
        if prices_file is not None:
            try:
                kw["class_prices"] = json.load(prices_file)
            except ValueError as e:
                raise CommandError(f"--prices: not JSON ({e})", 2) from e
    elif prices_file is not None:
        raise CommandError("--prices goes with --cost", 2)
    job = None
    if plan_dir is not None:
        st, job = _partitioned_stats(ctx, plan_dir, executor or "local", scheduler, partitions or 8, prices, kw,
                                     as_json)
    else:
        st = mgr.stats(prices=prices, **kw) if prices else mgr.stats(**kw)
    if as_json:
        emit_json(st if job is None else {**st, "partitioned": job})
        return
    if job is not None:  # the job's figures on stderr: stdout is the report one-process stats prints
        write(f"stats --plan: {job['partitions_done']}/{job['partitions']} partitions ({job['executor']}, "
              f"{job['resumed']} resumed); results: {plan_dir}\n", err=True)
    logical, stored = int(st.get("logical_bytes", 0)), int(st.get("stored_bytes", 0))
    ratio = st.get("ratio")
    pairs = [("runs", str(st.get("runs", 0))), ("checkpoints", str(st.get("checkpoints", 0))),
             ("logical size", f"{human_size(logical)} ({logical} bytes)"),
             *([("  session state", f"{human_size(int(st['session_state_bytes']))} of it")]
               if st.get("session_state_bytes") else []),
             ("stored size", f"{human_size(stored)} ({stored} bytes)"),
             ("ratio", f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else "-")]
    width = max(len(k) for k in [k for k, _ in pairs] + ["cost estimate"]) + 1
    out = kv_text(pairs, width)
    objects = st.get("objects") or {}
    if objects:
        order = ("config", "packs", "manifests", "log", "index", "forward", "gc", "runmarks")
        rows = []
        for cat, v in sorted(objects.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order),
                                                             kv[0])):
            rows.append([f"  {cat}", str(v.get("count", 0)), human_size(v.get("bytes", 0))])
            if v.get("stubs"):  # compacted run-log records (their copies are in log segments)
                rows.append(["    of them stubs", str(v["stubs"]), human_size(0)])
            if v.get("shared"):  # cross-run shared objects (docs/format.md §29): stored once for every run
                rows.append(["    of them shared by runs", str(v["shared"]), human_size(v.get("shared_bytes", 0))])
        total_n = sum(int(v.get("count", 0)) for v in objects.values())
        total_b = sum(int(v.get("bytes", 0)) for v in objects.values())
        rows.append(["  total", str(total_n), human_size(total_b)])
        out += table_text(["objects:", "COUNT", "SIZE"], rows, right={1, 2})  # the section's name heads its rows
    tail = []
    left = st.get("leftovers")
    if isinstance(left, dict) and left.get("count"):
        tail.append(("leftovers", f"{plural(int(left['count']), 'temporary file or incomplete upload')} of "
                                  f"interrupted writes ({human_size(int(left.get('bytes', 0)))}); 'snapstore gc' "
                                  "removes them once older than its grace period"))
    req = st.get("requests")
    n_requests = None
    if isinstance(req, dict):
        counts = req.get("requests", req)
        if isinstance(counts, dict):
            n_requests = sum(v for v in counts.values() if isinstance(v, int))
            text = ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "none"
            down = req.get("bytes_down")
            extra = f", {human_size(down)} read" if isinstance(down, int) and down else ""
            who = "made by this command" if job is None else "made by the job's driver and partitions"
            tail.append(("requests", f"{text} ({n_requests} total, {who}{extra})"))
    cost = st.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("storage_per_month"), (int, float)):
        text = f"{usd(cost['storage_per_month'])}/month to store {human_size(stored)}"
        if isinstance(cost.get("requests"), (int, float)):
            text += f"; {usd(cost['requests'])} for "
            whose = "this command's" if job is None else "the job's"
            text += f"{whose} {n_requests} requests" if n_requests is not None else "the requests"
        tail.append(("cost estimate", text))
        if isinstance(cost.get("prices"), dict):
            source = "S3 Standard list prices, us-east-1" + (", with the prices given" if prices else "")
            tail.append(("prices", f"{prices_text(cost['prices'])} ({source})"))
    if tail:
        out += kv_text(tail, width)
    if isinstance(st.get("bill"), dict):
        out += bill_text(st["bill"])
    write(out)


def bill_text(b: dict) -> str:
    """The ``stats --cost`` section: a row per storage class, then the totals."""
    rows = [[f"  {cls}", str(r["objects"]), human_size(r["bytes"]), human_size(r["billed_bytes"]),
             usd(r["per_month"]), usd(r["early_deletion_owed"])] for cls, r in sorted(b["classes"].items())]
    out = table_text(["bill:", "OBJECTS", "SIZE", "BILLED", "$/MONTH", "EARLY DELETION OWED"], rows,
                     right={1, 2, 3, 4, 5})
    t, r = b["transition"], b["restore_once"]
    return out + kv_text([
        ("per month", f"{usd(b['per_month'])} (S3 public prices, us-east-1; per-object minimums and overheads "
                      "counted)"),
        ("early deletion", f"{usd(b['early_deletion_owed'])} owed if everything were deleted now (minimum durations)"),
        ("transition", f"{usd(t['usd'])} for the {plural(t['requests'], 'PUT')} that wrote the bundles in their class"),
        ("restore once", f"{usd(r['usd'])} to read every bundle once ({plural(r['requests'], 'restore request')} "
                         f"at the {r['tier']} tier, {human_size(round(r['gb'] * 2 ** 30))} retrieved)")])


_VERIFY_CODES = (("corrupt", 1), ("missing", 2))


def _problem_exit_code(code: str) -> int:
    c = str(code).lower()
    for prefix, n in _VERIFY_CODES:
        if c.startswith(prefix):
            return n
    return 3


def _problem_dict(p) -> dict:
    return {"code": p.code, "key": p.key, "message": p.message}


def _unrepeated(p) -> str:
    """Problem ``p``'s message without a leading ``corrupt object <its key>: `` (the line names the
    key already)."""
    lead = f"corrupt object {p.key}: "
    return p.message[len(lead):] if p.message.startswith(lead) else p.message


SAME_ERROR_SHOWN = 3
"""Errors of one code with the same message (the object key aside) listed one by one in verify's
human output; the rest are counted on one line (``--json`` lists every one)."""


def _error_lines(errors: list, level: str = "error") -> list[str]:
    """verify's error (or, with ``level="warning"``, warning) lines: each problem once, except
    that past :data:`SAME_ERROR_SHOWN` problems of one code and message (e.g. every manifest sealed
    under a key the config lacks, every outcome a prune left for GC) one line says how many more
    there are."""
    groups: dict = {}
    for p in errors:
        groups.setdefault((p.code, _unrepeated(p)), []).append(p)
    lines = []
    for (code, msg), ps in groups.items():
        lines += [f"{level}: {code}: {p.key}: {msg}\n" for p in ps[:SAME_ERROR_SHOWN]]
        if len(ps) > SAME_ERROR_SHOWN:
            lines.append(f"{level}: {code}: {len(ps) - SAME_ERROR_SHOWN} more object(s) with the same {level} "
                         f"(--json lists each)\n")
    return lines


PARTIAL_EXIT = 4  # verify found no error but could not check everything (no key: format.md §27)


def _partitioned_verify(ctx, plan_dir, executor, scheduler, partitions, read_data, accept_missing, as_json):
    """``verify --plan DIR``: :func:`snapstore.maintenance.partverify.partitioned_verify`; returns
    the report and the job's figures (partitions, resumed, requests)."""
    from ..maintenance.partverify import partitioned_verify

    if os.path.exists(plan_dir) and not os.path.isdir(plan_dir):
        raise CommandError(f"--plan {plan_dir}: not a directory (give a directory for the job's files)", 2)
    progress = Progress(not as_json)
    try:
        got = partitioned_verify(state_of(ctx).location, plan_dir, partitions, executor, scheduler,
                                 read_data=read_data, accept_missing=accept_missing,
                                 progress=plan_progress(progress, "verify --plan"))
    except KeyRequired as e:  # exit 1 is verify's "corrupt objects"; this checked nothing: 3
        raise CommandError(f"{e}; a partitioned verify needs the key in every worker's environment "
                           "(plain 'snapstore verify' checks an encrypted repository's structure without it)",
                           3) from e
    except InvalidInputError as e:  # a job directory of another repository, a bad --scheduler, ...
        raise CommandError(str(e), 2) from e
    except SnapstoreError as e:  # no repository, a wrong passphrase, the store failed: nothing checked
        raise CommandError(str(e), 3) from e
    finally:
        progress.clear()
    job = {"partitions": got["partitions"], "partitions_done": got["partitions_done"], "resumed": got["resumed"],
           "executor": executor, "requests": got["requests"]}
    return got["report"], job


@click.command("verify")
@click.option("--read-data", is_flag=True, help="Also read and check every pack (slower).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Count the warnings by kind instead of listing each "
              "(errors are always listed).")
@click.option("--accept-missing", is_flag=True,
              help="Put manifests deleted outside snapstore (missing-manifest errors) on record as removed: "
                   "their checkpoints are lost; later runs of verify pass.")
@click.option("--plan", "plan_dir", metavar="DIR",
              help="Verify as run-key partitions, the job's files (Parquet per partition) in DIR (shared with "
                   "the workers); the same report. A re-run of an interrupted job resumes.")
@click.option("--executor", type=click.Choice(["local", "dask"]), default=None,
              help="With --plan: threads here (default), or a Dask distributed cluster (--scheduler).")
@click.option("--scheduler", metavar="ADDR", help="With --executor dask: the scheduler, tcp://HOST:PORT.")
@click.option("--partitions", type=click.IntRange(1, 100_000), default=None,
              help="With --plan: number of run-key partitions. [default: 8]")
@click.pass_context
def verify_cmd(ctx, read_data, as_json, quiet, accept_missing, plan_dir, executor, scheduler, partitions):
    """Check the repository's integrity.

    Exit status: 0 no errors (warnings allowed); 1 corrupt objects; 2 missing objects or dangling
    references; 3 other errors (no repository at --repo among them); 4 no errors found, but the check was partial (an encrypted
    repository verified without its passphrase: contents, checksums and references unchecked;
    the summary line says PARTIAL). With several kinds of error the smallest code is used.

    Warnings are what a later 'snapstore gc' reclaims: leftovers of crashes or interrupted
    operations, and after a gc with a grace period the packs it repacked (retired-pack).
    """
    given = [f"--{n}" for n, v in (("executor", executor), ("scheduler", scheduler), ("partitions", partitions))
             if v is not None]
    if given and plan_dir is None:
        raise CommandError(f"{', '.join(given)} only apply to a partitioned verify: add --plan DIR", 2)
    job = None
    if plan_dir is not None:
        report, job = _partitioned_verify(ctx, plan_dir, executor or "local", scheduler, partitions or 8, read_data,
                                          accept_missing, as_json)
    else:
        # not opened here: verify opens it (never creating one), or, for an encrypted repository
        # without $SNAPSTORE_PASSPHRASE, checks its structure from the stored bytes (format.md §27)
        try:
            mgr = state_of(ctx).manager(create=True)
        except (RepositoryError, StoreError) as e:  # a .db that is not SQLite, no bucket, ...: nothing
            raise CommandError(str(e), 3) from e    # checked (exit 1 is verify's "corrupt objects")
        progress = Progress(not as_json)
        kwargs = {}
        if progress.tty:
            kwargs["progress"] = lambda phase, done, total: progress.update(f"verifying {phase}: {done}/{total}")
        try:
            if accept_missing:
                kwargs["accept_missing"] = True
            report = mgr.verify(read_data=read_data, **kwargs)
        except (RepositoryError, StoreError) as e:  # exit 1 is verify's "corrupt objects": nothing to
            raise CommandError(str(e), 3) from e    # check (no repository, not a SQLite file, ...) is 3
        finally:
            progress.clear()
    errors, warnings, checked = list(report.errors), list(report.warnings), dict(report.checked)
    partial = any(p.code == "not-decrypted" for p in warnings)
    code = min((_problem_exit_code(p.code) for p in errors), default=PARTIAL_EXIT if partial else 0)
    if as_json:
        out = {"ok": not errors, "complete": not partial, "exit_code": code, "checked": checked,
               "bundles_not_read": int(getattr(report, "bundles_not_read", 0)),
               "errors": [_problem_dict(p) for p in errors], "warnings": [_problem_dict(p) for p in warnings]}
        if job is not None:
            out["partitioned"] = job
        emit_json(out)
    else:
        if job is not None:  # the job's figures on stderr: stdout is the report one-process verify prints
            write(f"verify --plan: {job['partitions_done']}/{job['partitions']} partitions ({job['executor']}, "
                  f"{job['resumed']} resumed); requests: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(job["requests"].items()) if v)
                  + f"; results: {plan_dir}\n", err=True)
        lines = _error_lines(errors)
        if quiet:
            lines += [f"warning: {c}: {n}\n" for c, n in Counter(p.code for p in warnings).items()]
        else:
            lines += _error_lines(warnings, "warning")
        what = ", ".join(f"{v} {k[:-1] if v == 1 and k.endswith('s') else k}" for k, v in checked.items()) or "nothing"
        unread = int(getattr(report, "bundles_not_read", 0))
        if unread and not read_data:
            lines.append(f"note: {plural(unread, 'archive bundle')} not read (only {'its' if unread == 1 else 'their'} "
                         "size checked against the index record); 'snapstore verify --read-data' reads and checks "
                         f"{'it' if unread == 1 else 'them'}\n")
        elif unread:
            lines.append(f"note: {plural(unread, 'archive bundle')} in GLACIER/DEEP_ARCHIVE not read (not restored); "
                         "'snapstore restore RUN...' then 'snapstore verify --read-data' checks "
                         f"{'it' if unread == 1 else 'them'}\n")
        status = "FAILED" if errors else "PARTIAL" if partial else "OK"
        lines.append(f"{status}: checked {what}; {len(errors)} error(s), {len(warnings)} warning(s)\n")
        write("".join(lines))
    if code:
        ctx.exit(code)



# ------------------------------------------------------------------------------------------------
# serve (issue 12: the HTTP service, snapstore.server; needs the "server" extra)

@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=str),
              help="Read the bearer token from this file [default: $SNAPSTORE_TOKEN].")
@click.option("--no-auth", is_flag=True, help="Serve without a token (only on a loopback address).")
@click.option("--max-body", "max_body", type=SIZE, default="64M", show_default=True,
              help="Largest request body; larger ones get 413.")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Allow browser calls from this origin (repeatable) [default: CORS off].")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True)
@click.pass_context
def serve_cmd(ctx, host, port, token_file, no_auth, max_body, cors_origins, log_level):
    """Serve the repository over HTTP: the REST API and a page to browse runs at /.

    Every API request needs 'Authorization: Bearer TOKEN' ($SNAPSTORE_TOKEN or --token-file)
    unless the server listens on loopback and --no-auth is given. The OpenAPI document is at
    /openapi.json (and in docs/openapi.json).
    """
    try:
        from ..server import ServerSettings, resolve_token, serve
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise CommandError(f"snapstore serve needs the server extra (pip install 'snapstore[server]'): {e}", 2)
    token = resolve_token(host, no_auth=no_auth, token_file=token_file)
    settings = ServerSettings(token=token, max_body_bytes=max_body, cors_origins=tuple(cors_origins))
    location = state_of(ctx).location
    probe_store(location)  # an unreachable S3 endpoint: one clear error and exit 1, before listening
    exists = _check_keys(location)
    write(f"snapstore: serving {location} on http://{host}:{port}/ "
           f"({'no authentication' if token is None else 'bearer token required'})\n", err=True)
    if not exists:  # a typo in --repo would otherwise pass unnoticed until a save created it there
        write(f"snapstore: note: no repository at {location} yet; the first save creates it there\n", err=True)
    serve(location, host=host, port=port, settings=settings, log_level=log_level)


def _check_keys(location: str) -> bool:
    """Open the repository at ``location`` (if there is one) as the service will, so that a
    wrong or missing passphrase ($SNAPSTORE_PASSPHRASE, docs/format.md §27) is one line and exit 1
    before listening, not a 500 on every request. Returns whether there is a repository.

    Raises:
        WrongPassphrase / EncryptionError: the repository's keys do not fit the passphrase given.
    """
    try:
        with CheckpointManager(location, create=False) as mgr:
            mgr.repo
    except RepositoryNotFound:
        return False  # an empty location: the first save creates the repository
    return True


COMMANDS = (prune_cmd, gc_cmd, stats_cmd, verify_cmd, serve_cmd)
"""This module's commands, in help order."""
