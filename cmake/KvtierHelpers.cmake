# Warning flags, sanitizer flags and the kvtier_add_test() helper.

# Warnings on every kvtier target (not on third-party code); as errors only
# with KVTIER_WERROR (development and CI builds: scripts/test), so that a
# user's or packager's build with another compiler version still builds.
function(kvtier_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  if(KVTIER_WERROR)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:C,CXX>:-Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  endif()
endfunction()

# Applies KVTIER_SANITIZE to everything built after this call.
macro(kvtier_setup_sanitizers)
  if(KVTIER_SANITIZE)
    set(_kvtier_san_flags -fsanitize=${KVTIER_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
    add_compile_options(${_kvtier_san_flags})
    add_link_options(${_kvtier_san_flags})
  endif()
endmacro()

# kvtier_add_test(NAME SOURCES a.cc b.cc [LABELS unit] [LIBS x y])
# One GoogleTest binary, discovered per test case, labelled for ctest -L.
function(kvtier_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LABELS;LIBS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  kvtier_target_warnings(${name})
  target_link_libraries(${name} PRIVATE kvtier_internal kvtier_test_support GTest::gtest GTest::gmock GTest::gtest_main ${ARG_LIBS})
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
