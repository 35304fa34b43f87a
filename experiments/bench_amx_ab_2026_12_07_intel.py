"""The cols loop on AMX tiles or on VNNI, end to end, on the dev split: ``peers.py`` with every one of
``--ours``' methods run twice per prompt, as ``<method>`` (tiles) and ``<method>_vnni``, interleaved in
one run. The switch is process-wide (``qk_kernels.use_amx``), set as each run makes its drafter, so a
run's target (prefill and verifications), its 0.5B (tree rows) and nothing else change; the bits do not.

    python experiments/bench_amx_ab_2026_12_07_intel.py <peers.py arguments>"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from stagedspec.engine import qk_kernels  # noqa: E402

pair_methods = peers.pair_methods


def _on(make, amx: bool):
    def made():
        if qk_kernels.use_amx(amx) != amx:
            raise SystemExit("this A/B needs AMX tiles (an Intel CPU with AMX-INT8, granted by Linux)")
        return make()

    return made


def doubled(*args, **kw):
    ours = pair_methods(*args, **kw)
    return {**{m: _on(f, True) for m, f in ours.items()}, **{m + "_vnni": _on(f, False) for m, f in ours.items()}}


if __name__ == "__main__":
    peers.pair_methods = doubled
    peers.main(sys.argv[1:])
