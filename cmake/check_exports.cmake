# Checks libjitcache.so's dynamic symbol table: every defined symbol is a jitcache_*
# function declared in jitcache.h (or a version node of the version script), every
# function declared there is exported, and the SONAME carries the ABI version.
# Run as: cmake -DLIBRARY= -DNM= -DHEADER= -DVERSION_SCRIPT= -DSONAME= [-DREADELF=] -P
cmake_minimum_required(VERSION 3.24)
foreach(var LIBRARY NM HEADER VERSION_SCRIPT SONAME)
  if(NOT ${var})
    message(FATAL_ERROR "check_exports: ${var} is not set")
  endif()
endforeach()

execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY}
  OUTPUT_VARIABLE nm_out ERROR_VARIABLE nm_err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIBRARY} failed (${rc}): ${nm_err}")
endif()

# Sets `out` to the list of the names in `text`: each match of `pattern`, cut down to its
# name by replacing `cut` in it with `replacement`.
function(matched_names out text pattern cut replacement)
  string(REGEX MATCHALL "${pattern}" matches "${text}")
  set(names "")
  foreach(match ${matches})
    string(REGEX REPLACE "${cut}" "${replacement}" name "${match}")
    list(APPEND names ${name})
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
endfunction()

file(READ ${HEADER} header_text)
matched_names(declared "${header_text}"
  "JITCACHE_API[^;]*[ *](jitcache_[a-z0-9_]+)\\(" ".*[ *](jitcache_[a-z0-9_]+)\\($" "\\1")
list(LENGTH declared declared_count)
if(declared_count LESS 10)
  message(FATAL_ERROR "found only ${declared_count} declarations in ${HEADER}: ${declared}")
endif()

file(READ ${VERSION_SCRIPT} map_text)
matched_names(version_nodes "${map_text}" "(^|\n)[A-Za-z_][A-Za-z0-9_.]* *{" "[\n {]" "")

string(REPLACE "\n" ";" lines "${nm_out}")
set(exported "")
set(unexpected "")
foreach(line ${lines})
  if(line STREQUAL "")
    continue()
  endif()
  # "<address> <type> <name>[@@VERSION]"
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] +" "" name "${line}")
  string(REGEX REPLACE "@.*$" "" name "${name}")
  if(name IN_LIST declared)
    list(APPEND exported ${name})
  elseif(name IN_LIST version_nodes)
    continue()
  else()
    list(APPEND unexpected "${line}")
  endif()
endforeach()

set(missing "")
foreach(name ${declared})
  if(NOT name IN_LIST exported)
    list(APPEND missing ${name})
  endif()
endforeach()

list(LENGTH exported exported_count)
list(LENGTH unexpected unexpected_count)
if(unexpected_count GREATER 0)
  list(JOIN unexpected "\n  " shown)
  message(FATAL_ERROR "${LIBRARY} exports ${unexpected_count} symbols outside the C ABI:\n  ${shown}")
endif()
if(missing)
  message(FATAL_ERROR "${LIBRARY} does not export functions declared in ${HEADER}: ${missing}")
endif()

if(READELF)
  execute_process(COMMAND ${READELF} -d ${LIBRARY} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT dyn MATCHES "Library soname: \\[${SONAME}\\]")
    message(FATAL_ERROR "${LIBRARY}: SONAME is not ${SONAME}:\n${dyn}")
  endif()
endif()
message(STATUS "${LIBRARY}: ${exported_count} exported symbols, all jitcache_* from ${HEADER}; "
               "version nodes: ${version_nodes}")
