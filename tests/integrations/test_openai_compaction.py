"""The SDK's OpenAIResponsesCompactionSession over a SnapstoreSession (issue 27, item 5): the
session implements the SDK's compaction snapshot hook and atomic replace hook, so an item added
by another caller while the compaction request is in flight survives (the replacement sees the
stored suffix changed and is skipped), and a compaction with nothing added meanwhile still
replaces the compacted items by the summary. No network: the compaction client is a fake whose
``responses.compact`` adds the concurrent item through a second session on the same local
repository (a real temp dir) before it answers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

pytest.importorskip("agents.memory.openai_responses_compaction_session")

from agents.memory.openai_responses_compaction_session import OpenAIResponsesCompactionSession  # noqa: E402
from agents.run_internal.items import digest_input_item  # noqa: E402

from snapstore.integrations.openai_agents import SnapstoreSession  # noqa: E402

SUMMARY = {"type": "compaction", "encrypted_content": "summary-of-the-turn"}


def _user(i):
    return {"type": "message", "role": "user", "content": f"question {i}"}


def _assistant(i):
    return {"type": "message", "role": "assistant", "status": "completed", "id": f"msg_{i}",
            "content": [{"type": "output_text", "text": f"answer {i}", "annotations": []}]}


class _FakeClient:
    """``client.responses.compact(**kw)``: runs ``during()`` (the concurrent caller), then
    returns the summary as the compacted output (as the API's response object does)."""

    def __init__(self, during=None):
        self.calls = 0

        async def compact(**kw):
            self.calls += 1
            if during is not None:
                await during()
            return SimpleNamespace(output=[dict(SUMMARY)], usage=None)

        self.responses = SimpleNamespace(compact=compact)


def _automatic(last_turn):
    """The run context the Runner hands an automatic compaction: the last model exchange."""
    return SimpleNamespace(_session_compaction_is_automatic=True,
                           _session_compaction_model_exchange=(tuple(digest_input_item(i) for i in last_turn), None))


async def _trial(repo, sid, concurrent: bool, turns: int = 6):
    s = SnapstoreSession(sid, repo)
    other = SnapstoreSession(sid, repo)  # another caller (another worker, process or machine)
    history = [x for i in range(turns) for x in (_user(i), _assistant(i))]
    await s.add_items(history)
    added = {"type": "message", "role": "user", "content": f"added during compaction ({sid})"}

    async def during():
        await other.add_items([added])

    client = _FakeClient(during if concurrent else None)
    comp = OpenAIResponsesCompactionSession(sid, s, client=client, should_trigger_compaction=lambda ctx: True)
    await comp.run_compaction({"force": True}, wrapper=_automatic(history[-2:]))
    assert client.calls == 1
    got = await SnapstoreSession(sid, repo).get_items()
    s.close()
    other.close()
    return got, history, added


@pytest.mark.parametrize("turns", [1, 6], ids=["whole-history", "suffix"])
def test_compaction_beside_a_concurrent_add_keeps_the_add(tmp_path, turns):
    """1 turn: the compacted suffix is the whole history (before the hooks the SDK cleared the
    session and added the summary: the add was lost every time); 6 turns: a suffix."""
    repo = str(tmp_path / "repo")
    kept = 0
    trials = 20
    for t in range(trials):
        got, history, added = asyncio.run(_trial(repo, f"s{t}", concurrent=True, turns=turns))
        assert got == history + [added], "history changed under a skipped compaction"
        kept += added in got
    assert kept == trials


def test_compaction_without_concurrent_writes_replaces_the_suffix(tmp_path):
    got, history, _ = asyncio.run(_trial(str(tmp_path / "repo"), "solo", concurrent=False))
    assert SUMMARY in got and len(got) < len(history), got  # the hooks really compact
    assert got[:len(got) - 1] == history[:len(got) - 1]     # the older items are kept, in order


def test_manual_compaction_replaces_atomically_and_keeps_a_concurrent_add(tmp_path):
    added = {"type": "message", "role": "user", "content": "added during a manual compaction"}

    async def go():
        s = SnapstoreSession("m", str(tmp_path / "repo"))
        await s.add_items([_user(0), _assistant(0)] * 6)
        other = SnapstoreSession("m", str(tmp_path / "repo"))

        async def during():
            await other.add_items([added])

        comp = OpenAIResponsesCompactionSession("m", s, client=_FakeClient(during))
        await comp.run_compaction({"force": True})
        return await other.get_items()

    assert asyncio.run(go()) == [SUMMARY, added]
