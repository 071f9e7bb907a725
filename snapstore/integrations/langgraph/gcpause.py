"""Reading a large record without the cyclic garbage collector in the way: :func:`paused_gc`.

Reading the latest checkpoint of a long run builds tens of thousands of small objects (the
pack headers' entries, one LangChain message per stored message). Each 700 allocations start a
collection, and the older generations' collections walk every object the process holds, so in
a process that already holds a large graph state (another saver's, the application's) reading
a 1,000-turn checkpoint spent more time in the collector than in the read (measured: 175-190 ms
of CPU against 100-113 ms with the collector paused, ``benchmarks/langgraph_saver_scale.py``'s
second saver in one process). The objects built are not cycles that need collecting, so the
collector is paused for the read and runs again after it.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic collector (``gc.disable``) for the block, and enable it again after it
    if it was enabled before (a caller that disabled it keeps it disabled). Process-wide: other
    threads' allocations are not collected meanwhile either; reference counting still frees
    everything that is not a cycle."""
    was = gc.isenabled()
    if was:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
