"""Decode-step cost of rotary.torch.apply_rotary through its two paths, interleaved in one process:
the custom op (forced by replacing the eager test) and the eager path that calls the kernel directly.
16 sequences x 1 token, Llama-3-8B heads (32 q, 8 kv, head_dim 128), float32, one thread; medians
of 7 rounds of 1000 calls. Usage: .venv/bin/python bench/torch_decode_paths.py"""
import time, torch, rotary, rotary.torch as rt, rotary._torch_ops as ops
torch.set_num_threads(1); rotary.set_num_threads(1)
spec = rotary.Spec.preset("llama-3.1-8b")
q = torch.randn(16, 32, 1, 128); k = torch.randn(16, 8, 1, 128)
pos = torch.full((16, 1), 1000, dtype=torch.int64)
outq, outk = torch.empty_like(q), torch.empty_like(k)
qq, kk = q.clone(), k.clone()
calls = {"fresh": lambda: rt.apply_rotary(q, k, pos, spec),
         "out=": lambda: rt.apply_rotary(q, k, pos, spec, out=(outq, outk)),
         "inplace": lambda: rt.apply_rotary(qq, kk, pos, spec, inplace=True)}
eager = ops._eager_call
def bench(f, n=1000):
    for _ in range(100): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e6
res = {}
for rep in range(7):
    for path in ("op", "eager"):
        ops._eager_call = eager if path == "eager" else (lambda *a: False)
        for name, f in calls.items():
            res.setdefault((path, name), []).append(bench(f))
import statistics
for name in calls:
    print(f"{name:8s} custom op {statistics.median(res[('op', name)]):6.1f} us   eager path {statistics.median(res[('eager', name)]):6.1f} us")
