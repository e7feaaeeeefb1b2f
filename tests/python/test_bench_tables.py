"""bench/gpu's summaries of GPU runs: tune_table.py (tune_sm90's lines into per-shape ratios
against the library's default) and stall_table.py (ncu's per-instruction stall samples)."""
import importlib.util
import pathlib
import sys


def _load(name):
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "gpu" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tune_table = _load("tune_table")
stall_table = _load("stall_table")


def line(d, n, consumers, persistent, causal, b, lq, lk, tflops, diff="0", chains=1, page=0, splits=1):
    return (f"D={d:3d} N={n:3d} stages=2 consumers={consumers} pingpong=1 persistent={persistent} packing=1 "
            f"v_warps=0 skip=0 chains={chains} o_direct=0 page={page} smem= 92160 causal={causal} "
            f"splits={splits} B={b} Lq={lq:5d} Lk={lk:5d} Hq=16 Hkv=16: 0.100 ms {tflops:6.1f} TFLOP/s "
            f"    10 GB/s of K,V  max|diff vs default| {diff}")


def test_variants_named_by_their_changes_and_divided_by_the_default_of_the_same_shape():
    lines = [
        "=== tune: tune_sm90 512",
        line(128, 128, 2, 1, 0, 1, 16384, 16384, 610.0),
        line(128, 128, 2, 1, 0, 1, 16384, 16384, 640.5, diff="0.000244", chains=4),
        line(128, 128, 2, 1, 1, 1, 16384, 16384, 590.0),
        line(128, 128, 2, 0, 1, 1, 16384, 16384, 560.5),
        line(128, 128, 2, 1, 0, 1, 16384, 16384, 999.0),  # a repeat: the first one counts
        line(64, 128, 3, 1, 0, 4, 1, 8192, 2.0, page=16, splits=4),
        "D= 64 N=128 stages=2 consumers=3 pingpong=1 causal=0: FAILED (an illegal memory access)",
        "unrelated text",
    ]
    results = tune_table.parse(lines)
    full, causal = (0, 1, 16384, 16384), (1, 1, 16384, 16384)
    assert results[(128, "default", full)][0] == 610.0
    assert results[(128, "chains=4", full)] == (640.5, "0.000244")
    assert results[(128, "persistent=0", causal)][0] == 560.5
    assert (64, "skip=0, page=16, splits=4", (0, 4, 1, 8192)) in results  # D = 64 skips by default
    assert len(results) == 5
    text = tune_table.tables(results)
    assert "| chains=4 | 640 (1.050) |  | 0.000244 |" in text
    assert "| persistent=0 |  | 560 (0.950) | 0 |" in text
    assert "full 4 x 1 x 8192" in text and "causal L 16384" in text


def test_nothing_to_read():
    assert tune_table.parse(["no tune lines here"]) == {}


def test_stall_samples_summed_by_instruction_kind(capsys, tmp_path):
    csv = tmp_path / "src.csv"
    csv.write_text("\n".join([
        "the profiled program's own output",
        '"# Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"',
        '"0x10","WARPGROUP.DEPBAR.LE gsb0, 0x0","3,000","10"',
        '"0x20","@!P0 BAR.SYNC.DEFER_BLOCKING R3, 0x100","1,000","10"',
        '"0x30","MUFU.EX2 R24, R24","1000","640"',
        "==PROF== Disconnected from process 1234",
    ]))
    argv, sys.argv = sys.argv, ["stall_table.py", str(csv)]
    try:
        stall_table.main()
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert out.startswith("5000 samples; by instruction kind: WARPGROUP.DEPBAR 60.0%, ")
    assert "BAR.SYNC 20.0%" in out and "MUFU.EX2 20.0%" in out
    assert " 60.0%      0x10  WARPGROUP.DEPBAR.LE gsb0, 0x0" in out
