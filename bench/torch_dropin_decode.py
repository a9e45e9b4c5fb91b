"""Decode-step cost of the Hugging Face drop-in rotary.torch.apply_rotary_pos_emb against
transformers' own apply_rotary_pos_emb (Llama), interleaved in one process:
  hf       transformers' function (eager torch);
  binding  the drop-in as users get it: one binding call per tensor (module.cpp, torch_cos_sin_eager);
  python   the drop-in's Python eager path (the binding switched off);
  op       the drop-in through its custom op (the binding and the eager test switched off).
16 sequences x 1 token, 32 q / 8 kv heads, head_dim 128, one thread; medians of --rounds rounds of
1000 calls, wall time and this thread's CPU time (which leaves out waiting for a core on a loaded
machine). Prints the CPU model and the load average.
Usage: .venv/bin/python bench/torch_dropin_decode.py [--dtype float32|bfloat16|float16]"""
import argparse, os, platform, statistics, time
import torch, rotary, rotary.torch as rt
import rotary._torch_cos_sin as th
from transformers.models.llama import modeling_llama as ml

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
parser.add_argument("--rounds", type=int, default=5)
args = parser.parse_args()
dtype = getattr(torch, args.dtype)
torch.set_num_threads(1); rotary.set_num_threads(1)
q = torch.randn(16, 32, 1, 128).to(dtype); k = torch.randn(16, 8, 1, 128).to(dtype)
cos = torch.randn(16, 1, 128).to(dtype); sin = torch.randn(16, 1, 128).to(dtype)
hf = ml.apply_rotary_pos_emb
assert all(torch.equal(a, b) for a, b in zip(hf(q, k, cos, sin), rt.apply_rotary_pos_emb(q, k, cos, sin)))


def bench(f, n=1000):
    for _ in range(100): f()
    t, c = time.perf_counter(), time.thread_time()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e6, (time.thread_time() - c) / n * 1e6


binding, eager = th._rotary.torch_cos_sin_eager, th.eager_tensors


class Off:
    """The binding off (returns None: the Python path runs), and for `op` the eager test too."""
    def __init__(self, op): self.op = op
    def __enter__(self):
        th._rotary.torch_cos_sin_eager = lambda *a: None
        if self.op: th.eager_tensors = lambda *a, **kw: False
    def __exit__(self, *exc):
        th._rotary.torch_cos_sin_eager, th.eager_tensors = binding, eager


r = {}
for rep in range(args.rounds):
    r.setdefault("hf", []).append(bench(lambda: hf(q, k, cos, sin)))
    r.setdefault("binding", []).append(bench(lambda: rt.apply_rotary_pos_emb(q, k, cos, sin)))
    with Off(op=False):
        r.setdefault("python", []).append(bench(lambda: rt.apply_rotary_pos_emb(q, k, cos, sin)))
    with Off(op=True):
        r.setdefault("op", []).append(bench(lambda: rt.apply_rotary_pos_emb(q, k, cos, sin)))
model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
             platform.processor())
print(f"# {model}; {args.dtype}; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
for key, v in r.items():
    print(f"{key:8s} wall {statistics.median(x[0] for x in v):7.1f} us   cpu {statistics.median(x[1] for x in v):7.1f} us")
