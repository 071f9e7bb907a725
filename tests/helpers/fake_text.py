"""Seeded agent-like English text for test messages (compresses like real transcripts, not like noise)."""

import random

WORDS = ("the a to of and in is that for it this with on be as are we not file function test should "
         "will can now let me check see need error value return code change fix issue line call class "
         "method module import output run first then look at from by if which when case expected result "
         "update use add new make sure works def self None True raise except traceback assert").split()


def text(rng: random.Random, nbytes: int) -> str:
    """About ``nbytes`` bytes of space-separated words drawn from ``WORDS`` with ``rng``."""
    out, n = [], 0
    while n < nbytes:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)
