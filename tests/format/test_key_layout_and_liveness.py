"""The two format rules with one home each: key layouts parsed by ``format.keys.parse_key`` and the
rollback/tombstone liveness rule of ``format.liveness`` (used by the manager's reads of one run and
by the whole-repository walks of ``maintenance/``), plus GC candidate records (``format.gcstate``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import keys, runmark
from snapstore.format.gcstate import candidates_key, decode_candidates, encode_candidates
from snapstore.format.liveness import HIDDEN, LIVE, ROLLBACK, TOMBSTONE, LogWalk
from snapstore.format.logseg import logseg_key
from snapstore.format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE
from snapstore.format.removals import removals_key
from snapstore.maintenance.runs import classify, list_runs, read_all_runs
from snapstore.manager.history import live_records

PID = bytes.fromhex("0123456789abcdef")


@pytest.mark.parametrize("key, kind, run_key, rest", [
    (keys.CONFIG, "config", None, ""),
    (keys.pack_key(PID), "pack", None, PID.hex()),
    (keys.manifest_key("bR", 5), "manifest", "bR", keys.manifest_key("bR", 5).rsplit("/", 1)[1]),
    (keys.index_key("bR", "ck"), "index", "bR", "ck"),
    (logseg_key("bR", 1023, 1), "logseg", "bR", logseg_key("bR", 1023, 1).rsplit("/", 1)[1]),
    ("runs/bR/x/" + "f" * 16 + ".0a0b0c0d", "removals", "bR", "f" * 16 + ".0a0b0c0d"),
    ("runs/bR/w/outcome", "run", "bR", "w/outcome"),
    (keys.fwd_shard_key(PID), "fwd", None, "0"),
    (keys.fwd_key(PID), "fwd", None, PID.hex()),
    (keys.GC_LOCK, "gc", None, "lock"),
    (keys.FWD_CACHE, "gc", None, "fwd-cache"),
    (candidates_key(1.5, "0a0b0c0d"), "gc", None, "candidates/00000000005dc-0a0b0c0d"),
    (runmark.live_key("bR", 3, "r"), "runmark", None, runmark.live_key("bR", 3, "r")[len("runmarks/"):]),
    ("runs/bR/m", "other", None, "runs/bR/m"),            # too short for a run area
    ("runs/bR/m/a/b", "other", None, "runs/bR/m/a/b"),    # too deep
    ("packs/01/not-hex-at-all", "other", None, "packs/01/not-hex-at-all"),
    ("notes.txt", "other", None, "notes.txt"),
])
def test_parse_key_names_every_area_of_the_layout(key, kind, run_key, rest):
    assert tuple(keys.parse_key(key)) == (kind, run_key, rest)


def test_parse_key_agrees_with_the_builders_of_removal_and_log_segment_keys():
    k = removals_key("bR", 9)
    assert keys.parse_key(k).kind == "removals" and keys.parse_key(k).run_key == "bR"
    assert keys.parse_key(keys.manifest_key("a-b_c", 0)).run_key == "a-b_c"


# ---- liveness: the rule against a declarative statement of it

def _record(kind: str, target: int | None = None):
    return SimpleNamespace(kind=kind, target={"seq": target} if target is not None else None)


@st.composite
def logs(draw):
    """A run's log: position -> record, with rollback targets below their own position."""
    n = draw(st.integers(1, 12))
    out = {}
    for s in sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=n))):
        kind = draw(st.sampled_from([KIND_CHECKPOINT] * 3 + [KIND_ROLLBACK, KIND_TOMBSTONE]))
        if kind == KIND_ROLLBACK and s > 0:
            out[s] = _record(kind, draw(st.integers(0, s - 1)))
        else:
            out[s] = _record(KIND_CHECKPOINT if kind == KIND_ROLLBACK else kind)
    return out


def _hidden_by_definition(log: dict) -> set:
    """docs/format.md §11 as stated: a position is hidden when an unhidden newer tombstone exists, or an
    unhidden newer rollback record whose target is below it."""
    hidden: set = set()
    for p in sorted(log, reverse=True):
        for q in log:
            if q > p and q not in hidden and (log[q].kind == KIND_TOMBSTONE or (
                    log[q].kind == KIND_ROLLBACK and log[q].target["seq"] < p)):
                hidden.add(p)
                break
    return hidden


@settings(max_examples=300, deadline=None)
@given(logs())
def test_both_readers_of_a_log_apply_the_rule_as_stated(log):
    hidden = _hidden_by_definition(log)
    live = [s for s in sorted(log, reverse=True) if s not in hidden and log[s].kind == KIND_CHECKPOINT]
    walk = LogWalk()
    verdicts = {s: walk.judge(s, log[s]) for s in sorted(log, reverse=True)}
    assert {s for s, v in verdicts.items() if v == HIDDEN} == hidden
    assert [s for s, v in sorted(verdicts.items(), reverse=True) if v == LIVE] == live
    assert all(v in (ROLLBACK, TOMBSTONE) for s, v in verdicts.items() if s not in hidden and s not in live)
    # the whole-repository walk (maintenance/runs.classify)
    got = classify("bR", log)
    assert [id(m) for m in got.live] == [id(log[s]) for s in live]
    assert sorted(got.hidden) == sorted(hidden)
    # the manager's read of one run (manager/history.live_records): live checkpoints down to a tombstone
    seen = list(live_records(sorted(log, reverse=True), log, LogWalk()))
    first_tomb = max((s for s in log if s not in hidden and log[s].kind == KIND_TOMBSTONE), default=None)
    assert [s for s, _, end in seen if not end] == [s for s in live if first_tomb is None or s > first_tomb]


def test_the_bulk_walk_and_the_manager_see_the_same_live_checkpoints(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "repo"))
    msgs = []
    ids = []
    for i in range(6):
        msgs = msgs + [{"role": "user", "content": f"turn {i}"}]
        ids.append(mgr.save("r", msgs, step=i))
    mgr.rollback("r", ids[2])
    mgr.save("r", msgs[:4] + [{"role": "user", "content": "after rollback"}], step=3)
    mgr.save("gone", msgs, step=0)
    mgr.delete("gone")
    listing = list_runs(mgr.repo)
    logs_ = read_all_runs(mgr.repo, listing.manifests)
    by_run = {log.head.run_id: [m.checkpoint_id for m in log.live] for log in logs_.values() if log.head}
    assert by_run["r"] == [s.id for s in mgr.list("r")]
    assert by_run.get("gone", []) == [] and "gone" not in mgr.runs()


# ---- GC candidate records

def test_candidate_records_round_trip_and_refuse_what_they_are_not():
    k = candidates_key(1_700_000_000.25, "deadbeef")
    body = encode_candidates([PID.hex()], [])
    assert decode_candidates(k, body) == ({PID.hex()}, set())
    with pytest.raises(IntegrityError):
        decode_candidates(k, encode_candidates(["NOT-HEX"], []))
    with pytest.raises(IntegrityError):
        decode_candidates(k, b"SNGC garbage")
