#!/usr/bin/env bash
# Where a crash of rotary's extension happens on this machine: a SIGSEGV handler (LD_PRELOAD)
# prints the native stack, and addr2line / objdump name the extension's frames. Run after a
# build with `-C install.strip=false` (symbols kept).
probe=/tmp/rotary-segv
mkdir -p $probe
cat > $probe/segv.c <<'C'
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
static void handler(int sig, siginfo_t* info, void* context) {
  void* frames[64];
  int n = backtrace(frames, 64);
  char text[64];
  int len = 0;
  unsigned long a = (unsigned long)info->si_addr;
  const char* hex = "0123456789abcdef";
  text[len++] = 'a'; text[len++] = 'd'; text[len++] = 'd'; text[len++] = 'r'; text[len++] = ' ';
  for (int i = 15; i >= 0; --i) text[len++] = hex[(a >> (4 * i)) & 15];
  text[len++] = '\n';
  write(2, text, len);
  backtrace_symbols_fd(frames, n, 2);
  _exit(139);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = handler;
  action.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &action, 0);
}
C
gcc -O1 -shared -fPIC $probe/segv.c -o $probe/segv.so || exit 1
so=$(python3 -c "import rotary._rotary as r; print(r.__file__)")
LD_PRELOAD=$probe/segv.so python3 -c "
import numpy as np, rotary
rotary.apply(np.ones((1, 2, 2, 32), np.float32), None, None, rotary.Spec.preset('llama-3.1-8b'), layout='bshd')
" > $probe/log 2>&1
echo "rc $?"
cat $probe/log | head -40
grep -o '_rotary[^(]*(+0x[0-9a-f]*)' $probe/log | sed 's/.*(+\(0x[0-9a-f]*\))/\1/' | head -20 > $probe/offsets
echo "== frames in $so"
while read -r offset; do
  echo "$offset $(addr2line -f -C -e "$so" "$offset" | head -1 | cut -c1-160)"
done < $probe/offsets
first=$(head -1 $probe/offsets)
if [[ -n $first ]]; then
  start=$(printf '0x%x' $((first - 96))); stop=$(printf '0x%x' $((first + 48)))
  objdump -d -C --no-show-raw-insn --start-address=$start --stop-address=$stop "$so" | tail -40
fi
