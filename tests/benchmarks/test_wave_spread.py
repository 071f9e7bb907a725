"""benchmarks/wave_spread.py on moto's HTTP server: a fresh latest() of a run with bounded lists
fetches every listed pack, and the printed spread is of those pack GETs; ``--probe`` times each of
them in the child (one probe row per pack GET the proxy saw)."""

from __future__ import annotations

import re

from benchmarks import wave_spread


def test_wave_spread_prints_every_pack_get_and_their_spread(capsys):
    assert wave_spread.main(["--saves", "20", "--seg-limit", "8", "--delay-ms", "5", "--trials", "1",
                             "--verbose"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"5 ms, this, trial 0: (\d+) round trips, (\d+) requests \((\d+) pack GETs started over (\d+) ms\)", out)
    assert m, out
    rts, reqs, packs = (int(m.group(i)) for i in (1, 2, 3))
    # 20 saves under seg_limit 8: at most 8 segments, all read in latest()'s wave
    assert 2 <= packs <= 8 and reqs > packs and rts >= 3
    assert out.count("/packs/") == packs and "pack GETs' start spread median" in out


def test_probe_times_every_pack_get_and_decode(capsys):
    assert wave_spread.main(["--saves", "20", "--seg-limit", "8", "--delay-ms", "5", "--trials", "1",
                             "--probe"]) == 0
    out = capsys.readouterr().out
    packs = int(re.search(r"\((\d+) pack GETs started", out).group(1))
    probe = dict(re.findall(r"(\w+) ([\d.]+)", out.split("probe: ", 1)[1].splitlines()[0]))
    assert int(probe["gets"]) == packs >= 2  # the client saw the same pack GETs the proxy did
    assert int(probe["decodes"]) >= packs  # each pack fetched was decoded
    assert float(probe["cpu_per_start_ms"]) > 0 and float(probe["cpu_starts_ms"]) >= float(probe["cpu_per_start_ms"])
    assert float(probe["send_spread_ms"]) >= 0 and "proxy_lag_median_ms" in probe
