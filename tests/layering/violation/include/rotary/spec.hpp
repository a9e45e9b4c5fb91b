// An installed header that includes an internal one: Layering.RejectsUpwardInclude expects the
// layering check to name this line. Never compiled.
#pragma once
#include "core/json.hpp"
