"""What every command of one invocation shares: the ``--repo`` location, the ``--compact-log``
choice, and the one :class:`~snapstore.CheckpointManager` opened for it (closed when the
command ends)."""

from __future__ import annotations

import sys

import click

from ..errors import KeyRequired
from ..manager.facade import CheckpointManager
from ..stores.probe import probe_store

__all__ = ["DEFAULT_REPO", "State", "state_of"]

DEFAULT_REPO = ".snapstore"
"""The repository ``--repo`` names when neither it nor ``$SNAPSTORE_URL`` is given (a directory)."""


class State:
    """The invocation's repository, opened on first use.

    Args:
        location: the ``--repo`` value (a directory, ``file:///path``, ``s3://BUCKET/PREFIX``, ``memory://``).
        compact_log: ``--compact-log`` / ``--no-compact-log``, or None for the store's default.
    """

    def __init__(self, location: str, compact_log: bool | None = None):
        self.location = location
        self.compact_log = compact_log
        self._mgr: CheckpointManager | None = None

    def open_store(self, passphrase: str | None = None, from_env: bool = True, kms_key: str | None = None):
        """The store at ``--repo`` (an S3 endpoint is probed first, see :func:`probe_store`); the
        caller closes it. With ``passphrase`` (or, if ``from_env``, ``$SNAPSTORE_PASSPHRASE``)
        and/or ``kms_key`` (a KMS key id, ARN or alias; or, if ``from_env``, ``$SNAPSTORE_KMS_KEY``;
        AWS credentials, region and endpoint from the environment) it is wrapped in a
        :class:`~snapstore.stores.crypt.SealedStore` (docs/format.md §27).

        Raises:
            StoreError: the S3 endpoint cannot be reached (or another store error of the probe).
            InvalidInputError: the location is not one a store can be opened for.
        """
        from ..stores import open_store
        from ..stores.crypt import keys_from_env, sealed_if_keyed

        probe_store(self.location)
        store = open_store(self.location)
        if from_env:
            passphrase, kms_key = keys_from_env(passphrase, kms_key)
        return sealed_if_keyed(store, passphrase, kms_key)

    def manager(self, create: bool = False) -> CheckpointManager:
        """The checkpoint manager, opened once per invocation and closed when it ends.

        Args:
            create: create the repository if there is none (otherwise it must exist). Without
                ``create``, an encrypted repository opened with no key ($SNAPSTORE_PASSPHRASE,
                $SNAPSTORE_KMS_KEY) asks for its passphrase when stdin is a terminal.
        Raises:
            RepositoryError: no repository at ``--repo`` (and not ``create``), or it cannot be read.
            StoreError: the store cannot be reached.
        """
        if self._mgr is None:
            probe_store(self.location)
            mgr = CheckpointManager(self.location, create=create, compact_log=self.compact_log)
            if not create:
                try:
                    mgr.repo  # open now: a missing repository is an error, not an empty one
                except KeyRequired:
                    mgr.close()
                    if not sys.stdin.isatty():
                        raise
                    # on a terminal, an encrypted repository asks for its passphrase, as init and key do
                    from .key_cmds import passphrase_from_env_or_prompt
                    mgr = CheckpointManager(self.location, create=create, compact_log=self.compact_log,
                                            passphrase=passphrase_from_env_or_prompt())
                    try:
                        mgr.repo
                    except BaseException:
                        mgr.close()
                        raise
            click.get_current_context().find_root().call_on_close(mgr.close)
            self._mgr = mgr
        return self._mgr

    def adopt(self, mgr: CheckpointManager) -> CheckpointManager:
        """Make ``mgr`` (opened by the command on a store it opened) the invocation's manager and
        close it when the invocation ends; returns ``mgr``."""
        self._mgr = mgr
        click.get_current_context().find_root().call_on_close(mgr.close)
        return mgr


def state_of(ctx: click.Context) -> State:
    """The :class:`State` of the invocation ``ctx`` belongs to (set by the ``snapstore`` group)."""
    return ctx.find_object(State)
