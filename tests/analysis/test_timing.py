"""The CPU note beside every figure (``stagedspec/metrics/machine.py``) and the main command's
timing file (``analysis/timing.py``), on hand-written inputs."""

import json

from analysis import timing
from stagedspec.metrics import machine

INTEL = """processor\t: 0
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile
"""
EPYC = """processor\t: 0
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse avx2 fma
"""


def test_cpu_label_names_the_model_and_the_kernel_extensions_in_a_fixed_order():
    assert machine.cpu_model(INTEL) == "Intel(R) Xeon(R) Processor"
    assert machine.cpu_label(INTEL) == "Intel(R) Xeon(R) Processor (AVX-512 BF16, VNNI, AMX, AVX2)"
    assert machine.cpu_label(EPYC) == "AMD EPYC 7B13 (AVX2)"
    assert machine.cpu_label("model name\t: Plain CPU\n") == "Plain CPU"


def test_timing_file_carries_the_parts_and_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "cpu_label", lambda: "Test CPU (AVX2)")
    out = tmp_path / "timing.json"
    timing.main([str(out), "started=1700000000", "install_s=30", "sweep_s=600", "report_s=45"])
    got = json.loads(out.read_text())
    assert got["cpu"] == "Test CPU (AVX2)"
    assert (got["install_s"], got["sweep_s"], got["report_s"], got["total_s"]) == (30, 600, 45, 675)
    assert got["started"] == "2023-11-14 22:13 UTC"
