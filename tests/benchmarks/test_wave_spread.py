"""benchmarks/wave_spread.py on moto's HTTP server: a fresh latest() of a run with bounded lists
fetches every listed pack, and the printed spread is of those pack GETs."""

from __future__ import annotations

import re

from benchmarks import wave_spread


def test_wave_spread_prints_every_pack_get_and_their_spread(capsys):
    assert wave_spread.main(["--saves", "20", "--seg-limit", "8", "--delay-ms", "5", "--trials", "1"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"trial 0: (\d+) round trips, (\d+) requests \((\d+) pack GETs started over (\d+) ms\)", out)
    assert m, out
    rts, reqs, packs = (int(m.group(i)) for i in (1, 2, 3))
    # 20 saves under seg_limit 8: at most 8 segments, all read in latest()'s wave
    assert 2 <= packs <= 8 and reqs > packs and rts >= 3
    assert out.count("/packs/") == packs and "median spread" in out
