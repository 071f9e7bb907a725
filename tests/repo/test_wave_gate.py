"""A parallel wave of pack GETs decodes nothing until every running task of the wave has reached its
GET (PackCache.WaveGate): a response decoded while other tasks are still building their requests
would hold their sends back (benchmarks/wave_spread.py --probe, 10,000 saves)."""

from __future__ import annotations

import threading
import time

from snapstore import CheckpointManager
from snapstore.repo.packcache import WaveGate
from snapstore.repo.repository import Repository
from snapstore.stores.memory import MemoryStore


class RoundTrips(MemoryStore):
    """In memory, not ``inline_reads`` (prefetch uses the pool, as on S3), and once ``delay`` is set
    every pack GET takes that long (seconds), as over a network."""

    delay = 0.0

    def get(self, key, byte_range=None):
        if key.startswith("packs/") and self.delay:
            time.sleep(self.delay)
        return super().get(key, byte_range)


def _packs(n: int):
    store = RoundTrips()
    mgr = CheckpointManager(store)
    for i in range(n):
        mgr.save(f"run-{i}", [{"role": "user", "content": f"message {i} " * 50}])
    store.delay = 0.02
    return store, [bytes.fromhex(o.key.rsplit("/", 1)[1]) for o in store.list("packs/")]


def test_no_pack_of_a_wave_is_decoded_before_every_task_reached_its_get():
    store, ids = _packs(6)
    assert len(ids) >= 6
    repo = Repository.open(store, create=False)
    ready, decoded = {}, {}
    key_of, attach = repo.cache.key_of, repo.cache.attach
    first = ids[0]

    def slow_key_of(pid):  # every task but the first's is slow to reach its GET (as a request build),
        if pid != first:  # slower than the first GET's round trip
            time.sleep(0.08)
        ready[pid] = time.monotonic()
        return key_of(pid)

    def timed_attach(pack):
        decoded[pack.id] = time.monotonic()
        return attach(pack)
    repo.cache.key_of = slow_key_of
    repo.cache.attach = timed_attach
    repo.locator.prefetch(ids)
    assert set(decoded) == set(ids) and set(ready) == set(ids)
    # the first response was in long before the others reached their GETs; it waited for them
    assert min(decoded.values()) >= max(ready.values())


def test_the_gate_waits_only_for_running_tasks_before_their_get():
    gate = WaveGate()
    a, b = gate.running(), gate.running()
    gate.sent(a)
    done = threading.Event()
    t = threading.Thread(target=lambda: (gate.wait(), done.set()))
    t.start()
    assert not done.wait(0.05)  # b is running and has not sent
    gate.sent(b)
    gate.sent(b)  # again: no effect
    assert done.wait(1.0)
    t.join()
    gate.wait()  # nothing running before its GET: at once
    c = gate.running()
    t0 = time.monotonic()
    WaveGate.WAIT_MAX, saved = 0.1, WaveGate.WAIT_MAX
    try:
        gate.wait()  # c never sends: the wait is bounded
    finally:
        WaveGate.WAIT_MAX = saved
    assert 0.09 <= time.monotonic() - t0 < 1.0
    gate.sent(c)
