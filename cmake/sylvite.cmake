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

# sylvite_library(NAME SOURCES ... [HEADERS ...] [PROVIDES ...] DEPS ... [PRIVATE_DEPS ...])
# A static library (an INTERFACE library when it has no SOURCES) and its alias
# sylvite::<NAME without the sylvite_ prefix>; DEPS name other libraries by that alias.
# HEADERS: headers this library owns that scripts/check_layers.py cannot attribute by
# itself (a header belongs to the library compiling the .cpp of the same name beside it,
# else to the only library with sources in its folder). PROVIDES: include names of
# generated headers (e.g. sylvite/version.hpp). scripts/check_layers.py reads all of it
# from <build>/sylvite_targets.json (sylvite_write_target_table below).
function(sylvite_library name)
  cmake_parse_arguments(A "" "" "SOURCES;HEADERS;PROVIDES;DEPS;PRIVATE_DEPS" ${ARGN})
  string(REGEX REPLACE "^sylvite_" "" short "${name}")
  if(A_SOURCES)
    add_library(${name} STATIC ${A_SOURCES})
    sylvite_setup_target(${name})
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} INTERFACE ${A_DEPS})
  endif()
  add_library(sylvite::${short} ALIAS ${name})
  set(headers "")
  foreach(h IN LISTS A_HEADERS)
    cmake_path(ABSOLUTE_PATH h BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} NORMALIZE)
    list(APPEND headers ${h})
  endforeach()
  set_target_properties(${name} PROPERTIES SYLVITE_KIND library SYLVITE_HEADERS "${headers}"
                                           SYLVITE_PROVIDES "${A_PROVIDES}")
  set_property(GLOBAL APPEND PROPERTY SYLVITE_TARGETS ${name})
  set_property(GLOBAL APPEND PROPERTY SYLVITE_ALIASES "sylvite::${short}=${name}")
endfunction()

# sylvite_executable(NAME SOURCES ... DEPS ...) -> binary in build/bin
function(sylvite_executable name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  sylvite_setup_target(${name})
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin SYLVITE_KIND executable)
  set_property(GLOBAL APPEND PROPERTY SYLVITE_TARGETS ${name})
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
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests SYLVITE_KIND test)
  set_property(GLOBAL APPEND PROPERTY SYLVITE_TARGETS ${name})
  include(GoogleTest)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS unit ENVIRONMENT "SYLVITE_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    # GTEST_SKIP() shows in ctest as Skipped (scripts/test.sh fails on it under CI=true).
    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()

# The project's targets as scripts/check_layers.py reads them: for each target made by the
# helpers above, its kind, folder, sources, owned headers, generated headers and links
# (aliases resolved by the script). Called once at the end of the top-level CMakeLists.txt,
# when every target exists. Writes <build>/sylvite_targets.json (only when it changes).
function(_sylvite_json_list out)
  set(items "")
  foreach(v IN LISTS ARGN)
    string(REPLACE "\\" "\\\\" v "${v}")
    string(REPLACE "\"" "\\\"" v "${v}")
    list(APPEND items "\"${v}\"")
  endforeach()
  list(JOIN items ", " joined)
  set(${out} "[${joined}]" PARENT_SCOPE)
endfunction()

function(sylvite_write_target_table)
  get_property(targets GLOBAL PROPERTY SYLVITE_TARGETS)
  get_property(aliases GLOBAL PROPERTY SYLVITE_ALIASES)
  set(entries "")
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    get_target_property(kind ${t} SYLVITE_KIND)
    get_target_property(dir ${t} SOURCE_DIR)
    set(sources "")
    set(links "")
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(raw_sources ${t} SOURCES)
      foreach(src IN LISTS raw_sources)
        cmake_path(ABSOLUTE_PATH src BASE_DIRECTORY ${dir} NORMALIZE)
        list(APPEND sources ${src})
      endforeach()
      get_target_property(links ${t} LINK_LIBRARIES)
    else()
      get_target_property(links ${t} INTERFACE_LINK_LIBRARIES)
    endif()
    get_target_property(iface ${t} INTERFACE_LINK_LIBRARIES)
    get_target_property(headers ${t} SYLVITE_HEADERS)
    get_target_property(provides ${t} SYLVITE_PROVIDES)
    foreach(v IN ITEMS links iface headers provides)
      if("${${v}}" MATCHES "NOTFOUND$")
        set(${v} "")
      endif()
    endforeach()
    _sylvite_json_list(j_sources ${sources})
    _sylvite_json_list(j_links ${links})
    _sylvite_json_list(j_iface ${iface})
    _sylvite_json_list(j_headers ${headers})
    _sylvite_json_list(j_provides ${provides})
    list(APPEND entries "    {\"name\": \"${t}\", \"kind\": \"${kind}\", \"dir\": \"${dir}\",\n     \"sources\": ${j_sources},\n     \"headers\": ${j_headers}, \"provides\": ${j_provides},\n     \"links\": ${j_links},\n     \"interface_links\": ${j_iface}}")
  endforeach()
  list(JOIN entries ",\n" body)
  _sylvite_json_list(j_aliases ${aliases})
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/sylvite_targets.json
       CONTENT "{\"root\": \"${PROJECT_SOURCE_DIR}\",\n \"aliases\": ${j_aliases},\n \"targets\": [\n${body}\n]}\n"
       @ONLY)
endfunction()
