# cmake/rotary_layers.cmake: the layers of rotary and which ones each may use (docs/design.md,
# "Layers"). Edges run down only: core <- cpu <- {bandwidth, analysis, golden, attention, interop} <- cli / python.
# One table, read twice:
#   - at configure time, rotary_check_layer_links() (top-level CMakeLists.txt) checks that each
#     library links only rotary libraries of the layers below it;
#   - by ctest (Layering.IncludesRunDown, cmake/check_layers.cmake), which checks every
#     `#include "..."` in include/rotary and src/<layer>/ against the same table.
# A new layer, public header or library is added here, or both checks fail naming it.

set(ROTARY_LAYERS core cpu bandwidth analysis golden attention interop cli python)

# Source folder (under src/) of each layer.
set(ROTARY_LAYER_DIR_core core)
set(ROTARY_LAYER_DIR_cpu cpu)
set(ROTARY_LAYER_DIR_bandwidth cpu/bandwidth)
set(ROTARY_LAYER_DIR_analysis analysis)
set(ROTARY_LAYER_DIR_golden golden)
set(ROTARY_LAYER_DIR_attention attention)
set(ROTARY_LAYER_DIR_interop interop)
set(ROTARY_LAYER_DIR_cli cli)
set(ROTARY_LAYER_DIR_python python)
# Subfolders of a layer's folder that are part of the layer (checked with its rules): core's
# scaling schemes and its engines, one file each (src/core/scaling/, src/core/engines/).
set(ROTARY_LAYER_PARTS_core scaling engines)

# What each layer may include and link: itself and the layers below it. `hwy` is Highway, which
# stays inside src/cpu (no Highway type leaks out of the kernels' folder: no other layer needs its
# headers).
set(ROTARY_LAYER_USES_core core)
set(ROTARY_LAYER_USES_cpu core cpu hwy)
set(ROTARY_LAYER_USES_bandwidth core cpu bandwidth hwy)
set(ROTARY_LAYER_USES_analysis core cpu analysis)
set(ROTARY_LAYER_USES_golden core cpu golden)
# Attention's kernels are Highway kernels beside the rotation's, sharing its internal loads,
# stores and thread pool (src/cpu/kernels.hpp, dtype_io-inl.h).
set(ROTARY_LAYER_USES_attention core cpu attention hwy)
# Interop: rotary and other implementations' files and conventions: checkpoint
# conversion between pairing conventions on safetensors files, which needs core only (configs,
# core/json.hpp, the atomic file writer); it sits beside analysis and attention, above cpu, so that
# the engine-table exports can build tables with cpu.
set(ROTARY_LAYER_USES_interop core cpu interop)
# cli uses attention: `rotary attention` runs prefill and decode (the KV cache, the other
# encodings) against the float64 reference (src/cli/attention_command.cpp), and `rotary bench`
# times rotary::attention (its attn_* cases).
set(ROTARY_LAYER_USES_cli core cpu bandwidth analysis golden attention interop cli)
set(ROTARY_LAYER_USES_python core cpu analysis attention interop python)

# The layer that defines each public header (include/rotary/<name>.hpp). rotary.hpp, the umbrella,
# is cpu's: it gathers core and cpu, nothing above.
# encodings: ALiBi slopes and the sinusoidal table, one definition for attention and analysis;
# engine_export: the engines' table layouts (vLLM, FlashInfer, flash-attn, TE, llama.cpp).
set(ROTARY_PUBLIC_HEADERS_core error spec hf_config presets frequencies table tensor encodings engine_export)
set(ROTARY_PUBLIC_HEADERS_cpu apply apply_cos_sin rotary)
set(ROTARY_PUBLIC_HEADERS_analysis analysis report diagnose)
set(ROTARY_PUBLIC_HEADERS_attention attention kv_cache)
set(ROTARY_PUBLIC_HEADERS_interop convert)

# The CMake targets of each layer, by every name they are linked by.
set(ROTARY_LAYER_TARGETS_core rotary_core rotary::core)
set(ROTARY_LAYER_TARGETS_cpu rotary_cpu rotary::cpu)
set(ROTARY_LAYER_TARGETS_bandwidth rotary_bandwidth)
set(ROTARY_LAYER_TARGETS_analysis rotary_analysis rotary::analysis)
set(ROTARY_LAYER_TARGETS_golden rotary_golden)
set(ROTARY_LAYER_TARGETS_attention rotary_attention rotary::attention)
set(ROTARY_LAYER_TARGETS_interop rotary_interop rotary::interop)
set(ROTARY_LAYER_TARGETS_cli rotary_cli_commands)
set(ROTARY_LAYER_TARGETS_python rotary_python)

# Sets <out> to the layer a target name belongs to, or to "" if it is not one of rotary's.
function(rotary_layer_of_target name out)
  set(found "")
  foreach(layer IN LISTS ROTARY_LAYERS)
    if(name IN_LIST ROTARY_LAYER_TARGETS_${layer})
      set(found ${layer})
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# Configure-time check: every library links (PUBLIC, PRIVATE or INTERFACE) only rotary libraries
# its layer may use. Fails the configure naming the library and the link.
function(rotary_check_layer_links)
  set(errors "")
  foreach(layer IN LISTS ROTARY_LAYERS)
    foreach(target IN LISTS ROTARY_LAYER_TARGETS_${layer})
      if(NOT TARGET ${target} OR target MATCHES "::")
        continue()
      endif()
      get_target_property(direct ${target} LINK_LIBRARIES)
      get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
      # Static libraries list their private links again, as $<LINK_ONLY:name>.
      set(links "")
      foreach(item IN LISTS direct interface)
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
        list(APPEND links "${item}")
      endforeach()
      list(REMOVE_DUPLICATES links)
      string(REPLACE ";" " " allowed "${ROTARY_LAYER_USES_${layer}}")
      foreach(item IN LISTS links)
        if(NOT item MATCHES "^rotary")
          continue()  # hwy::hwy, Threads::Threads, quadmath, pybind11: not layers
        endif()
        rotary_layer_of_target(${item} used)
        if(used STREQUAL "")
          string(APPEND errors "\n  ${target} links ${item}, which is in no layer (add it to cmake/rotary_layers.cmake)")
        elseif(NOT used IN_LIST ROTARY_LAYER_USES_${layer})
          string(APPEND errors "\n  ${target} (layer ${layer}) links ${item} (layer ${used}); ${layer} may use only: ${allowed}")
        endif()
      endforeach()
    endforeach()
  endforeach()
  if(errors)
    message(FATAL_ERROR "layering: a library links one above it (cmake/rotary_layers.cmake):${errors}")
  endif()
endfunction()
