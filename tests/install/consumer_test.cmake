# ctest Install.FindPackageConsumer: `cmake --install` into a fresh prefix, then configure, build
# and run tests/install/consumer against it with find_package(rotary).
#   -DBUILD_DIR=<rotary build dir> -DSOURCE_DIR=<tests/install/consumer> -DWORK_DIR=<scratch>
file(REMOVE_RECURSE "${WORK_DIR}")
foreach(step
    "${CMAKE_COMMAND};--install;${BUILD_DIR};--prefix;${WORK_DIR}/prefix"
    "${CMAKE_COMMAND};-S;${SOURCE_DIR};-B;${WORK_DIR}/build;-G;Ninja;-DCMAKE_BUILD_TYPE=Release;-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix"
    "${CMAKE_COMMAND};--build;${WORK_DIR}/build"
    "${WORK_DIR}/build/consumer"
    "${WORK_DIR}/prefix/bin/rotary;presets")
  execute_process(COMMAND ${step} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "step failed (${result}): ${step}\n${out}\n${err}")
  endif()
  if(step MATCHES "/consumer$")
    set(consumer_out "${out}")
  endif()
endforeach()
# Only the RoPE API is installed: file formats and test helpers are internal (src/core/json.hpp,
# src/cli/npy.hpp, src/golden/golden.hpp). The consumer build compiled every installed header alone.
foreach(internal json npy golden)
  if(EXISTS "${WORK_DIR}/prefix/include/rotary/${internal}.hpp")
    message(FATAL_ERROR "internal header installed: include/rotary/${internal}.hpp")
  endif()
endforeach()
# `rotary bench` finds its PyTorch peer beside the installed command (src/cli/bench_peer.hpp).
if(NOT EXISTS "${WORK_DIR}/prefix/share/rotary/peers/torch_rope_bench.py")
  message(FATAL_ERROR "the PyTorch peer was not installed as share/rotary/peers/torch_rope_bench.py")
endif()
message(STATUS "installed rotary consumed: ${consumer_out}${out}")
