"""SnapstoreSession: the OpenAI Agents SDK Session protocol on snapstore (issue 10, deliverable 4).

Real parts: the local store on a temp dir and S3 through moto's HTTP server; the SDK's own
``Runner`` with a scripted ``Model`` (examples/openai_agents_session.py). Races between two
managers on S3 serialise their create-only PUTs in the client, as tests/manager/test_callers.py does
(moto's conditional writes are not atomic; real S3's are).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest
from tests.helpers.s3_fixtures import repo_clients, serialise_creates

pytest.importorskip("agents")

from agents.memory import Session, SessionSettings  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.errors import ConflictError, InvalidInputError, InvalidMessageError, StoreError  # noqa: E402
from snapstore.integrations.openai_agents import SnapstoreSession, parse_run_id, run_id_for  # noqa: E402
from snapstore.stores import LocalStore  # noqa: E402
from tests.helpers import paths

ROOT = str(paths.ROOT)
SID = "conv-1"


def run(coro):
    return asyncio.run(coro)


def item(i, role="user"):
    return {"role": role, "content": f"message {i} ✓"}


@pytest.fixture
def repo(request, tmp_path, store_factory):
    """``repo(kind)`` -> a new store on one fresh repository of that kind (:func:`s3_fixtures.repo_clients`)."""
    return repo_clients(request, tmp_path, store_factory)


def test_is_a_session_and_round_trips(tmp_path):
    s = SnapstoreSession(SID, str(tmp_path / "r"), fsync=False)
    assert isinstance(s, Session)
    assert s.session_id == SID and isinstance(s.session_settings, SessionSettings)
    assert run(s.get_items()) == [] and run(s.pop_item()) is None
    batch = [item(0), {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\": [1, 2.5]}"},
             {"type": "function_call_output", "call_id": "c1", "output": "\ud800 lone surrogate, big " + "x" * 70000},
             item(1, "assistant")]
    run(s.add_items(batch))
    run(s.add_items([]))
    assert run(s.get_items()) == batch
    assert run(s.get_items(limit=2)) == batch[-2:]
    assert run(s.get_items(limit=0)) == [] and run(s.get_items(limit=-1)) == batch
    assert run(s.pop_item()) == batch[-1]
    # a new object, as another process: the same history
    assert run(SnapstoreSession(SID, str(tmp_path / "r"), fsync=False).get_items()) == batch[:-1]
    run(s.clear_session())
    assert run(s.get_items()) == [] and run(s.pop_item()) is None
    run(s.add_items([item(5)]))  # after a clear: a fresh session
    assert run(s.get_items()) == [item(5)]
    s.close()


def test_session_settings_limit_and_bad_input(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "r", fsync=False))
    s = SnapstoreSession(SID, mgr, session_settings={"limit": 2})
    run(s.add_items([item(i) for i in range(5)]))
    assert run(s.get_items()) == [item(3), item(4)]
    assert run(s.get_items(limit=3)) == [item(2), item(3), item(4)]
    with pytest.raises(InvalidMessageError):
        run(s.add_items([{"bad": float("nan")}]))
    with pytest.raises(InvalidMessageError, match=r"items\[1\]"):
        run(s.add_items([item(9), {"role": "user", "content": threading.Lock()}]))
    with pytest.raises(InvalidInputError):
        run(s.add_items({"role": "user"}))
    with pytest.raises(InvalidInputError):
        SnapstoreSession("", mgr)
    with pytest.raises(InvalidInputError):
        SnapstoreSession(SID, mgr, fsync=False)  # options are for a manager it opens
    assert run(s.get_items(limit=10)) == [item(i) for i in range(5)]  # nothing stored by the bad batch
    assert parse_run_id(run_id_for("a\"/b", "x")) == ("a\"/b", "x") and parse_run_id("other") is None


def test_branches_share_items(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "r", fsync=False))
    s = SnapstoreSession(SID, mgr)
    run(s.add_items([item(i) for i in range(6)]))
    assert run(s.create_branch("alt", keep_items=3)) == "alt" and s.current_branch == "alt"
    assert run(s.get_items()) == [item(0), item(1), item(2)]
    run(s.add_items([item("alt")]))
    run(s.switch_to_branch("main"))
    assert run(s.get_items()) == [item(i) for i in range(6)]  # the source is untouched
    run(s.create_branch("copy", switch=False))
    assert s.current_branch == "main"
    got = {b["branch_id"]: (b["message_count"], b["is_current"]) for b in run(s.list_branches())}
    assert got == {"main": (6, True), "alt": (4, False), "copy": (6, False)}
    with pytest.raises(ConflictError):
        run(s.create_branch("alt"))
    with pytest.raises(InvalidInputError):
        run(s.switch_to_branch("nope"))
    with pytest.raises(InvalidInputError):
        run(s.delete_branch("main"))
    run(s.switch_to_branch("alt"))
    with pytest.raises(InvalidInputError):
        run(s.delete_branch("alt"))
    run(s.delete_branch("alt", force=True))
    assert s.current_branch == "main"
    assert [b["branch_id"] for b in run(s.list_branches())] == ["copy", "main"]
    # the branch shares the source's message tree and data: the fork lists the source's packs
    # and stores no message again
    assert CheckpointManager(LocalStore(tmp_path / "r", fsync=False)).verify(read_data=True).ok


@pytest.mark.parametrize("kind", ["local", "s3-http"])
def test_two_machines_race_add_and_pop(repo, kind):
    """Two SnapstoreSession objects on two managers (as two machines), each with two asyncio
    tasks, add batches and pop on one session id at once: every item added is either popped
    exactly once or still there, and each batch's items stay together in order."""
    first, second = repo(kind), repo(kind)
    if kind != "local":
        serialise_creates(first, second)
    rounds = 8 if kind == "local" else 4
    added, popped, errors = [], [], []
    lock = threading.Lock()

    async def worker(sess, name):
        for r in range(rounds):
            batch = [{"role": "user", "content": f"{name}-{r}-a"}, {"role": "assistant", "content": f"{name}-{r}-b"}]
            await sess.add_items(batch)
            with lock:
                added.extend(b["content"] for b in batch)
            got = await sess.pop_item()
            if got is not None:
                with lock:
                    popped.append(got["content"])

    conflicts = [0]

    def counting(mgr):
        save = mgr.save

        def counted(*a, **k):
            try:
                return save(*a, **k)
            except ConflictError:
                with lock:
                    conflicts[0] += 1
                raise
        mgr.save = counted
        return mgr

    def machine(store, m):
        try:
            async def main():
                sess = SnapstoreSession(SID, counting(CheckpointManager(store)))
                await asyncio.gather(worker(sess, f"m{m}t0"), worker(SnapstoreSession(SID, sess.manager), f"m{m}t1"))
            asyncio.run(main())
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))

    ts = [threading.Thread(target=machine, args=(st, m)) for m, st in enumerate((first, second))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(180)
    assert not errors, errors
    left = [i["content"] for i in run(SnapstoreSession(SID, CheckpointManager(repo(kind))).get_items())]
    assert len(popped) == len(set(popped)), "an item was popped twice"
    assert not set(popped) & set(left), "a popped item is still there"
    assert sorted(popped + left) == sorted(added), "an item was lost or duplicated"
    assert len(added) == 2 * 4 * rounds and len(popped) == 4 * rounds
    for i, c in enumerate(left):  # batches are atomic: an a is followed by its b unless b was popped
        if c.endswith("-a") and c[:-2] + "-b" in left:
            assert left[i + 1] == c[:-2] + "-b", left
    assert CheckpointManager(repo(kind)).verify(read_data=True).ok
    print(f"{kind}: {len(added)} added, {len(popped)} popped, {len(left)} left, {conflicts[0]} compare-and-swap "
          "conflicts retried")


class _LostReplies:
    """Wraps a store's put and write_batch (a save at one commit, docs/format.md §18): the next
    ``n`` manifest writes fail with StoreError; with ``land``, the first of them is written before
    it fails (a lost reply), the others are not sent."""

    def __init__(self, store):
        self.store, self.n, self.land, self.puts = store, 0, False, 0
        self._put = store.put
        store.put = self.put
        self._batch = getattr(store, "write_batch", None)
        if self._batch is not None:
            store.write_batch = self.write_batch

    def write_batch(self, puts, deletes=(), deletes_unless=None):
        puts = list(puts)
        self.puts += 1
        if self.n and any("/m/" in p.key for p in puts):
            self.n -= 1
            if self.land:
                self.land = False
                self._batch(puts, deletes, deletes_unless)
            raise StoreError(f"simulated lost reply for {puts[-1].key}")
        return self._batch(puts, deletes, deletes_unless)

    def fail(self, n, land=True):
        self.n, self.land = n, land

    def put(self, key, data):
        self.puts += 1
        if self.n and "/m/" in key:
            self.n -= 1
            if self.land:
                self.land = False
                self._put(key, data)
            raise StoreError(f"simulated lost reply for {key}")
        return self._put(key, data)


def test_lost_reply_is_retried_without_duplicate(tmp_path):
    store = LocalStore(tmp_path / "r", fsync=False)
    lost = _LostReplies(store)
    s = SnapstoreSession(SID, CheckpointManager(store))
    run(s.add_items([item(0)]))
    lost.fail(2)  # the add lands, its reply is lost, the first re-send fails too: the second succeeds
    run(s.add_items([item(1), item(2)]))
    assert run(s.get_items()) == [item(0), item(1), item(2)]
    lost.fail(1)
    assert run(s.pop_item()) == item(2)
    assert run(s.get_items()) == [item(0), item(1)]
    assert CheckpointManager(LocalStore(tmp_path / "r", fsync=False)).verify(read_data=True).ok


def test_unknown_outcome_resolved_by_the_callers_retry(tmp_path):
    """The store stays down past the session's own retries: add_items raises StoreError. The
    caller retries the same batch: it is there once. A pop that raised returns its item on the
    next pop, even after another machine added on top meanwhile."""
    store = LocalStore(tmp_path / "r", fsync=False)
    lost = _LostReplies(store)
    s = SnapstoreSession(SID, CheckpointManager(store))
    other = SnapstoreSession(SID, CheckpointManager(LocalStore(tmp_path / "r", fsync=False)))
    run(s.add_items([item(0)]))
    lost.fail(SnapstoreSession.LOST_REPLY_RETRIES + 1)
    with pytest.raises(StoreError):
        run(s.add_items([item(1)]))
    run(s.add_items([item(1)]))  # the caller's retry
    assert run(s.get_items()) == [item(0), item(1)]
    lost.fail(SnapstoreSession.LOST_REPLY_RETRIES + 1)
    with pytest.raises(StoreError):
        run(s.pop_item())  # it did remove item 1, but the caller does not know
    run(other.add_items([item(2)]))
    assert run(other.get_items()) == [item(0), item(2)]
    assert run(s.pop_item()) == item(1)  # not lost: returned now, once
    assert run(s.pop_item()) == item(2)
    assert run(s.get_items()) == [item(0)]
    # a pending add that never landed (nothing was written) is redone by the retry, once
    lost.fail(SnapstoreSession.LOST_REPLY_RETRIES + 1, land=False)
    with pytest.raises(StoreError):
        run(s.add_items([item(3)]))
    run(s.add_items([item(3)]))
    assert run(other.get_items()) == [item(0), item(3)]
    fresh = CheckpointManager(LocalStore(tmp_path / "r", fsync=False))
    assert fresh.verify(read_data=True).ok
    assert [c.message_count for c in fresh.list(run_id_for(SID))][:2] == [2, 1]


def test_add_costs_new_items_only(tmp_path):
    """An add on a session this object wrote last is a save of only the new items: 2 PUTs and
    no read (the compare-and-swap checks the head it remembers); pops likewise."""
    store = LocalStore(tmp_path / "r", fsync=False)
    counter = _LostReplies(store)
    s = SnapstoreSession(SID, CheckpointManager(store))
    run(s.add_items([item(i) for i in range(50)]))
    counter.puts = 0
    before = dict(store.stats.counts)
    for i in range(16):
        run(s.add_items([item(100 + i)]))
    run(s.pop_item())
    delta = {k: store.stats.counts[k] - before.get(k, 0) for k in store.stats.counts}
    # 2 PUTs per save, plus a tier pack every 4th save and a log segment every 16th
    assert counter.puts <= 2 * 17 + 17 // 4 + 2, counter.puts
    assert delta.get("LIST", 0) == 0 and delta.get("GET", 0) == 0, delta
    # another machine's write makes the next add read the head once, then continue
    run(SnapstoreSession(SID, CheckpointManager(LocalStore(tmp_path / "r", fsync=False))).add_items([item("x")]))
    run(s.add_items([item("y")]))
    assert run(s.get_items(limit=3)) == [item(114), item("x"), item("y")]


def test_example_runs_an_agent_with_a_scripted_model(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        import openai_agents_session as ex
    finally:
        sys.path.pop(0)
    items, branch_items, model = asyncio.run(ex.main(str(tmp_path / "repo")))
    kinds = [i.get("role") or i.get("type") for i in items]
    assert kinds == ["user", "function_call", "function_call_output", "assistant", "user", "assistant"]
    assert items[2]["output"] == "Sunny, 21 C in Lisbon"
    # the second turn, run through another session object, saw the first turn's items
    assert len(model.inputs[2]) == 5 and model.inputs[2][0]["content"] == "What is the weather in Lisbon?"
    # the branch kept the first turn and replaced the second
    assert branch_items[:4] == items[:4] and branch_items[4]["content"] == "Which city did I ask about? Be brief."
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "openai_agents_session.py"),
                          str(tmp_path / "repo2")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "ok 6 items, branch retry: 6 items"


def test_integrations_import_without_openai_agents():
    code = ("import sys; sys.modules['agents'] = None\n"
            "import snapstore.integrations as i\n"
            "from snapstore.errors import MissingDependencyError\n"
            "try:\n    i.SnapstoreSession\nexcept MissingDependencyError as e:\n    print('missing:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install 'snapstore[openai]'" in out.stdout


def test_unknown_outcome_found_in_the_history(tmp_path):
    """A lost add, then another session on the same manager adds on top (the manager's view of
    the head moves past it): the caller's retry finds its batch in the run's history by the op id
    it stamped, and adds nothing."""
    store = LocalStore(tmp_path / "r", fsync=False)
    lost = _LostReplies(store)
    mgr = CheckpointManager(store)
    s, t = SnapstoreSession(SID, mgr), SnapstoreSession(SID, mgr)
    run(s.add_items([item(0)]))
    lost.fail(SnapstoreSession.LOST_REPLY_RETRIES + 1)
    with pytest.raises(StoreError):
        run(s.add_items([item(1)]))
    run(t.add_items([item(2)]))
    run(s.add_items([item(1)]))
    assert run(t.get_items()) == [item(0), item(1), item(2)]
    run(s.add_items([item(1)]))  # a new call (no pending outcome): a genuine second add
    assert run(t.get_items()) == [item(0), item(1), item(2), item(1)]


def _readme_block(heading):
    import re
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]


def test_readme_example_runs(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(_readme_block("OpenAI Agents SDK"))
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1 ['main', 'retry']"


def test_example_agent_on_s3(store_factory):
    """The same Agent run with the session on S3 (moto's HTTP server)."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        import openai_agents_session as ex
    finally:
        sys.path.pop(0)
    store = store_factory("s3-http")
    items, branch_items, _ = asyncio.run(ex.main(CheckpointManager(store)))
    assert len(items) == 6 and len(branch_items) == 6
    assert run(SnapstoreSession("user-42", CheckpointManager(store)).get_items()) == items
