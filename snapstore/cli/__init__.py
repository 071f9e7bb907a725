"""The ``snapstore`` command line: inspect and manage a checkpoint repository.

Usage: ``snapstore [--repo PATH_OR_URL] COMMAND ...`` (``--repo`` defaults to ``$SNAPSTORE_URL``,
else ``./.snapstore``). Commands::

    init      create a repository (explicit settings)
    import    replay a trajectory file as one checkpoint per turn (resumable; any shape holding
              message lists or event streams; -n: show what was found, write nothing)
    runs      list run ids
    list      list a run's checkpoints
    show      one checkpoint's summary (not its messages)
    export    a checkpoint's message list as JSON (stdout or -o FILE)
    diff      how one checkpoint's messages differ from another's
    rollback  make an earlier checkpoint the run's head again
    fork      start a new run at a checkpoint
    delete    delete a checkpoint or a whole run
    prune     apply a retention policy (--keep-last, --keep-daily, --older-than, ...)
    gc        reclaim the space of deleted checkpoints; repack small packs
    stats     repository size, dedup ratio, object counts, requests and cost estimate
    verify    check the repository's integrity
    copy      copy the repository exactly to another location (directory, .db file, S3), resumable
    serve     the HTTP service and its page (the "server" extra)

Machine-readable output (``--json``, ``export``) goes to stdout and nothing else does; progress,
summaries and errors go to stderr. Errors are one line, ``snapstore: error: <message>``.

Exit status: 0 success; 2 bad usage or bad input (unknown option, invalid value, unreadable or
malformed input file); 1 any other failure (unknown run or checkpoint, conflict, store error,
corrupt object); 130 interrupted. ``verify`` exits 1 if it found corrupt objects, 2 if it found
missing objects / dangling references, 3 for other errors (the smallest applicable code wins);
warnings never fail it.

Layout: this module holds the ``snapstore`` group (errors to one-line messages and exit codes) and
:func:`main`; :mod:`.output` what is printed and how, :mod:`.params` the DURATION and SIZE option
types, :mod:`.state` the repository an invocation opens, :mod:`.data_cmds`, :mod:`.maint_cmds` and
:mod:`.copy_cmd` the commands.
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..errors import ColdObjectError, InvalidInputError, SnapstoreError
from ..format.codec import any_int_digits
from . import archive_cmd, copy_cmd, data_cmds, key_cmds, maint_cmds
from .output import Activity, CommandError, Interrupted, restore_command
from .params import parse_duration
from .state import DEFAULT_REPO, State

__all__ = ["cli", "main", "parse_duration"]


class _Group(click.Group):
    """Turns library errors into one-line messages and exit codes (both for ``main()`` and CliRunner):
    bad input exits 2, any other :class:`~snapstore.errors.SnapstoreError` or OS error 1, Ctrl-C 130."""

    def list_commands(self, ctx):
        return list(self.commands)  # help lists commands in definition order

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException):
            raise
        except (KeyboardInterrupt, click.Abort):  # Ctrl-C (click.confirm turns it into Abort)
            raise Interrupted() from None
        except InvalidInputError as e:
            raise CommandError(str(e), 2) from None
        except ColdObjectError as e:  # name the restore command with the --repo this invocation used
            repo = ctx.params.get("repo")
            msg = str(e).replace("'snapstore restore ", f"'{restore_command('', repo)}") if repo else str(e)
            raise CommandError(msg, 1) from None
        except SnapstoreError as e:
            raise CommandError(str(e) or type(e).__name__, 1) from None
        except BrokenPipeError:
            raise  # click's main() handles EPIPE quietly
        except OSError as e:
            where = f"{e.filename}: " if e.filename else ""
            raise CommandError(f"{where}{e.strerror or e}", 1) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--repo", metavar="PATH_OR_URL", envvar="SNAPSTORE_URL", default=None,
              help="Repository: a directory, a .db file, file:///path, sqlite:///path.db, s3://BUCKET/PREFIX or memory://. "
                   "[default: $SNAPSTORE_URL, else ./.snapstore]")
@click.option("--compact-log/--no-compact-log", default=None,
              help="Writers replace manifests covered by a log segment with 0-byte stubs (docs/format.md "
                   "§14). [default: on for a local directory, off elsewhere]")
@click.version_option(__version__, "--version", prog_name="snapstore", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, repo: str | None, compact_log: bool | None):
    """Content-addressed, deduplicated storage for AI-agent checkpoints.

    Exit status: 0 ok, 1 failure (unknown run/checkpoint, conflict, store error), 2 bad usage or
    bad input, 130 interrupted; 'snapstore verify --help' and 'snapstore restore --help'
    give those commands' own codes (verify 3 and 4, restore 3 for 'requested, not yet done').
    """
    if repo is not None and not repo.strip():
        raise CommandError("--repo is empty: give a directory, a .db file, file:///path, sqlite:///path.db, s3://BUCKET/PREFIX or memory://", 2)
    ctx.obj = State(repo if repo is not None else DEFAULT_REPO, compact_log)
    ctx.with_resource(any_int_digits())  # integers of any size, in files read and JSON printed
    if ctx.invoked_subcommand is not None:
        activity = Activity(ctx.invoked_subcommand).start()
        ctx.call_on_close(activity.stop)



for _command in (*data_cmds.COMMANDS, *maint_cmds.COMMANDS, *archive_cmd.COMMANDS, *copy_cmd.COMMANDS,
                 *key_cmds.COMMANDS):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``snapstore``): run the command line and exit with its status.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).
    Raises:
        SystemExit: always, with the exit status (130 for Ctrl-C during parsing or teardown).
    """
    try:
        cli.main(args=argv, prog_name="snapstore")
    except KeyboardInterrupt:  # during argument parsing or teardown
        sys.exit(130)

