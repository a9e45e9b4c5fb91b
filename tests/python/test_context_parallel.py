"""Context parallelism: sharded RoPE with global positions equals RoPE on the
whole sequence, exactly.

test_example_two_processes runs examples/context_parallel.py: 2 processes, torch.distributed with
gloo on loopback, 4096 tokens, contiguous and zigzag shards, float32 and bfloat16, forward and
backward, all compared with torch.equal (RoPE is per token: the kernel sees the same (token,
position) pairs either way, so there is no rounding difference to allow for). The other tests
check rotary.distributed's helpers in one process."""
import os
import pathlib
import subprocess
import sys

import pytest

import torch  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.distributed as rd  # noqa: E402
import rotary.torch as rt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "context_parallel.py"


def test_zigzag_positions_are_transformer_engines_split():
    # 8 tokens, 2 ranks: 4 chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
    assert rd.zigzag_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert rd.zigzag_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    assert rd.contiguous_positions(8, 2, 1).tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("scheme", ["contiguous", "zigzag"])
def test_shards_and_positions_partition_the_sequence(scheme, world_size):
    seq = 2 * world_size * 5
    x = torch.randn(2, seq, 3)
    shard = rd.zigzag_shard if scheme == "zigzag" else rd.contiguous_shard
    positions = rd.zigzag_positions if scheme == "zigzag" else rd.contiguous_positions
    shards = [shard(x, world_size, r, seq_dim=1) for r in range(world_size)]
    # Round trip exactly; each shard holds exactly the tokens at its positions; positions cover 0..seq-1 once.
    assert torch.equal(rd.unshard(shards, scheme, seq_dim=1), x)
    for r in range(world_size):
        assert torch.equal(shards[r], x[:, positions(seq, world_size, r)])
    all_positions = torch.cat([positions(seq, world_size, r) for r in range(world_size)])
    assert sorted(all_positions.tolist()) == list(range(seq))


def test_bad_arguments_name_the_argument():
    with pytest.raises(rotary.RotaryError, match="seq_len must be a multiple of 4"):
        rd.zigzag_positions(10, 2, 0)
    with pytest.raises(rotary.RotaryError, match="rank must be in"):
        rd.contiguous_positions(8, 2, 2)
    with pytest.raises(rotary.RotaryError, match="scheme"):
        rd.unshard([torch.zeros(1, 2)], "ring")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("world_size", [2, 3])
def test_sharded_rotation_equals_full_rotation_in_one_process(world_size, dtype):
    """Without torch.distributed: every rank's zigzag shard, rotated by its global positions, is
    exactly the matching shard of the full rotation (torch.equal: per-token arithmetic)."""
    torch.manual_seed(7)
    spec = rotary.Spec.preset("llama-3.1-8b").replace(head_dim=64, rotary_dim=64)
    seq = 2 * world_size * 48
    q = torch.randn(1, seq, 4, 64).to(dtype)
    k = torch.randn(1, seq, 2, 64).to(dtype)
    ref_q, ref_k = rt.apply_rotary(q, k, None, spec, layout="bshd")
    for r in range(world_size):
        pos = rd.zigzag_positions(seq, world_size, r).unsqueeze(0)
        got_q, got_k = rt.apply_rotary(rd.zigzag_shard(q, world_size, r), rd.zigzag_shard(k, world_size, r), pos, spec, layout="bshd")
        assert torch.equal(got_q, rd.zigzag_shard(ref_q, world_size, r))
        assert torch.equal(got_k, rd.zigzag_shard(ref_k, world_size, r))
        if r > 0:  # shard-local positions are wrong there (control: the comparison can fail)
            local_q, _ = rt.apply_rotary(rd.zigzag_shard(q, world_size, r), rd.zigzag_shard(k, world_size, r),
                                         None, spec, layout="bshd")
            assert not torch.equal(local_q, rd.zigzag_shard(ref_q, world_size, r))


def test_example_two_processes():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--world-size", "2", "--seq-len", "4096"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    for scheme in ("contiguous", "zigzag"):
        for dtype in ("float32", "bfloat16"):
            for check in ("forward", "backward", "control (shard-local positions differ)"):
                assert f"OK   {scheme} {dtype} {check}" in proc.stdout, report
    assert "OK   contiguous float32 forward via offsets" in proc.stdout, report
    assert "FAIL" not in proc.stdout and "all equal" in proc.stdout, report
