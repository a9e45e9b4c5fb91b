// A core file that reaches up into cpu: Layering.RejectsUpwardInclude expects the layering check
// to name this line. Never compiled.
#include "cpu/kernels.hpp"
