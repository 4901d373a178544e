# sylvite CMake helpers: one place for warnings, sanitizers and C++ standard.
# Never touch global CMAKE_CXX_FLAGS; everything is per target.

function(sylvite_setup_target tgt)
  target_compile_features(${tgt} PUBLIC cxx_std_20)
  set_target_properties(${tgt} PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_options(${tgt} PRIVATE -Wall -Wextra -Wpedantic -Wno-missing-field-initializers)
  if(SYLVITE_WERROR)
    target_compile_options(${tgt} PRIVATE -Werror)
  endif()
  if(SYLVITE_SANITIZE)
    target_compile_options(${tgt} PUBLIC -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    target_link_options(${tgt} PUBLIC -fsanitize=address,undefined)
  endif()
endfunction()

# sylvite_library(NAME SOURCES ... DEPS ...)
function(sylvite_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  sylvite_setup_target(${name})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
endfunction()

# sylvite_executable(NAME SOURCES ... DEPS ...) -> binary in build/bin
function(sylvite_executable name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  sylvite_setup_target(${name})
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# sylvite_test(NAME SOURCES ... DEPS ...) -> GoogleTest binary registered with ctest
function(sylvite_test name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  sylvite_setup_target(${name})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  # The source dir reaches tests through the environment (set by ctest), not a compile
  # definition: an absolute path on the command line defeats ccache across clones.
  target_compile_options(${name} PRIVATE -include cstdlib)
  target_compile_definitions(${name} PRIVATE
    "SYLVITE_SOURCE_DIR=(::getenv(\"SYLVITE_SOURCE_DIR\") ? ::getenv(\"SYLVITE_SOURCE_DIR\") : \"/nonexistent-set-SYLVITE_SOURCE_DIR\")")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  include(GoogleTest)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS unit ENVIRONMENT "SYLVITE_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    # GTEST_SKIP() shows in ctest as Skipped (scripts/test.sh fails on it under CI=true).
    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()
