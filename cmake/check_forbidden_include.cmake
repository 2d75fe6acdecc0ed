# ctest `layering_<component>`: compiles a one-line file that includes a header the
# component may not use, against the component's include view, and passes only when the
# compiler stops at that #include because the header is not there. This proves the rule
# of cmake/components.cmake is enforced by the build, not only written down.
#   -DCOMPILER=... -DVIEW=<include view> -DHEADER=<forbidden header, as included> -DWORK=<dir>
file(MAKE_DIRECTORY ${WORK})
set(source ${WORK}/forbidden.cpp)
file(WRITE ${source} "#include \"${HEADER}\"\n")
execute_process(
  COMMAND ${COMPILER} -std=c++23 -fsyntax-only -I${VIEW} ${source}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${HEADER} is reachable from ${VIEW}; the layering rule is not enforced")
endif()
string(FIND "${err}" "${HEADER}: No such file or directory" at)
if(at EQUAL -1)
  message(FATAL_ERROR "compiling '#include \"${HEADER}\"' failed, but not because the header is "
                      "missing from the view:\n${err}")
endif()
message(STATUS "${HEADER}: not reachable from ${VIEW}, as the rule says")
