# Tests cmake/check_no_driver.cmake itself at every length of the path it reports: the
# probe (a program that links the CUDA driver) is copied to paths of 3 to 300 characters,
# and the check must refuse each with the same fixed words. CMake wraps the text of its
# errors at spaces, so a check whose words depended on where the path ends on a line
# would pass or fail by the length of the build directory. Relative paths (from WORK)
# reach the short lengths whatever the build directory's own length is.
# Run as: cmake -DREADELF=... -DPROBE=<file> -DCHECK=<check_no_driver.cmake> -DWORK=<dir>
#   -P this file.
if(NOT READELF OR NOT PROBE OR NOT CHECK OR NOT WORK)
  message(FATAL_ERROR "usage: cmake -DREADELF=<readelf> -DPROBE=<file> -DCHECK=<script> "
                      "-DWORK=<dir> -P test_check_no_driver.cmake")
endif()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(failed "")
string(REPEAT "x" 99 segment)
foreach(length RANGE 3 300)
  # <dir>/p of exactly `length` characters; directory names stay under 100 characters.
  math(EXPR remaining "${length} - 2")
  set(dir "")
  while(remaining GREATER 100)
    string(APPEND dir "${segment}/")
    math(EXPR remaining "${remaining} - 100")
  endwhile()
  string(REPEAT "x" ${remaining} last)
  string(APPEND dir "${last}")
  file(MAKE_DIRECTORY "${WORK}/${dir}")
  file(COPY_FILE "${PROBE}" "${WORK}/${dir}/p")
  execute_process(COMMAND ${CMAKE_COMMAND} -DREADELF=${READELF} -DFILES=${dir}/p -P ${CHECK}
                  WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0 OR NOT out MATCHES "CUDA driver dependency: libcuda\\.so[^ ]* is NEEDED by ${dir}/p")
    list(APPEND failed "${length}")
  endif()
  file(REMOVE_RECURSE "${WORK}/${segment}" "${WORK}/${last}")
endforeach()
file(REMOVE_RECURSE "${WORK}")
if(failed)
  message(FATAL_ERROR "check_no_driver.cmake did not report the driver dependency for "
                      "paths of these lengths: ${failed}")
endif()
message(STATUS "check_no_driver.cmake reports the driver dependency at every path length from 3 to 300")
