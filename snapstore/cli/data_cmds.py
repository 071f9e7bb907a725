"""The commands that create a repository and read or change its runs: ``init``, ``import``,
``runs``, ``list``, ``show``, ``export``, ``diff``, ``rollback``, ``fork`` and ``delete``.

Each is a click command; :data:`COMMANDS` lists them in the order ``snapstore --help`` shows them.
"""

from __future__ import annotations

import json
import os
import shutil
import shlex
import sys
import time

import click

from ..errors import ColdObjectError, InvalidInputError, RepositoryError, RunNotFound, SnapstoreError
from ..importers import FORMATS, rebuild_record
from ..importers.replay import IMPORT_STATE_KEY, ImportResult, load_for_import, other_fields, replay
from ..manager.facade import CheckpointManager
from ..manager.outfile import output_file, output_target
from ..stores.probe import find_foreign_content
from .output import (CommandError, restore_command, Progress, current_activity, emit_json, human_size, is_s3, iso_time, json_bytes,
                     kv_text, plan_progress, plural, prices_text, request_cost, short, stdin_interactive, summary_json,
                     table_text, usd, write)
from .params import SIZE
from .state import state_of

__all__ = ["COMMANDS", "IMPORT_STATE_KEY", "stdin_interactive"]



def _open_or_init(ctx, allow_nonempty: bool, quiet: bool):
    """The manager of this invocation's repository for an import, the repository created first
    when there is none (a location holding other files is refused unless ``allow_nonempty``);
    says so on stderr unless ``quiet``. Raises CommandError / SnapstoreError."""
    from ..repo.repository import Repository

    st = state_of(ctx)
    store = st.open_store()
    created = False
    try:
        try:
            Repository.open(store, create=False)
        except RepositoryError:
            _refuse_foreign_content(store, allow_nonempty)
            Repository.init(store, exist_ok=True)
            created = True
    except BaseException:
        store.close()
        raise
    mgr = st.adopt(CheckpointManager(store, compact_log=st.compact_log))
    if created and not quiet:
        write(f"initialized new {_kind(store)}snapstore repository at {store.url}\n", err=True)
    return mgr


def _kind(store) -> str:
    """``"encrypted "`` for a store opened with a passphrase or KMS key (a first save through it
    makes an encrypted repository, which the user should hear about), else ``""``."""
    from ..stores.crypt import is_sealed
    return "encrypted " if is_sealed(store) else ""


def _refuse_foreign_content(store, allow: bool) -> None:
    """Refuse to create a repository where other files are (:func:`find_foreign_content`), unless
    ``allow``.

    Raises:
        CommandError: exit status 2, naming the location and one of the files found.
    """
    found = None if allow else find_foreign_content(store)
    if found is not None:
        raise CommandError(f"{store.url} is not empty and holds no snapstore repository (found {found!r}); "
                           "refusing to create one there (choose another --repo, or pass --allow-nonempty)", 2)


# ------------------------------------------------------------------------------------------------
# init

@click.command("init")
@click.option("--level", type=click.IntRange(1, 22), help="zstd compression level for packs [default: 3].")
@click.option("--dict-bytes", type=SIZE, help="raw-content dictionary size per data block; 0 disables "
              "dictionaries [default: 128K].")
@click.option("--cdc-threshold", type=SIZE, help="messages larger than this are split into content-defined "
              "chunks [default: 64K].")
@click.option("--cdc-min", type=SIZE, help="minimum chunk size [default: 16K].")
@click.option("--cdc-avg", type=SIZE, help="average chunk size [default: 64K].")
@click.option("--cdc-max", type=SIZE, help="maximum chunk size [default: 256K].")
@click.option("--leaf-bits", type=click.IntRange(1, 12), help="message-tree leaf fan-out bits [default: 3].")
@click.option("--node-bits", type=click.IntRange(1, 12), help="message-tree node fan-out bits [default: 3].")
@click.option("--max-items", type=click.IntRange(min=2), help="maximum items per tree node [default: 64].")
@click.option("--inline-state-max", type=SIZE, help="session states larger than this are stored as chunks "
              "[default: 4K].")
@click.option("--allow-nonempty", is_flag=True, help="Create the repository even if the directory (or S3 "
              "prefix) already holds other files.")
@click.option("--encrypt", is_flag=True, help="Encrypt every object client-side (docs/format.md §27); the "
              "passphrase comes from $SNAPSTORE_PASSPHRASE, else a prompt.")
@click.option("--kms-key", metavar="ARN", help="With --encrypt: wrap the data key with this AWS KMS key (id, ARN "
              "or alias; credentials from the environment) instead of a passphrase.")
@click.pass_context
def init_cmd(ctx, allow_nonempty, encrypt, kms_key, **settings):
    """Create a repository at --repo (fails if one exists).

    Settings are fixed at creation; options not given keep their defaults. A directory (or S3
    prefix) that holds other files is refused unless --allow-nonempty.
    """
    from ..repo.repository import Repository
    from .key_cmds import passphrase_from_env_or_prompt

    settings = {k: v for k, v in settings.items() if v is not None}
    if kms_key is not None and not encrypt:
        raise CommandError("--kms-key needs --encrypt", 2)
    if kms_key is not None:
        store = state_of(ctx).open_store(None, from_env=False, kms_key=kms_key)
    else:
        store = state_of(ctx).open_store(passphrase_from_env_or_prompt(confirm=True) if encrypt else None,
                                         from_env=False)
    try:
        _refuse_foreign_content(store, allow_nonempty)
        repo = Repository.init(store, **settings)
        cfg = repo.config
        write(f"initialized {'encrypted ' if cfg.encryption else ''}snapstore repository at {store.url} "
              f"(id {cfg.repo_id})\n")
        if settings:
            write("".join(f"  {k} = {getattr(cfg, k)}\n" for k in settings))
    finally:
        store.close()


# ------------------------------------------------------------------------------------------------
# import

def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _dry_run_report(file: str, fmt_name: str, prefix: str, runs: list[str], conversations, as_json: bool) -> None:
    items = []
    for run, conv in zip(runs, conversations):
        items.append({"run": run, "where": conv.where, "checkpoints": len(conv.checkpoints),
                      "messages": len(conv.messages), "kept_fields": other_fields(conv)})
    if as_json:
        emit_json({"file": file, "format": fmt_name, "dry_run": True, "conversations": len(items),
                    "checkpoints": sum(i["checkpoints"] for i in items), "runs": items})
        return
    total = sum(i["checkpoints"] for i in items)
    head = (f"dry run: nothing was written\n{file}: format {fmt_name}, {plural(len(items), 'conversation')}, "
            f"{plural(total, 'checkpoint')} (one per turn), {sum(i['messages'] for i in items)} messages\n")
    rows = [[i["run"], i["where"], str(i["checkpoints"]), str(i["messages"]),
             _clip(", ".join(i["kept_fields"]), 60) or "-"] for i in items]
    write(head + table_text(["RUN", "WHERE", "TURNS", "MESSAGES", "KEPT FIELDS"], rows, right={2, 3}))


@click.command("import")
@click.argument("files", nargs=-1, required=True, metavar="FILE...", type=click.Path(dir_okay=False, path_type=str))
@click.option("--run", "run_prefix", metavar="ID",
              help="Run id (default: the file's name without .json/.jsonl/.traj). Files with several "
                   "conversations get one run per conversation, named ID/NAME.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Trajectory format (default: detect; "
              "'messages' and 'events' are the shape-based readers).")
@click.option("--messages-path", metavar="PATH", help="Where the message lists are, from the top of the "
              "file (of each line of a JSON Lines file): dotted keys, [] for every element of a list, [N] "
              "for one, e.g. 'results[].conversation.messages'. The first [] marks the records.")
@click.option("-n", "--dry-run", is_flag=True, help="Print what was found (conversations, turns, where in the "
              "file, the fields kept besides the messages); write nothing.")
@click.option("--allow-nonempty", is_flag=True, help="Create a repository even if --repo is a directory (or S3 "
              "prefix) that holds other files.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line and no summary on stderr.")
@click.option("--bundle", is_flag=True, help="FILE is a portable bundle ('snapstore export --bundle'): import "
              "its runs exactly (ids, positions, parents, times, summaries, messages, session state, tool outcomes). "
              "The whole file is checked first; a damaged one imports nothing.")
@click.option("--existing", type=click.Choice(("fail", "skip", "resume")), default="fail", show_default=True,
              help="With --bundle, a run the repository already has: fail (nothing imported), skip it, or resume "
                   "an interrupted import of it.")
@click.option("--plan", "plan_dir", metavar="DIR",
              help="Import many FILEs as partitions (groups of files of about equal bytes), the job's files "
                   "(Parquet per partition) in DIR, shared with the workers; each file's runs are named by its "
                   "name (under --run ID/ when given). A re-run of an interrupted job resumes.")
@click.option("--executor", type=click.Choice(["local", "dask"]), default=None,
              help="With --plan: threads here (default), or a Dask distributed cluster (--scheduler).")
@click.option("--scheduler", metavar="ADDR", help="With --executor dask: the scheduler, tcp://HOST:PORT.")
@click.option("--partitions", type=click.IntRange(1, 100_000), default=None,
              help="With --plan: number of partitions (at most one per file). [default: 8]")
@click.pass_context
def import_cmd(ctx, files, run_prefix, fmt, messages_path, dry_run, allow_nonempty, as_json, quiet, bundle, existing,
               plan_dir, executor, scheduler, partitions):
    """Replay a trajectory FILE as one checkpoint per agent turn (several FILEs: with --plan).

    Known formats (OpenAI chat, SWE-agent, mini-swe-agent, OpenHands, Claude Code, tau-bench,
    ShareGPT) are read by their own rules; any other JSON / JSON Lines file whose records hold
    role/content message lists or action/observation event streams at any depth is read by shape.
    The whole file is read and checked before the first save: a bad value fails with one line
    naming the record and the path in it, and nothing is stored.

    What the record holds besides the messages (tool schemas, instructions, metrics, test
    results...) is kept in the session state of each conversation's last checkpoint, under
    "import"; 'snapstore export RUN --record' gives the record back as the file had it.

    Resumable: if a run already holds a prefix of the file's checkpoints, importing again saves only
    the missing ones. A run whose latest checkpoint matches none of the file's is left untouched
    (error).
    """
    given = [f"--{n}" for n, v in (("executor", executor), ("scheduler", scheduler), ("partitions", partitions))
             if v is not None]
    if plan_dir is None and given:
        raise CommandError(f"{', '.join(given)} only apply to a partitioned import: add --plan DIR", 2)
    if plan_dir is not None:
        moot = [o for o, v in (("--bundle", bundle), ("--dry-run", dry_run), ("--existing", existing != "fail")) if v]
        if moot:
            raise CommandError(f"--plan imports trajectory files: it takes no {', '.join(moot)}", 2)
        _partitioned_import(ctx, plan_dir, files, run_prefix, fmt, messages_path, allow_nonempty, as_json, quiet,
                            executor or "local", scheduler, partitions or 8)
        return
    if len(files) > 1:
        raise CommandError(f"{len(files)} files given: import one at a time, or several as partitions with --plan DIR",
                           2)
    file = files[0]
    if bundle:
        _import_bundle(ctx, file, existing, allow_nonempty, as_json, quiet,
                       [o for o, v in (("--run", run_prefix), ("--format", fmt), ("--messages-path", messages_path),
                                       ("--dry-run", dry_run)) if v])
        return
    if existing != "fail":
        raise CommandError("--existing applies to --bundle only", 2)
    t0 = time.monotonic()
    progress = Progress(not quiet)
    loaded = load_for_import(file, run_prefix, fmt, messages_path)
    fmt_name, conversations, prefix, runs = loaded.format, loaded.conversations, loaded.prefix, loaded.runs
    if dry_run:
        _dry_run_report(file, fmt_name, prefix, runs, conversations, as_json)
        return

    mgr = _open_or_init(ctx, allow_nonempty, quiet)

    before = mgr.store.stats.snapshot()
    total_cps = sum(len(c.checkpoints) for c in conversations)
    res = ImportResult()
    try:
        replay(mgr, loaded, res, lambda ci, n, done, total: progress.update(
            f"importing {file}: conversation {ci + 1}/{n}, checkpoint {done + 1}/{total}"))
    except KeyboardInterrupt:
        progress.clear()
        if not quiet:
            write(f"interrupted: {plural(res.saved, 'checkpoint')} saved by this import ({res.done} of {total_cps} in "
                   f"the file now stored); run the same command again to resume: it saves only the missing ones\n",
                   err=True)
        raise
    finally:
        progress.clear()
    per_run, saved, skipped, logical = res.per_run, res.saved, res.skipped, res.logical

    used = mgr.store.stats.since(before)
    elapsed = time.monotonic() - t0
    cost = request_cost(used.counts) if is_s3(mgr.store) else None
    summary = {
        "file": file, "format": fmt_name, "conversations": len(conversations), "runs": per_run,
        "saved": saved, "skipped": skipped, "logical_bytes": logical, "bytes_written": used.bytes_up,
        "bytes_read": used.bytes_down, "requests": dict(used.counts), "elapsed_s": round(elapsed, 3),
        "request_cost_usd": None if cost is None else cost["requests"],
        "empty": [r["run"] for r in per_run if not r["checkpoints"]],  # conversations with no messages: no run
    }
    if as_json:
        emit_json(summary)
    if quiet:
        return
    req = ", ".join(f"{k} {v}" for k, v in used.counts.items() if v) or "none"
    stored = [r for r in per_run if r["checkpoints"]]
    empty = [r["run"] for r in per_run if not r["checkpoints"]]
    runs_text = stored[0]["run"] if len(stored) == 1 else f"{len(stored)} runs under {prefix}/"
    ratio = ""
    if used.bytes_up and logical and saved:
        ratio = (f" ({logical / used.bytes_up:.1f}x smaller)" if logical >= used.bytes_up
                 else f" ({used.bytes_up / logical:.1f}x larger)")
    pairs = [
        ("  conversations", str(len(conversations))),
        ("  checkpoints", f"{saved} saved, {skipped} already present"),
        ("  logical bytes", f"{human_size(logical)} ({logical})"),
        ("  bytes written", f"{human_size(used.bytes_up)} ({used.bytes_up}){ratio}"),
        ("  requests", f"{req} ({used.total()} total)"),
    ]
    if cost is not None:
        pairs.append(("  request cost", f"~{usd(cost['requests'])} at {prices_text(cost['prices'], storage=False)} "
                                        "(S3 Standard list prices, us-east-1)"))
    if empty:
        pairs.append(("  not stored", f"{plural(len(empty), 'conversation')} with no messages (a run needs a "
                                      f"checkpoint): {', '.join(empty[:5])}"
                                      + (f" and {len(empty) - 5} more ('import -n' lists each)" if len(empty) > 5 else "")))
    kept = list(dict.fromkeys(f for conv in conversations for f in other_fields(conv)))
    if kept:
        pairs.append(("  kept", f"{_clip(', '.join(kept), 70)} ('snapstore export RUN --record' gives each "
                                "record back whole)"))
    pairs.append(("  elapsed", f"{elapsed:.2f} s"))
    write(f"imported {file} ({fmt_name}) into {runs_text}\n" + kv_text(pairs), err=True)


def _partitioned_import(ctx, plan_dir, files, run_prefix, fmt, messages_path, allow_nonempty, as_json, quiet,
                        executor, scheduler, partitions) -> None:
    """``import --plan DIR FILE...``: :func:`snapstore.importers.plan.partitioned_import`, the
    repository created first when there is none."""
    from ..importers.plan import name_files, partitioned_import
    from ..maintenance.partitions import absolute_url, check_job_owner

    if os.path.exists(plan_dir) and not os.path.isdir(plan_dir):
        raise CommandError(f"--plan {plan_dir}: not a directory (give a directory for the job's files)", 2)
    t0 = time.monotonic()
    name_files(list(files), run_prefix)  # bad file lists are refused before a repository is created
    check_job_owner(os.path.abspath(plan_dir), absolute_url(state_of(ctx).location))
    _open_or_init(ctx, allow_nonempty, quiet)
    progress = Progress(not quiet and not as_json)
    try:
        got = partitioned_import(state_of(ctx).location, plan_dir, list(files), partitions, executor, scheduler,
                                 run_prefix=run_prefix, format=fmt, messages_path=messages_path,
                                 progress=plan_progress(progress, "import --plan"))
    except SnapstoreError as e:
        raise CommandError(str(e), 2 if isinstance(e, InvalidInputError) else 1) from e
    finally:
        progress.clear()
    got = {k: v for k, v in got.items() if k != "summaries"}
    if as_json:
        emit_json(got)
    if not quiet:
        req = ", ".join(f"{k} {v}" for k, v in sorted(got["requests"].items()) if v) or "none"
        pairs = [("  files", f"{got['files']} ({len(got['errors'])} not imported)"),
                 ("  runs", str(sum(1 for r in got["runs"] if r["checkpoints"]))),
                 ("  checkpoints", f"{got['saved']} saved, {got['skipped']} already present"),
                 ("  logical bytes", f"{human_size(got['logical_bytes'])} ({got['logical_bytes']})"),
                 ("  requests", f"{req} (the partitions')"),
                 ("  elapsed", f"{time.monotonic() - t0:.2f} s")]
        lines = [f"error: {e['error']}\n" for e in got["errors"]]  # (the message names the file)
        write("".join(lines) + f"import --plan: {got['partitions_done']}/{got['partitions']} partitions ({executor}, "
              f"{got['resumed']} resumed), {plural(got['files'], 'file')}; results: {plan_dir}\n" + kv_text(pairs),
              err=True)
    if got["errors"]:
        ctx.exit(1)


def _import_bundle(ctx, file, existing, allow_nonempty, as_json, quiet, other) -> None:
    """``import --bundle FILE``."""
    if other:
        raise CommandError(f"--bundle imports runs as the bundle holds them: it takes no {', '.join(other)}", 2)
    from ..manager.portable import check_bundle, import_bundle

    if not os.path.isfile(file):
        raise CommandError(f"no bundle file {file}", 2)
    held = check_bundle(file)  # a damaged file writes nothing, not even a new repository
    mgr = _open_or_init(ctx, allow_nonempty, quiet)
    progress = Progress(not quiet)
    try:
        rep = import_bundle(mgr, file, existing, lambda run, done, total: progress.update(
            f"import --bundle: run {run}, checkpoint {done}/{total}"), checked=held)
    except KeyboardInterrupt:
        progress.clear()
        if not quiet:
            write("interrupted: the runs imported so far stay; run the same command with --existing resume to "
                  "finish\n", err=True)
        raise
    finally:
        progress.clear()
    if as_json:
        emit_json({"file": file, "runs": rep.runs, "skipped": rep.skipped, "resumed": rep.resumed,
                   "checkpoints": rep.checkpoints, "outcomes": rep.outcomes})
    if not quiet:
        write(f"imported {plural(len(rep.runs), 'run')}, {plural(rep.checkpoints, 'checkpoint')}"
              + (f", {plural(rep.outcomes, 'tool outcome')}" if rep.outcomes else "") + f" from {file}\n"
              + "".join(f"  skipped {r}: {why}\n" for r, why in sorted(rep.skipped.items())), err=True)


# ------------------------------------------------------------------------------------------------
# reading

def _get(mgr: CheckpointManager, run: str, checkpoint: str | None):
    """The checkpoint (or the run's latest); RunNotFound for an empty/unknown run."""
    if checkpoint is None:
        cp = mgr.latest(run)
        if cp is None:
            raise RunNotFound(f"run {run!r} not found")
        return cp
    return mgr.get(run, checkpoint)


@click.command("runs")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option("-l", "--long", "long_", is_flag=True,
              help="Also say which runs are archived, and where (storage classes, from the hot catalogue).")
@click.pass_context
def runs_cmd(ctx, as_json, long_):
    """List the ids of runs that have checkpoints, one per line.

    An id holding a line break or another unprintable character is printed as a JSON string
    (quoted, escaped), so that every line is one run; ``--json`` prints them all that way.
    With ``--long``: a table RUN, ARCHIVED (the storage classes of the bundles holding any of its
    checkpoints, or -); with ``--json`` too, a list of ``{"run_id", "archived": [{"bundle",
    "storage_class", "checkpoints", "created"}]}``."""
    mgr = state_of(ctx).manager()
    runs = mgr.runs()
    if long_:
        where = mgr.archived_runs(runs)
        if as_json:
            emit_json([{"run_id": r, "archived": where[r]} for r in runs])
        elif runs:
            rows = [[r if r.isprintable() and not r.startswith('"') else json.dumps(r, ensure_ascii=False),
                     ", ".join(sorted({b["storage_class"] for b in where[r]})) or "-"] for r in runs]
            write(table_text(["RUN", "ARCHIVED"], rows))
        return
    if as_json:
        emit_json(runs)
    elif runs:
        write("".join((r if r.isprintable() and not r.startswith('"') else json.dumps(r, ensure_ascii=False)) + "\n"
                      for r in runs))


@click.command("list")
@click.argument("run")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="At most N checkpoints (newest first).")
@click.option("--before", "before_seq", type=click.IntRange(min=0), metavar="SEQ",
              help="Only checkpoints whose log position (SEQ column) is below SEQ: the next page of a "
                   "paged listing (give the smallest SEQ of the last page).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of checkpoint summaries.")
@click.pass_context
def list_cmd(ctx, run, limit, before_seq, as_json):
    """List the checkpoints of RUN, newest first (page with --limit N and --before SEQ)."""
    mgr = state_of(ctx).manager()
    items = mgr.list(run, limit=limit, before_seq=before_seq)
    if not items:
        if before_seq is not None and mgr.head(run) is not None:
            if not as_json:
                write(f"run {run!r} has no checkpoint below seq {before_seq}\n", err=True)
            else:
                emit_json([])
            return
        raise RunNotFound(f"run {run!r} not found")
    if as_json:
        emit_json([summary_json(s) for s in items])
        return
    rows = [[s.id, str(s.seq), short(s.step), iso_time(s.created_at), str(s.message_count), short(s.status)]
            for s in items]
    write(table_text(["ID", "SEQ", "STEP", "CREATED (UTC)", "MESSAGES", "STATUS"], rows, right={1, 2, 4}))
    if limit is not None and len(items) == limit and items[-1].seq > 0:
        repo = click.get_current_context().find_root().params.get("repo")
        where = f"--repo {shlex.quote(repo)} " if repo else ""
        write(f"next page: snapstore {where}list {shlex.quote(run)} --limit {limit} --before {items[-1].seq}\n",
              err=True)


@click.command("show")
@click.argument("run")
@click.argument("checkpoint", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def show_cmd(ctx, run, checkpoint, as_json):
    """Show a checkpoint's summary (default: the run's latest), not its messages."""
    mgr = state_of(ctx).manager()
    cold = None
    try:
        cp = _get(mgr, run, checkpoint)
    except ColdObjectError as e:  # archived in a class read only after a restore: the hot summary
        cold = e
        cp = mgr.head(run) if checkpoint is None else mgr.summary(run, checkpoint)
        if cp is None:
            raise RunNotFound(f"run {run!r} not found") from None
    d = summary_json(cp)
    where = mgr.archived(run)
    if cold is None:
        d["has_session_state"] = cp.session_state is not None
        if where:
            d["archived"] = {"bundles": where, "readable": True}
    else:
        d["archived"] = {"bundle": cold.key, "readable": False, "bundles": where}
    if as_json:
        emit_json(d)
        return
    pairs = [("run", cp.run_id), ("checkpoint", cp.id), ("seq", str(cp.seq)), ("step", short(cp.step)),
             ("created", iso_time(cp.created_at, True)), ("parent", cp.parent_id or "-"),
             ("messages", f"{cp.message_count} ({human_size(cp.message_bytes)})"),
             ("token usage", short(cp.token_usage))]
    for label, value in (("status", cp.status), ("agent", cp.agent_id), ("metrics", cp.metrics),
                         ("metadata", cp.metadata)):
        if value is not None:
            pairs.append((label, short(value)))
    if cold is not None:
        pairs.append(("archived", f"{cold.key}: in a cold storage class, not restored (messages and session "
                                  f"state are read after '{restore_command(run, click.get_current_context().find_root().params.get('repo'))}')"))
    else:
        if cp.session_state is not None:
            pairs.append(("session state", human_size(len(json_bytes(cp.session_state)))))
        if where:
            pairs.append(("archived", "; ".join(f"{w['checkpoints']} checkpoint(s) in {w['bundle']} ({w['storage_class']})"
                                                for w in where)))
    write(kv_text(pairs))


@click.command("export")
@click.argument("runs", nargs=-1, metavar="RUN...")
@click.option("-c", "--checkpoint", metavar="ID", help="Checkpoint id (default: the run's latest).")
@click.option("-o", "--output", metavar="FILE", type=click.Path(dir_okay=False, path_type=str),
              help="Write to FILE instead of stdout.")
@click.option("--record", is_flag=True, help="Print the conversation's record as the imported file had it "
              "(its messages and every other field; JSON Lines if the record was a whole JSON Lines file). "
              "Needs the last checkpoint of an import.")
@click.option("--bundle", is_flag=True, help="Write every live checkpoint of each RUN (ids, parents, times, "
              "summaries, messages, session state, tool outcomes) to one portable bundle file (-o FILE), for "
              "'snapstore import --bundle' into any repository. The file holds plaintext.")
@click.option("--all", "all_runs", is_flag=True, help="With --bundle: every run of the repository (instead of RUN...).")
@click.pass_context
def export_cmd(ctx, runs, checkpoint, output, record, bundle, all_runs):
    """Print a checkpoint's message list as JSON, exactly as saved (nothing else on stdout).

    With --bundle: write whole runs to a portable bundle file instead (docs/format.md §30).
    """
    if all_runs:
        if not bundle:
            raise CommandError("--all exports every run to a bundle: give --bundle -o FILE too", 2)
        if runs:
            raise CommandError("give RUN... or --all, not both", 2)
        runs = tuple(state_of(ctx).manager().runs())
        if not runs:
            raise CommandError("the repository holds no run to export", 1)
    elif not runs:
        raise CommandError("export needs a RUN (or --bundle --all -o FILE for every run)", 2)
    if bundle:
        _export_bundle(ctx, runs, checkpoint, output, record)
        return
    if len(runs) != 1:
        raise CommandError(f"export takes one RUN (got {len(runs)}); to export several runs use --bundle -o FILE", 2)
    run = runs[0]
    cp = _get(state_of(ctx).manager(), run, checkpoint)
    what = f"{cp.message_count} messages"
    if record:
        state = cp.session_state
        extras = state.get(IMPORT_STATE_KEY) if isinstance(state, dict) else None
        if not isinstance(extras, dict):
            raise CommandError(f"checkpoint {cp.id} of run {run!r} holds no imported record (the last checkpoint "
                               "of each conversation an import saved holds it)", 1)
        value = rebuild_record(extras, cp.messages)
        if extras.get("jsonl") and isinstance(value, list):
            data = b"".join(json_bytes(v) + b"\n" for v in value)
        else:
            data = json_bytes(value)
        where = str(extras.get("where") or "the whole file").strip("()")
        what = f"the record ({where}) of {extras.get('file', 'the imported file')}"
    else:
        data = json_bytes(cp.messages)
    if output is None or output == "-":
        tty = False
        try:
            tty = sys.stdout.isatty()
        except (AttributeError, ValueError):
            pass
        write(data + (b"\n" if tty and not data.endswith(b"\n") else b""))
        return
    try:  # a regular file written beside and renamed; a FIFO or device written in place; a link through
        where = output_target(output)
        with output_file(output) as f:
            f.write(data)
    except OSError as e:  # name the file asked for, not the temporary one
        raise CommandError(f"cannot write {output}: {e.strerror or e}", 1) from None
    write(f"wrote {what} of {run} checkpoint {cp.id} to {output}{_replaced(where)}\n", err=True)


def _replaced(where) -> str:
    """What the export's closing line adds about the file it wrote over."""
    if where.replaced:
        return " (replaced the file that was there)" if where.target == where.path else \
            f" (through the link: replaced {where.target})"
    return ""


def _export_bundle(ctx, runs, checkpoint, output, record) -> None:
    """``export --bundle RUN... -o FILE``."""
    if checkpoint is not None or record:
        raise CommandError("--bundle writes whole runs: it takes neither --checkpoint nor --record", 2)
    if output is None or output == "-":
        raise CommandError("--bundle needs -o FILE (a bundle is binary; it is written beside FILE and renamed)", 2)
    mgr = state_of(ctx).manager()
    progress = Progress(True)
    try:
        where = output_target(output)
        rep = mgr.export_bundle(list(runs), output, progress=lambda run, done, total: progress.update(
            f"export --bundle: run {run}, checkpoint {done}/{total}"))
    except OSError as e:
        raise CommandError(f"cannot write {output}: {e.strerror or e}", 1) from None
    finally:
        progress.clear()
    write(f"wrote {plural(len(rep.runs), 'run')}, {plural(rep.checkpoints, 'checkpoint')}"
          + (f", {plural(rep.outcomes, 'tool outcome')}" if rep.outcomes else "")
          + f" to {output} ({human_size(rep.bytes)}; {human_size(rep.raw_bytes)} before compression)"
          + _replaced(where) + "\n", err=True)


@click.command("diff")
@click.argument("run")
@click.argument("from_id", metavar="FROM")
@click.argument("to_id", metavar="[TO]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the operations as JSON (the service's "
              "GET /runs/{run}/diff ops: op, fromStart, fromEnd, toStart, toEnd, fromMessages, toMessages).")
@click.pass_context
def diff_cmd(ctx, run, from_id, to_id, as_json):
    """Show how checkpoint TO's messages differ from checkpoint FROM's (TO: the run's latest).

    Messages are compared as exact JSON values (key order included), as the service and the page
    compare them. Each line is an operation on index ranges of FROM's and TO's message lists:
    '=' equal, '-' only in FROM, '+' only in TO (a replaced range shows both). Exit status 0
    whether or not they differ.
    """
    from ..server.service import Service

    mgr = state_of(ctx).manager()
    if to_id is None:
        latest = mgr.latest(run)
        if latest is None:
            raise RunNotFound(f"run {run!r} not found")
        to_id = latest.id
    d = Service(mgr).diff(run, from_id, to_id)
    a, b, ops = d["from"], d["to"], d["ops"]
    if as_json:
        emit_json({"run": run, "from": a.id, "to": b.id, "from_count": a.message_count,
                    "to_count": b.message_count, "ops": ops})
        return
    width = max(40, shutil.get_terminal_size((100, 24)).columns - 12)
    lines = [f"run {run}: {a.id} ({plural(a.message_count, 'message')}) -> {b.id} "
             f"({plural(b.message_count, 'message')})"]
    for op in ops:
        if op["op"] == "equal":
            n = op["fromEnd"] - op["fromStart"]
            lines.append(f"= {plural(n, 'message')} equal (FROM [{op['fromStart']}:{op['fromEnd']}], "
                         f"TO [{op['toStart']}:{op['toEnd']}])")
            continue
        for k, m in enumerate(op["fromMessages"]):
            lines.append(f"- FROM [{op['fromStart'] + k}] {_clip(json_bytes(m).decode('utf-8', 'replace'), width)}")
        for k, m in enumerate(op["toMessages"]):
            lines.append(f"+ TO [{op['toStart'] + k}] {_clip(json_bytes(m).decode('utf-8', 'replace'), width)}")
    added = sum(len(op["toMessages"]) for op in ops if op["op"] != "equal")
    removed = sum(len(op["fromMessages"]) for op in ops if op["op"] != "equal")
    lines.append("identical message lists" if not (added or removed) else
                 f"{plural(added, 'message')} only in TO (+), {plural(removed, 'message')} only in FROM (-)")
    write("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------------
# changing runs

@click.command("rollback")
@click.argument("run")
@click.argument("checkpoint")
@click.pass_context
def rollback_cmd(ctx, run, checkpoint):
    """Make CHECKPOINT the head of RUN again; later checkpoints are deleted."""
    cp = state_of(ctx).manager().rollback(run, checkpoint)
    write(f"rolled back {run} to {cp.id} (seq {cp.seq}, {cp.message_count} messages)\n")


@click.command("fork")
@click.argument("run")
@click.argument("checkpoint")
@click.argument("new_run")
@click.pass_context
def fork_cmd(ctx, run, checkpoint, new_run):
    """Start NEW_RUN at CHECKPOINT of RUN: a reference to its data, no copy (format 2: a few small writes whatever the history's length)."""
    cp = state_of(ctx).manager().fork(run, checkpoint, new_run)
    write(f"forked {run}@{checkpoint} as {new_run} (checkpoint {cp.id}, {cp.message_count} messages)\n")


@click.command("delete")
@click.argument("run")
@click.argument("checkpoint", required=False)
@click.option("-y", "--yes", is_flag=True, help="Delete a whole run without asking.")
@click.pass_context
def delete_cmd(ctx, run, checkpoint, yes):
    """Delete CHECKPOINT of RUN, or the whole RUN (asks for confirmation unless --yes)."""
    mgr = state_of(ctx).manager()
    if checkpoint is not None:
        mgr.delete(run, checkpoint)
        write(f"deleted checkpoint {checkpoint} of {run}\n")
        return
    if not yes:
        if not stdin_interactive():
            raise CommandError(f"refusing to delete run {run!r} without confirmation: stdin is not a terminal "
                               "(pass --yes)", 2)
        items = mgr.list(run)
        if not items:
            raise RunNotFound(f"run {run!r} not found")
        activity = current_activity()
        if activity is not None:
            activity.suspend()
        try:
            yes = click.confirm(f"Delete run {run!r} and its {len(items)} checkpoint(s)?", default=False, err=True)
        finally:
            if activity is not None:
                activity.resume()
        if not yes:
            write(f"not deleted: run {run} is unchanged\n", err=True)
            return
    mgr.delete(run)
    write(f"deleted run {run}\n")


COMMANDS = (init_cmd, import_cmd, runs_cmd, list_cmd, show_cmd, export_cmd, diff_cmd, rollback_cmd, fork_cmd,
            delete_cmd)
"""This module's commands, in help order."""
