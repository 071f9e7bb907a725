"""Issue 27 item 5 figure: N trials (default 100) of the SDK's OpenAIResponsesCompactionSession
over a SnapstoreSession with an item added by another session while the compaction request is
in flight (fake client, no network; local repository in a temp dir). Prints how many adds were
kept, per path: automatic whole-history, automatic suffix, manual run_compaction()."""
import asyncio
import sys
import tempfile

sys.path.insert(0, ".")
from tests.integrations.test_openai_compaction import SUMMARY, OpenAIResponsesCompactionSession, SnapstoreSession, _FakeClient, _trial, _user, _assistant  # noqa: E402


async def manual(repo, sid):
    s, other = SnapstoreSession(sid, repo), SnapstoreSession(sid, repo)
    await s.add_items([_user(0), _assistant(0)] * 6)
    added = {"type": "message", "role": "user", "content": "late " + sid}

    async def during():
        await other.add_items([added])
    await OpenAIResponsesCompactionSession(sid, s, client=_FakeClient(during)).run_compaction({"force": True})
    got = await other.get_items()
    return got == [SUMMARY, added]


def main(n=int(sys.argv[1]) if len(sys.argv) > 1 else 100):
    repo = tempfile.mkdtemp()
    for name, turns in (("automatic, whole history", 1), ("automatic, suffix", 6)):
        kept = sum(asyncio.run(_trial(repo, f"{name}{t}", True, turns))[2] in
                   asyncio.run(SnapstoreSession(f"{name}{t}", repo).get_items()) for t in range(n))
        print(f"{name}: {kept} of {n} concurrent adds kept")
    print(f"manual run_compaction: {sum(asyncio.run(manual(repo, f'm{t}')) for t in range(n))} of {n} kept")


if __name__ == "__main__":
    main()
