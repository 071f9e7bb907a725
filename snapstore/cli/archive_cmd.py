"""``snapstore archive RUN...``: runs rewritten into hard-compressed bundles in a storage class
(:mod:`snapstore.maintenance.archive`, docs/format.md §28); ``snapstore restore RUN...``: their cold
bundles restored (:mod:`snapstore.maintenance.restore`)."""

from __future__ import annotations

import json
from datetime import datetime

import click

from ..format.bundle import STORAGE_CLASSES
from .params import DURATION, SIZE
from .output import CommandError, emit_json, human_size, kv_text, plural, write
from .state import state_of

__all__ = ["COMMANDS", "archive_cmd", "restore_cmd"]


@click.command("archive")
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option("--finished-before", metavar="ISO-TIME",
              help="Only runs whose newest checkpoint was created before this UTC time "
                   "(e.g. 2026-11-01T00:00:00Z).")
@click.option("--storage-class", type=click.Choice(STORAGE_CLASSES), default="GLACIER_IR", show_default=True,
              help="The bundles' S3 storage class (other stores record it only).")
@click.option("--retention-class", default="default", show_default=True, metavar="NAME",
              help="Key segment grouping bundles: archive/data/NAME/<month>/ (for lifecycle rules).")
@click.option("--expire-after", type=click.IntRange(min=0), metavar="DAYS",
              help="Days after which the bundles may expire (names the month in their key). [default: never]")
@click.option("--idle", type=DURATION, metavar="DURATION",
              help="Only runs whose newest checkpoint is older than DURATION (30d, 12h, ...).")
@click.option("--keep-last", type=click.IntRange(min=0), metavar="N",
              help="Archive only what a retention policy keeps: the N newest checkpoints of each run "
                   "(with any --keep-* rule the selected runs are first pruned, as 'snapstore prune' does).")
@click.option("--keep-within", type=DURATION, metavar="DURATION",
              help="Policy rule: keep checkpoints within DURATION of their run's newest.")
@click.option("--keep-hourly", type=click.IntRange(min=0), metavar="N", help="Policy rule, as prune's.")
@click.option("--keep-daily", type=click.IntRange(min=0), metavar="N", help="Policy rule, as prune's.")
@click.option("--keep-weekly", type=click.IntRange(min=0), metavar="N", help="Policy rule, as prune's.")
@click.option("--keep-monthly", type=click.IntRange(min=0), metavar="N", help="Policy rule, as prune's.")
@click.option("--keep-yearly", type=click.IntRange(min=0), metavar="N", help="Policy rule, as prune's.")
@click.option("-n", "--dry-run", is_flag=True,
              help="Show what would be archived (runs, checkpoints, bundles with their raw bytes, the storage "
                   "class and keys) and write nothing: the same selection as a real run.")
@click.option("--bundle-min", type=SIZE, metavar="SIZE",
              help="A run needing at least this many raw bytes (uncompressed, after dedup) gets a bundle of its "
                   "own; smaller runs are grouped. [default: 16MiB]")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--plan", "plan_dir", metavar="DIR",
              help="Archive as partitions: the runs chosen here, cut into partitions that each write their runs' "
                   "bundles on a worker; the job's files (Parquet per partition) in DIR, shared with the workers. "
                   "A re-run of an interrupted job resumes.")
@click.option("--executor", type=click.Choice(["local", "dask"]), default=None,
              help="With --plan: threads here (default), or a Dask distributed cluster (--scheduler).")
@click.option("--scheduler", metavar="ADDR", help="With --executor dask: the scheduler, tcp://HOST:PORT.")
@click.option("--partitions", type=click.IntRange(1, 100_000), default=None,
              help="With --plan: number of partitions (at most one per run). [default: 8]")
@click.pass_context
def archive_cmd(ctx, runs, finished_before, storage_class, retention_class, expire_after, as_json, idle, plan_dir,
                executor, scheduler, partitions, dry_run, bundle_min, **rules):
    """Archive runs (all runs without RUN) into bundles: one per large run, small runs grouped.

    Each bundle is written, read back and checked, then switched in by a small hot index record;
    listing, summaries and retention never read a bundle. The hot copy of the data becomes garbage:
    'snapstore gc' reclaims it after its grace period. Reading an archived checkpoint reads the
    bundle with byte ranges.
    """
    given = [f"--{n}" for n, v in (("executor", executor), ("scheduler", scheduler), ("partitions", partitions))
             if v is not None]
    if plan_dir is None and given:
        raise CommandError(f"{', '.join(given)} only apply to a partitioned archive: add --plan DIR", 2)
    when = None
    if finished_before is not None:
        try:
            when = datetime.fromisoformat(finished_before)  # naive: UTC
        except ValueError as e:
            raise CommandError(f"--finished-before: not an ISO-8601 UTC time: {finished_before!r} ({e})", 2) from e
    keep = {k: v for k, v in rules.items() if v is not None} or None
    if bundle_min is not None and bundle_min < 1:
        raise CommandError("--bundle-min: give a size of at least 1 byte (e.g. 16MiB)", 2)
    if dry_run:
        if plan_dir is not None:
            raise CommandError("--dry-run shows a one-process archive; drop --plan (the runs chosen are the same)", 2)
        _dry_run(ctx, runs, when, storage_class, retention_class, expire_after, idle, keep, bundle_min, as_json)
        return
    if plan_dir is not None:
        if bundle_min is not None:
            raise CommandError("--bundle-min applies to a one-process archive: drop --plan or --bundle-min", 2)
        if keep:
            raise CommandError("--plan archives every live checkpoint: prune first ('snapstore prune'), then "
                               "archive --plan (it takes no --keep-*)", 2)
        rep = _partitioned_archive(ctx, plan_dir, list(runs) or None, when, idle, storage_class, retention_class,
                                   expire_after, executor or "local", scheduler, partitions or 8, as_json)
    else:
        rep = _archive(ctx, runs, when, storage_class, retention_class, expire_after, idle, keep, bundle_min)
    if as_json:
        emit_json({"runs": rep.runs, "skipped": rep.skipped, "bundles": rep.bundles, "checkpoints": rep.checkpoints,
                   "pruned": rep.pruned,
                   "bytes_before": rep.bytes_before, "bytes_after": rep.bytes_after, "index_bytes": rep.index_bytes,
                   "storage_class": rep.storage_class,
                   **({"partitioned": rep.partitioned} if hasattr(rep, "partitioned") else {})})
        return
    lines = [("archived", f"{plural(len(rep.runs), 'run')}, {plural(rep.checkpoints, 'checkpoint')}; "
                          f"{plural(len(rep.skipped), 'run')} skipped"),
             ("bundles", f"{len(rep.bundles)} in {rep.storage_class}" + "".join(f"\n  {b}" for b in rep.bundles)),
             ("hot packs replaced", human_size(rep.bytes_before)),
             ("bundle bytes", human_size(rep.bytes_after)),
             ("hot index bytes", human_size(rep.index_bytes))]
    if keep:
        lines.insert(1, ("pruned first", plural(len(rep.pruned), "checkpoint") + " the policy does not keep"))
    lines += skipped_lines(rep.skipped)
    if rep.runs:
        lines.append(("next", "the hot copy is reclaimed by 'snapstore gc' (after its grace period)"))
    write(kv_text(lines))


def skipped_lines(skipped: dict) -> list[tuple[str, str]]:
    """One ``("skipped", "RUN (reason)")`` row per run ``skipped`` (``{run id: why}``) names, in
    run-id order: archive's and its dry run's rows for the runs they leave out."""
    return [("skipped", f"{_run_text(run)} ({why})") for run, why in sorted(skipped.items())]


def _run_text(run: str) -> str:
    """A run id as ``snapstore runs`` prints it: as it is when printable, else quoted (JSON)."""
    return run if run.isprintable() and not run.startswith('"') else json.dumps(run, ensure_ascii=False)


def _partitioned_archive(ctx, plan_dir, runs, when, idle, storage_class, retention_class, expire_after, executor,
                         scheduler, partitions, as_json):
    """``archive --plan DIR``: :func:`snapstore.maintenance.partarchive.partitioned_archive`; returns
    a report with the attributes of :class:`~snapstore.maintenance.archive.ArchiveReport` that are printed."""
    import os
    from datetime import timezone
    from types import SimpleNamespace

    from ..errors import InvalidInputError, SnapstoreError
    from ..maintenance.partarchive import partitioned_archive
    from .output import Progress, plan_progress

    if os.path.exists(plan_dir) and not os.path.isdir(plan_dir):
        raise CommandError(f"--plan {plan_dir}: not a directory (give a directory for the job's files)", 2)
    if idle is not None:
        cut = datetime.now(timezone.utc) - idle
        w = when if when is None or when.tzinfo else when.replace(tzinfo=timezone.utc)
        when = cut if w is None or w > cut else w  # the earlier of the two, as one-process archive
    mgr = state_of(ctx).manager()  # (the repository must exist; the grace period of the GCs beside)
    progress = Progress(not as_json)
    try:
        got = partitioned_archive(state_of(ctx).location, plan_dir, runs, when, storage_class, retention_class,
                                  expire_after, grace_period=mgr.gc_grace_period, stub=mgr.compact_log,
                                  partitions=partitions,
                                  executor=executor, scheduler=scheduler,
                                  progress=plan_progress(progress, "archive --plan"))
    except SnapstoreError as e:  # a job directory of another repository, a bad --scheduler: exit 2
        raise CommandError(str(e), 2 if isinstance(e, InvalidInputError) else 1) from e
    finally:
        progress.clear()
    write(f"archive --plan: {got['partitions_done']}/{got['partitions']} partitions ({executor}, {got['resumed']} "
          f"resumed); results: {plan_dir}\n", err=True)
    return SimpleNamespace(runs=got["runs"], skipped=got["skipped"], bundles=got["bundles"],
                           checkpoints=got["checkpoints"], pruned=[], bytes_before=got["bytes_before"],
                           bytes_after=got["bytes_after"], index_bytes=got["index_bytes"],
                           storage_class=storage_class, partitioned={k: got[k] for k in (
                               "partitions", "partitions_done", "resumed", "requests")})


def _dry_run(ctx, runs, when, storage_class, retention_class, expire_after, idle, keep, bundle_min, as_json):
    """``archive --dry-run``: :meth:`CheckpointManager.archive` with ``dry_run``, printed."""
    rep = state_of(ctx).manager().archive(
        list(runs) or None, when, storage_class, retention_class=retention_class, expire_after_days=expire_after,
        idle=idle.total_seconds() if idle is not None else None, keep=keep, dry_run=True, bundle_min=bundle_min)
    if as_json:
        emit_json({"dry_run": True, "runs": rep.runs, "skipped": rep.skipped, "checkpoints": rep.checkpoints,
                   "pruned": rep.pruned, "bundles": rep.bundles, "raw_bytes": rep.raw_bytes,
                   "hot_bytes": rep.hot_bytes, "storage_class": rep.storage_class, "bundle_min": rep.bundle_min})
        return
    lines = [("would archive", f"{plural(len(rep.runs), 'run')}, {plural(rep.checkpoints, 'checkpoint')}; "
                               f"{plural(len(rep.skipped), 'run')} skipped")]
    if keep:
        lines.append(("would prune first", plural(len(rep.pruned), "checkpoint") + " the policy does not keep "
                                           "(the sizes below count them)"))
    lines.append(("bundles", f"{len(rep.bundles)} in {rep.storage_class} (a run needing at least "
                             f"{human_size(rep.bundle_min)} raw gets its own)"
                  + "".join(f"\n  {b['key']}: {', '.join(_run_text(r) for r in b['runs'])} "
                            f"({plural(b['checkpoints'], 'checkpoint')}, {human_size(b['raw_bytes'])} raw)"
                            for b in rep.bundles)))
    lines += [("bundle bytes", f"about {human_size(min(rep.raw_bytes, rep.hot_bytes))} or less (estimated: the "
                               f"{human_size(rep.raw_bytes)} raw copied in, at zstd -19, take at most what the hot "
                               "packs replaced hold)"),
              ("hot packs replaced", human_size(rep.hot_bytes))]
    lines += skipped_lines(rep.skipped)
    write("dry run: nothing was written\n" + kv_text(lines))


def _archive(ctx, runs, when, storage_class, retention_class, expire_after, idle, keep, bundle_min=None):
    """One-process ``archive``: :meth:`CheckpointManager.archive`; returns its report."""
    mgr = state_of(ctx).manager()
    try:
        return mgr.archive(list(runs) or None, when, storage_class, retention_class=retention_class,
                          expire_after_days=expire_after, idle=idle.total_seconds() if idle is not None else None,
                          keep=keep, bundle_min=bundle_min)
    except KeyboardInterrupt:
        write("interrupted: nothing is lost (a run is switched to its bundle only once the bundle is checked; "
              "the rest read as before); run the same command again to finish\n", err=True)
        raise


@click.command("restore")
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("--tier", type=click.Choice(("bulk", "standard", "expedited")), default="standard", show_default=True,
              help="Retrieval tier (price and delay: bulk cheapest and slowest).")
@click.option("--days", type=click.IntRange(1, 36500), default=7, show_default=True,
              help="Days the restored copy stays readable.")
@click.option("--wait", is_flag=True, help="Wait until every bundle is readable (polls once a minute).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def restore_cmd(ctx, runs, tier, days, wait, as_json):
    """Restore archived runs whose bundles are in GLACIER or DEEP_ARCHIVE, so that they can be read.

    Issues the restore requests and reports each bundle's state: requested, restoring, restored, or
    readable (a class read in place). Exit 0 when all are readable, 3 while some are still restoring.
    """
    mgr = state_of(ctx).manager()
    rep = mgr.restore(list(runs), tier, days, wait=wait)
    if as_json:
        emit_json({"runs": rep.runs, "bundles": rep.bundles, "done": rep.done})
    else:
        write(kv_text([(state, key) for key, state in sorted(rep.bundles.items())] or [("bundles", "none")]))
        if not rep.done:
            write("snapstore: restores take minutes to hours; run the same command again (or with --wait) "
                  "to see their state\n", err=True)
    if not rep.done:
        ctx.exit(3)


@click.command("unarchive")
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def unarchive_cmd(ctx, runs, as_json):
    """Bring archived runs back hot (the reverse of archive).

    Copies what their live checkpoints need from the bundles into a new hot pack per run, checks
    it, then switches the catalogue; a bundle that serves no run any more is deleted by a later
    'snapstore gc'. Bundles in GLACIER or DEEP_ARCHIVE must be restored first ('snapstore restore').
    """
    try:
        rep = state_of(ctx).manager().unarchive(list(runs))
    except KeyboardInterrupt:
        write("interrupted: nothing is lost (every run reads from its bundle or from its new hot pack); run the "
              "same command again to finish\n", err=True)
        raise
    if as_json:
        emit_json({"runs": rep.runs, "skipped": rep.skipped, "packs": rep.packs, "checkpoints": rep.checkpoints,
                   "bytes": rep.bytes, "bundles": sorted(set(rep.bundles)), "released": rep.released})
        return
    lines = [("unarchived", f"{plural(len(rep.runs), 'run')}, {plural(rep.checkpoints, 'checkpoint')} "
                            f"({human_size(rep.bytes)} hot)")]
    for run, why in sorted(rep.skipped.items()):
        lines.append(("skipped", f"{run}: {why}"))
    if rep.released:
        lines.append(("next", f"{plural(len(rep.released), 'bundle')} serving no run now: 'snapstore gc' deletes "
                              f"{'it' if len(rep.released) == 1 else 'them'}"))
    write(kv_text(lines))


COMMANDS = (archive_cmd, restore_cmd, unarchive_cmd)
"""This module's commands."""
