"""Decode-step cost of the Hugging Face drop-in rotary.torch.apply_rotary_pos_emb against
transformers' own apply_rotary_pos_emb (Llama), interleaved in one process: transformers, the
drop-in through its custom op (forced by replacing the eager test), and the drop-in's eager path.
16 sequences x 1 token, 32 q / 8 kv heads, head_dim 128, float32, one thread; medians of 5
rounds of 1000 calls. Usage: .venv/bin/python bench/torch_dropin_decode.py"""
import time, statistics, torch, rotary, rotary.torch as rt
import rotary._torch_ops as ops
from transformers.models.llama import modeling_llama as ml
torch.set_num_threads(1); rotary.set_num_threads(1)
q = torch.randn(16, 32, 1, 128); k = torch.randn(16, 8, 1, 128)
cos = torch.randn(16, 1, 128); sin = torch.randn(16, 1, 128)
hf = ml.apply_rotary_pos_emb
assert all(torch.equal(a, b) for a, b in zip(hf(q, k, cos, sin), rt.apply_rotary_pos_emb(q, k, cos, sin)))
def bench(f, n=1000):
    for _ in range(100): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e6
eager = ops.eager_tensors
import rotary._torch_hf as th
r = {}
for rep in range(5):
    r.setdefault("hf", []).append(bench(lambda: hf(q, k, cos, sin)))
    th.eager_tensors = lambda *a, **kw: False
    r.setdefault("op", []).append(bench(lambda: rt.apply_rotary_pos_emb(q, k, cos, sin)))
    th.eager_tensors = eager
    r.setdefault("eager", []).append(bench(lambda: rt.apply_rotary_pos_emb(q, k, cos, sin)))
for key, v in r.items(): print(key, round(statistics.median(v), 1), "us")
