# meta.labels: every ctest test carries labels from the agreed set only (so `ctest -L`, `-LE 'slow|long'` and the label
# time summary cover the whole suite, and a typo is caught). Run by ctest:
#   cmake -DCTEST=<ctest> -DBUILD=<build dir> -DALLOWED="core;interpose;..." -P check_labels.cmake
cmake_minimum_required(VERSION 3.20)
string(REPLACE ";" "|" allowed_regex "${ALLOWED}")
string(REPLACE ";" ", " allowed_list "${ALLOWED}")
set(hint "in the CMakeLists.txt that registers it: set_tests_properties(NAME PROPERTIES LABELS <one of: ${allowed_list}>), or PROPERTIES LABELS ... in gtest_discover_tests")

# Tests that would survive excluding every allowed label have none of them.
execute_process(COMMAND ${CTEST} -N -LE "^(${allowed_regex})$" WORKING_DIRECTORY ${BUILD}
                OUTPUT_VARIABLE unlabelled RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "meta.labels: `ctest -N` failed in ${BUILD} (exit ${rc})")
endif()
set(failures 0)
string(REGEX MATCHALL "Test +#[0-9]+: [^\n]*" lines "${unlabelled}")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^Test +#[0-9]+: " "" name "${line}")
  message("FAIL test '${name}' has no label from {${allowed_list}}")
  math(EXPR failures "${failures} + 1")
endforeach()

# Labels outside the set, and the tests that carry them.
execute_process(COMMAND ${CTEST} --print-labels WORKING_DIRECTORY ${BUILD} OUTPUT_VARIABLE labels_out)
string(REGEX MATCHALL "\n  [^\n]+" label_lines "${labels_out}")
set(seen "")
foreach(line IN LISTS label_lines)
  string(STRIP "${line}" label)
  list(APPEND seen "${label}")
  if(NOT label IN_LIST ALLOWED)
    execute_process(COMMAND ${CTEST} -N -L "^${label}$" WORKING_DIRECTORY ${BUILD} OUTPUT_VARIABLE carriers)
    string(REGEX MATCHALL "Test +#[0-9]+: [^\n]*" carrier_lines "${carriers}")
    list(TRANSFORM carrier_lines REPLACE "^Test +#[0-9]+: " "")
    list(JOIN carrier_lines ", " carrier_names)
    message("FAIL label '${label}' is not one of {${allowed_list}}; carried by: ${carrier_names}")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()

if(failures GREATER 0)
  message(FATAL_ERROR "meta.labels: ${failures} problem(s) above: label each test ${hint}")
endif()
execute_process(COMMAND ${CTEST} -N WORKING_DIRECTORY ${BUILD} OUTPUT_VARIABLE all)
string(REGEX MATCH "Total Tests: [0-9]+" total "${all}")
message("meta.labels: every test is labelled (${total}; labels in use: ${seen})")
