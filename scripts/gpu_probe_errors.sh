#!/usr/bin/env bash
# Does a C++ exception reach Python as an exception on this machine? Each case runs in a fresh
# process and prints its exit code and last line (139: a segmentation fault). Cases: rotary's
# extension (with the GIL held and released, before and after torch), torch's own, and a minimal
# pybind11 module built here (alone, and linked with Highway as rotary's extension is).
spec="rotary.Spec.preset('llama-3.1-8b')"
numpy_call="rotary.apply(np.ones((1, 2, 2, 32), np.float32), None, None, $spec, layout='bshd')"
torch_call="rt.apply_rotary(torch.randn(1, 2, 2, 32), None, None, $spec, layout='bshd')"
probe=/tmp/rotary-probe
mkdir -p $probe
cat > $probe/probe.cpp <<'CPP'
#include <pybind11/pybind11.h>
#include <stdexcept>
namespace py = pybind11;
struct ProbeError : std::runtime_error { using std::runtime_error::runtime_error; };
PYBIND11_MODULE(probe, m) {
  static py::exception<ProbeError> error(m, "ProbeError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try { if (p) std::rethrow_exception(p); } catch (const ProbeError& e) { py::set_error(error, e.what()); }
  });
  m.def("plain", [] { throw std::runtime_error("plain"); });
  m.def("custom", [] { throw ProbeError("custom"); });
  m.def("released", [] { py::gil_scoped_release release; throw ProbeError("released"); });
}
CPP
suffix=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
flags="-O2 -shared -fPIC -std=c++20 -fvisibility=hidden $(python3 -m pybind11 --includes)"
mkdir -p $probe/plain $probe/hwy
g++ $flags $probe/probe.cpp -o $probe/plain/probe$suffix 2>&1 | tail -3
g++ $flags $probe/probe.cpp -o $probe/hwy/probe$suffix -L/tmp/hwy/usr/lib/x86_64-linux-gnu -Wl,--no-as-needed -lhwy 2>&1 | tail -3
run() {
  out=$(env $1 python3 -X faulthandler -c "
import sys
try:
    $2
    print('no error raised')
except Exception as error:
    print('raised', type(error).__name__, str(error)[:60])" 2>&1)
  echo "rc $? | $1 | ${2:0:70} | $(echo "$out" | tail -1 | cut -c1-120)"
}
for env in "X=1" "GLIBC_TUNABLES=glibc.cpu.x86_shstk=off"; do
  run "$env" "import torch; torch.zeros(-1)"
  run "$env PYTHONPATH=$probe/plain" "import probe; probe.plain()"
  run "$env PYTHONPATH=$probe/plain" "import probe; probe.custom()"
  run "$env PYTHONPATH=$probe/plain" "import probe; probe.released()"
  run "$env PYTHONPATH=$probe/hwy:$PYTHONPATH" "import probe; probe.custom()"
  run "$env" "import rotary; rotary.Spec.preset('no-such-model')"
  run "$env" "import rotary; rotary.Spec.from_json('{')"
  run "$env" "import numpy as np, rotary; $numpy_call"
  run "$env" "import torch, rotary, rotary.torch as rt; $torch_call"
done
so=$(python3 -c "import rotary._rotary as r; print(r.__file__)")
echo "== $so"; ldd "$so"; readelf -n "$so" | grep -i -A2 'property' | head -8
echo "== python3: $(readlink -f $(command -v python3))"; ldd "$(readlink -f $(command -v python3))" | head
python3 -c "import sysconfig; print(sysconfig.get_config_var('CC'), sysconfig.get_config_var('CONFIG_ARGS'))" | cut -c1-300
