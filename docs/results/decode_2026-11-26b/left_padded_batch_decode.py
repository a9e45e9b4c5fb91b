import sys, time, torch, rotary, rotary.torch as rt
threads = int(sys.argv[2]); torch.set_num_threads(threads); rotary.set_num_threads(threads)
module = torch.nn.Module(); module.is_causal = True
for kv_len in (512, 4096):
    b, h, g, d = 8, 32, 8, 128
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, 1, d, generator=gen); k = torch.randn(b, g, kv_len, d, generator=gen); v = torch.randn(b, g, kv_len, d, generator=gen)
    mask = torch.ones(b, 1, 1, kv_len, dtype=torch.bool)
    for r in range(b): mask[r, :, :, : (r * 37) % 61] = False  # left padding 0..60
    for _ in range(3): rt.rotary_attention_forward(module, q, k, v, mask)
    times = []
    for _ in range(30):
        t = time.perf_counter(); rt.rotary_attention_forward(module, q, k, v, mask); times.append(time.perf_counter() - t)
    times.sort()
    print(f"{sys.argv[1]} threads {threads} batch 8 decode over {kv_len} keys, left-padded: median {times[15]*1e3:.3f} ms (min {times[0]*1e3:.3f})")
