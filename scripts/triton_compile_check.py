"""Compiles rotary's Triton attention kernels for an NVIDIA GPU target without a GPU (Triton's
CUDA backend and its bundled ptxas) and reports the shared memory each launch needs: the
variants' compile errors that Triton's interpreter does not raise (a jitted function reading a
plain global, a type that does not lower), and launches that would not fit the target's shared
memory. tests/python/test_triton_attention.py runs it; docs/gpu.md shows it.

python scripts/triton_compile_check.py [--arch 90]  -> JSON lines {"variant": ..., "shared": bytes}
Run without TRITON_INTERPRET (the kernels must be jitted, not interpreted).
"""
import argparse
import json
import os
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("triton_compile_check.py: TRITON_INTERPRET must be unset (got "
             f"{os.environ['TRITON_INTERPRET']!r}): the kernels are compiled, not interpreted")

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from rotary import _triton_attention as ta  # noqa: E402
from rotary import _triton_attention_kernel as kernels  # noqa: E402

TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def signature(fn, dtype):
    pointers = {name: f"*{TYPES[dtype]}" for name in ("q", "k", "v", "o")}
    pointers.update({name: "*fp32" for name in ("lse", "part_acc", "part_m", "part_l", "cos", "sin")},
                    q_rows="*i64", k_rows="*i64")
    return {name: pointers.get(name, "fp32" if name in ("scale", "softcap") else
                               "constexpr" if name.isupper() else "i64") for name in fn.arg_names}


def compile_attention(dtype, dot, rope, split, arch, head_dim=128):
    launch = ta.LAUNCH
    constants = dict(CAUSAL=True, WINDOW=False, ROPE=rope, NEOX=True, ARANGE=True, SOFTCAP=False,
                     HAS_REST=not rope, SPLIT=split, DOT=ta.DOT_CODES[dot], BLOCK_M=launch["block_m"],
                     BLOCK_N=launch["block_n"], BLOCK_D=head_dim, BLOCK_P=head_dim // 2, BLOCK_DV=head_dim)
    fn = kernels.attention_kernel
    source = triton.compiler.ASTSource(fn=fn, signature=signature(fn, dtype), constexprs=constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": launch["num_warps"], "num_stages": launch["num_stages"]})
    return compiled.metadata.shared


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 for sm_90 (H100/H200)")
    parser.add_argument("--quick", action="store_true", help="with fused RoPE only, unsplit")
    args = parser.parse_args()
    variants = []
    for dtype in (torch.float32, torch.bfloat16):
        for dot in ["tf32x3"] if dtype == torch.float32 else ["tf32x3", "storage"]:
            for rope, split in ((True, False),) if args.quick else ((False, False), (True, False), (True, True)):
                variants.append((dtype, dot, rope, split))
    for dtype, dot, rope, split in variants:
        shared = compile_attention(dtype, dot, rope, split, args.arch)
        print(json.dumps({"variant": f"{TYPES[dtype]} {dot} rope={rope} split={split} launch={ta.LAUNCH}",
                          "shared": shared}), flush=True)


if __name__ == "__main__":
    main()
