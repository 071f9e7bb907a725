"""Run the library and the CLI against one (crafted) repository under a memory limit; print JSON.

Used by ``tests/robustness/test_crafted_repos.py`` in a subprocess::

    python tests/helpers/crafted_driver.py LIMIT_BYTES REPO_PATH...

sets ``RLIMIT_AS`` to ``LIMIT_BYTES`` first, then for each repository runs each library operation (``open``, ``latest``,
``list``, ``get`` of the first checkpoint and of the caller-named one, ``verify(read_data=True)``)
and each CLI command (``export``, ``list``, ``verify --read-data``, ``gc``) in this process, and
prints one JSON object, per repository path: ``seconds`` (wall time of all its operations) and, per operation ``[outcome, text]`` where outcome is
``"ok"``, a ``snapstore.errors`` class name, ``"report"`` (verify: the problems it listed) or
``"CRASH"`` (any other exception, with its traceback), and ``verify_warnings``; per CLI command ``[exit code, stdout +
stderr]``, exit code ``"CRASH"`` if an exception escaped click.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import resource
import sys
import time
import traceback


def main() -> None:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = {}
    for path in sys.argv[2:]:
        t0 = time.monotonic()
        out[path] = drive(path)
        out[path]["seconds"] = time.monotonic() - t0
        gc.collect()  # what one case left behind must not count against the next
    sys.stdout.write(json.dumps(out))


def drive(path: str) -> dict:
    """Run the operations on the repository at ``path``; return their outcomes (see module doc)."""
    from snapstore import CheckpointManager
    from snapstore.cli import cli
    from snapstore.errors import SnapstoreError

    out: dict = {"lib": {}, "cli": {}}

    def lib(name, fn):
        try:
            r = fn()
            out["lib"][name] = list(r) if isinstance(r, tuple) else ["ok", ""]
        except SnapstoreError as e:
            out["lib"][name] = [type(e).__name__, str(e)[:2000]]
        except BaseException:  # noqa: BLE001 - what the test must never see
            out["lib"][name] = ["CRASH", traceback.format_exc()[-4000:]]

    state: dict = {}

    def open_repo():
        state["mgr"] = CheckpointManager(path, create=False)
        state["mgr"].repo  # noqa: B018 - open now

    def first():
        items = state["mgr"].list("r")
        if items:
            state["mgr"].get("r", items[-1].id)

    def verify():
        rep = state["mgr"].verify(read_data=True)
        out["lib"]["verify_warnings"] = ["ok", "\n".join(str(p) for p in rep.warnings)]
        return ("report", "\n".join(str(p) for p in rep.errors)) if rep.errors else ("ok", "")

    lib("open", open_repo)
    if "mgr" in state:
        lib("latest", lambda: state["mgr"].latest("r"))
        lib("list", lambda: state["mgr"].list("r"))
        lib("get_first", first)
        lib("get_custom", lambda: state["mgr"].get("r", "custom"))
        lib("verify", verify)
        with contextlib.suppress(BaseException):
            state["mgr"].close()

    for name, args in (("export", ["export", "r"]), ("list", ["list", "r"]), ("verify", ["verify", "--read-data"]),
                       ("gc", ["gc", "--grace-period", "0"])):
        buf = io.StringIO()
        code: object = 0
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                cli.main(args=["--repo", path, *args], prog_name="snapstore", standalone_mode=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001
            code = "CRASH"
            buf.write(traceback.format_exc()[-4000:])
        out["cli"][name] = [code, buf.getvalue()[-4000:]]
    return out


if __name__ == "__main__":
    main()
