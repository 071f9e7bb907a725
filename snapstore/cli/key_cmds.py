"""``snapstore key list|add|remove|rotate|rekey``: key slots and data keys of an encrypted repository (docs/format.md §27).

The current passphrase comes from ``$SNAPSTORE_PASSPHRASE`` (else a prompt), a new one from
``$SNAPSTORE_NEW_PASSPHRASE`` (else a prompt, asked twice).
"""

from __future__ import annotations

import os
import sys

import click

from ..errors import ObjectNotFound
from ..maintenance import keyslots
from .output import CommandError, current_activity, write
from .state import state_of

__all__ = ["COMMANDS", "passphrase_from_env_or_prompt"]


def passphrase_from_env_or_prompt(env: str = "SNAPSTORE_PASSPHRASE", confirm: bool = False,
                                  what: str = "Passphrase") -> str:
    """The passphrase in ``$env`` (a variable name), else one read from the terminal without echo
    (``confirm``: asked twice)."""
    got = os.environ.get(env)
    if got:
        return got
    if got is not None:  # set but empty: a mistake to say, not a prompt that a closed stdin turns into "interrupted"
        raise CommandError(f"${env} is set but empty: give a non-empty passphrase (or unset it to be asked)", 2)
    if not sys.stdin.isatty():  # no prompt (getpass would read /dev/tty or a pipe): say what to set
        raise CommandError(f"no passphrase: set ${env} (stdin is not a terminal, so none is asked for)"
                           + ("; a repository with a KMS slot also opens with $SNAPSTORE_KMS_KEY"
                              if env == "SNAPSTORE_PASSPHRASE" else ""), 1)  # exit 1, as every command without a key
    activity = current_activity()
    if activity is not None:
        activity.suspend()  # the "working..." line must not draw over the prompt while it waits
    try:
        got = click.prompt(what, hide_input=True, confirmation_prompt=confirm)
    finally:
        if activity is not None:
            activity.resume()
    if not got:
        raise CommandError("the passphrase must not be empty", 2)
    return got


def _store(ctx):
    import os
    if os.environ.get("SNAPSTORE_KMS_KEY") and not os.environ.get("SNAPSTORE_PASSPHRASE"):
        store = state_of(ctx).open_store()  # opened through its KMS slot, no passphrase (§27 "KMS slots")
    else:
        store = state_of(ctx).open_store(passphrase_from_env_or_prompt())
    ctx.call_on_close(store.close)
    inner = getattr(store, "inner", store)
    try:
        inner.head("config")
    except ObjectNotFound:
        raise CommandError(f"no snapstore repository at {store.url} (run 'snapstore init --encrypt')", 1) from None
    return store


@click.group("key")
def key_group():
    """Manage the key slots and data keys of an encrypted repository."""


@key_group.command("list")
@click.pass_context
def key_list(ctx):
    """List the key slots (id, KDF, cost)."""
    for s in keyslots.list_slots(_store(ctx)):
        write(f"{s['id']}  {s['kdf']} " + (f"n={s['n']}" if "n" in s else f"key={s['key']}") + "\n")


@key_group.command("add")
@click.option("--kms-key", metavar="ARN", help="Add a slot that this AWS KMS key (id, ARN or alias) opens, "
              "instead of a passphrase slot.")
@click.pass_context
def key_add(ctx, kms_key):
    """Add a slot for a new passphrase ($SNAPSTORE_NEW_PASSPHRASE, else a prompt), or with
    --kms-key one that an AWS KMS key opens (credentials from the environment)."""
    store = _store(ctx)
    if kms_key is not None:
        from ..stores.kms import KmsKey
        write(f"added KMS key slot {keyslots.add_kms_slot(store, KmsKey(kms_key))}\n")
        return
    new = passphrase_from_env_or_prompt("SNAPSTORE_NEW_PASSPHRASE", confirm=True, what="New passphrase")
    write(f"added key slot {keyslots.add_slot(store, new)}\n")


@key_group.command("remove")
@click.argument("slot_id")
@click.pass_context
def key_remove(ctx, slot_id):
    """Remove key slot SLOT_ID (revokes that passphrase; see docs/format.md §27 for what it does not do)."""
    keyslots.remove_slot(_store(ctx), slot_id)
    write(f"removed key slot {slot_id}\n")


@key_group.command("rotate")
@click.pass_context
def key_rotate(ctx):
    """Make a new data key for new objects; only the slot used to open is kept (the others are named, to add again).

    Older objects stay readable under the old key, kept in the config until 'snapstore key rekey'.
    """
    store = _store(ctx)
    before = keyslots.list_slots(store)
    mine = keyslots.opener_slot(store) if len(before) > 1 else None
    kid = keyslots.rotate_key(store)
    after = keyslots.list_slots(store)
    kept = {s["id"] for s in after}
    dropped = [s for s in before if s["id"] not in kept]
    others = [s for s in dropped if s["id"] != mine]
    repo_opt = f"--repo {state_of(ctx).location} "
    lines = [f"new data key {kid}: new objects are sealed under it; run 'snapstore {repo_opt}key rekey' to "
             "rewrite older objects",
             f"the passphrase or KMS key you opened with is kept, in slot {', '.join(sorted(kept))} (new id)"]
    if len(dropped) > 1:  # one of them is the opener's old slot, re-made above under the new id
        if mine is None or len(others) == len(dropped):  # not found (config changed meanwhile): list all
            others, skip = dropped, " (skip the one you opened with)"
        else:
            skip = f" (yours was {mine})"
        lines.append(f"the repository had {len(dropped)} slots; the {len(dropped) - 1} other than yours wrap the old "
                     f"key only and were dropped; add back the ones to keep{skip}:")
        lines += [f"  {s['id']} KMS key {s['key']}: snapstore {repo_opt}key add --kms-key {s['key']}" if s["kdf"] == "kms"
                  else f"  {s['id']} passphrase: SNAPSTORE_NEW_PASSPHRASE=... snapstore {repo_opt}key add"
                  for s in others]
    write("\n".join(lines) + "\n")


@key_group.command("rekey")
@click.pass_context
def key_rekey(ctx):
    """Rewrite every object sealed under an older data key, then drop those keys from the config.

    Stop writers that opened the repository before 'key rotate' first. Safe to interrupt and run again.
    """
    store = _store(ctx)
    done = [0]

    def progress(phase, n, total):
        done[0] += 1
    try:
        got = keyslots.rekey(store, progress=progress)
    except KeyboardInterrupt:  # one line: what is done, and that running again resumes (then exit 130)
        write(f"interrupted: {done[0]} object(s) rewritten under the current key so far; every object still "
              f"reads (the retired keys stay in the config until rekey finishes); run 'snapstore --repo "
              f"{state_of(ctx).location} key rekey' again to resume: it rewrites only what is left\n", err=True)
        raise
    dropped = ", ".join(got["dropped"]) or "none"
    write(f"rewrote {got['rewritten']} object(s) under key {got['key_id']}; dropped retired key(s): {dropped}\n")


COMMANDS = (key_group,)
