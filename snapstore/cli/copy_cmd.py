"""``snapstore copy DEST``: the ``--repo`` repository copied exactly to another location (a
directory, a SQLite file, S3, ...), then the copy verified (:mod:`snapstore.maintenance.copy`)."""

from __future__ import annotations

import click

from ..manager.facade import CheckpointManager
from ..maintenance.copy import copy_repository
from ..stores.probe import probe_store
from .output import CommandError, Progress, emit_json, human_size, plural, write
from .state import state_of

__all__ = ["COMMANDS", "copy_cmd"]


@click.command("copy")
@click.argument("dest", metavar="DEST")
@click.option("--no-verify", is_flag=True, help="Do not verify the copy afterwards.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.pass_context
def copy_cmd(ctx, dest, no_verify, as_json, quiet):
    """Copy the repository exactly to DEST (a directory, a .db file, sqlite:///path.db, s3://BUCKET/PREFIX).

    Every object is copied byte for byte; the config goes last, so an interrupted copy is not a
    repository yet and running the same command again resumes it. DEST must be empty, hold an
    interrupted copy, or an earlier copy of this repository (brought up to date). Afterwards the
    copy is verified (exit 1 if that finds errors).
    """
    st = state_of(ctx)
    if not dest.strip():
        raise CommandError("DEST is empty: give a directory, a .db file, sqlite:///path.db or s3://BUCKET/PREFIX", 2)
    from ..stores import open_store

    src = st.open_store(from_env=False)  # an encrypted repository is copied as it is stored (format.md §27)
    ctx.call_on_close(src.close)
    probe_store(dest)
    dst = open_store(dest)
    ctx.call_on_close(dst.close)
    progress = Progress(not (as_json or quiet))
    try:
        report = copy_repository(src, dst, progress=lambda phase, done, total: progress.update(
            f"copying {phase}: {done}/{total}"))
    except KeyboardInterrupt:
        progress.clear()
        if not quiet:
            write(f"interrupted: {dst.url} is not a repository yet (its config is copied last); run the same "
                  "command again to finish: it copies only what is missing\n", err=True)
        raise
    finally:
        progress.clear()
    out = {"source": src.url, "destination": dst.url, "objects": report.objects, "copied": report.copied,
           "skipped": report.skipped, "bytes_copied": report.bytes_copied, "left_out": report.left_out}
    errors: list = []
    if not no_verify:
        mgr = CheckpointManager(dst, create=False)
        try:
            if progress.tty:
                vr = mgr.verify(progress=lambda phase, done, total: progress.update(f"verifying {phase}: {done}/{total}"))
            else:
                vr = mgr.verify()
        finally:
            progress.clear()
            mgr.close()
        errors = [str(p) for p in vr.errors]
        out["verify"] = {"ok": vr.ok, "errors": errors, "warnings": len(vr.warnings)}
    if as_json:
        emit_json(out)
    elif not quiet:
        lines = [f"copied {plural(report.copied, 'object')} ({human_size(report.bytes_copied)}) to {dst.url}"
                 + (f", {report.skipped} already there" if report.skipped else "") + "\n"]
        if report.left_out:
            lines.append(f"left out (a GC's transient objects): {', '.join(report.left_out)}\n")
        lines += [f"error: {e}\n" for e in errors]
        if not no_verify:
            lines.append("verify: OK\n" if not errors else f"verify: FAILED, {plural(len(errors), 'error')}\n")
        write("".join(lines), err=True)
    if errors:
        ctx.exit(1)


COMMANDS = (copy_cmd,)
