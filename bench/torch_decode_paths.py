"""Decode-step cost of rotary.torch.apply_rotary through its three paths, interleaved in one process:
  binding  the eager call in one binding call (bind_torch_eager.cpp, torch_apply_eager): what users get now;
  python   the full Python path's eager branch (checks and descriptors in Python, then the kernel);
  op       the custom op (the full path with its eager branch switched off).
16 sequences x 1 token, Llama-3-8B heads (32 q, 8 kv, head_dim 128), one thread; medians of 7
rounds of 1000 calls, wall time and this thread's CPU time (which leaves out waiting for a core on
a loaded machine); the kernel alone (_rotary.apply on prepared descriptors) for reference.
Prints the CPU model and the load average beside the figures.
Usage: .venv/bin/python bench/torch_decode_paths.py [--dtype float32|bfloat16|float16]"""
import argparse, os, platform, statistics, time
import torch, rotary, rotary.torch as rt, rotary._torch_ops as ops, rotary._rotary as native_module

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
parser.add_argument("--rounds", type=int, default=7)
args = parser.parse_args()
dtype = getattr(torch, args.dtype)
torch.set_num_threads(1); rotary.set_num_threads(1)
spec = rotary.Spec.preset("llama-3.1-8b")
q = torch.randn(16, 32, 1, 128).to(dtype); k = torch.randn(16, 8, 1, 128).to(dtype)
pos = torch.full((16, 1), 1000, dtype=torch.int64)
outq, outk = torch.empty_like(q), torch.empty_like(k)
qq, kk = q.clone(), k.clone()


def full(q, k, out=None, inplace=False):
    return ops._apply_rotary_checked(q, k, pos, spec, None, None, "bhsd", None, None, "forward", inplace, 0, 0, None,
                                     out, "auto")


calls = {"binding": {"fresh": lambda: rt.apply_rotary(q, k, pos, spec),
                     "out=": lambda: rt.apply_rotary(q, k, pos, spec, out=(outq, outk)),
                     "inplace": lambda: rt.apply_rotary(qq, kk, pos, spec, inplace=True)},
         "python": {"fresh": lambda: full(q, k), "out=": lambda: full(q, k, out=(outq, outk)),
                    "inplace": lambda: full(qq, kk, inplace=True)}}
calls["op"] = calls["python"]
prepared = ops._prepare(q, k, outq, outk, pos, None, None, spec._handle, "", "", -1, "bhsd", "forward", 0, 0)
prepared_inplace = ops._prepare(qq, kk, qq, kk, pos, None, None, spec._handle, "", "", -1, "bhsd", "forward", 0, 0)
kernel = {"out=": lambda: native_module.apply(*prepared.args, "kernels"),
          "inplace": lambda: native_module.apply(*prepared_inplace.args, "kernels")}
eager = ops._eager_call


def bench(f, n=1000):
    for _ in range(100): f()
    t, c = time.perf_counter(), time.thread_time()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e6, (time.thread_time() - c) / n * 1e6


res = {}
for rep in range(args.rounds):
    for path in ("binding", "python", "op"):
        ops._eager_call = (lambda *a: False) if path == "op" else eager
        for name, f in calls[path].items():
            res.setdefault((path, name), []).append(bench(f))
    ops._eager_call = eager
    for name, f in kernel.items():
        res.setdefault(("kernel", name), []).append(bench(f))
model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
             platform.processor())
print(f"# {model}; {args.dtype}; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
for which, label in ((0, "wall"), (1, "cpu")):
    print(f"{'mode':8s} {'binding':>9s} {'python':>9s} {'op':>9s} {'kernel':>9s}   (us per call, medians, {label} time)")
    for name in ("fresh", "out=", "inplace"):
        cells = [statistics.median(x[which] for x in res[(p, name)]) if (p, name) in res else float("nan")
                 for p in ("binding", "python", "op", "kernel")]
        print(f"{name:8s} " + " ".join(f"{c:9.1f}" for c in cells))
