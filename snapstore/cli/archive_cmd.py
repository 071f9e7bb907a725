"""``snapstore archive RUN...``: runs rewritten into hard-compressed bundles in a storage class
(:mod:`snapstore.maintenance.archive`, docs/format.md §28); ``snapstore restore RUN...``: their cold
bundles restored (:mod:`snapstore.maintenance.restore`)."""

from __future__ import annotations

from datetime import datetime

import click

from ..format.bundle import STORAGE_CLASSES
from .params import DURATION
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
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def archive_cmd(ctx, runs, finished_before, storage_class, retention_class, expire_after, as_json, idle, **rules):
    """Archive runs (all runs without RUN) into bundles: one per large run, small runs grouped.

    Each bundle is written, read back and checked, then switched in by a small hot index record;
    listing, summaries and retention never read a bundle. The hot copy of the data becomes garbage:
    'snapstore gc' reclaims it after its grace period. Reading an archived checkpoint reads the
    bundle with byte ranges.
    """
    mgr = state_of(ctx).manager()
    when = None
    if finished_before is not None:
        try:
            when = datetime.fromisoformat(finished_before)  # naive: UTC
        except ValueError as e:
            raise CommandError(f"--finished-before: not an ISO-8601 UTC time: {finished_before!r} ({e})", 2) from e
    keep = {k: v for k, v in rules.items() if v is not None} or None
    try:
        rep = mgr.archive(list(runs) or None, when, storage_class, retention_class=retention_class,
                          expire_after_days=expire_after, idle=idle.total_seconds() if idle is not None else None,
                          keep=keep)
    except KeyboardInterrupt:
        write("interrupted: nothing is lost (a run is switched to its bundle only once the bundle is checked; "
              "the rest read as before); run the same command again to finish\n", err=True)
        raise
    if as_json:
        emit_json({"runs": rep.runs, "skipped": rep.skipped, "bundles": rep.bundles, "checkpoints": rep.checkpoints,
                   "pruned": rep.pruned,
                   "bytes_before": rep.bytes_before, "bytes_after": rep.bytes_after, "index_bytes": rep.index_bytes,
                   "storage_class": rep.storage_class})
        return
    lines = [("archived", f"{plural(len(rep.runs), 'run')}, {plural(rep.checkpoints, 'checkpoint')}"),
             ("bundles", f"{len(rep.bundles)} in {rep.storage_class}" + "".join(f"\n  {b}" for b in rep.bundles)),
             ("hot packs replaced", human_size(rep.bytes_before)),
             ("bundle bytes", human_size(rep.bytes_after)),
             ("hot index bytes", human_size(rep.index_bytes))]
    if keep:
        lines.insert(1, ("pruned first", plural(len(rep.pruned), "checkpoint") + " the policy does not keep"))
    for run, why in sorted(rep.skipped.items()):
        lines.append(("skipped", f"{run}: {why}"))
    if rep.runs:
        lines.append(("next", "the hot copy is reclaimed by 'snapstore gc' (after its grace period)"))
    write(kv_text(lines))


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
