# Fails when any of FILES (a ;-list of ELF files) records the CUDA driver library
# (libcuda.so*) or a CUDA compiler library (libnvrtc*, libnvJitLink*, libnvvm*) as a
# dependency: all of them are opened at run time. Run as: cmake -DREADELF=...
# -DFILES=a;b -P this file.
if(NOT READELF OR NOT FILES)
  message(FATAL_ERROR "usage: cmake -DREADELF=<readelf> -DFILES=<file;...> -P check_no_driver.cmake")
endif()
foreach(file IN LISTS FILES)
  execute_process(COMMAND ${READELF} -d ${file} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${READELF} -d ${file} failed")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]]+\\]" needed "${dynamic}")
  if(NOT needed)
    message(FATAL_ERROR "${file}: no NEEDED entries read; is it a dynamically linked ELF file?")
  endif()
  foreach(entry IN LISTS needed)
    if(entry MATCHES "\\[(libcuda\\.so[^]]*)\\]")
      # The finding goes out as one unwrapped line, its fixed words first: CMake wraps the
      # text of a FATAL_ERROR at spaces, so words after a long path can land on another
      # line, and a test matching them would depend on the length of the build path.
      message(NOTICE "CUDA driver dependency: ${CMAKE_MATCH_1} is NEEDED by ${file}")
      message(FATAL_ERROR "the CUDA driver must only be opened at run time")
    endif()
    if(entry MATCHES "\\[((libnvrtc|libnvJitLink|libnvvm)[^]]*)\\]")
      message(NOTICE "CUDA compiler dependency: ${CMAKE_MATCH_1} is NEEDED by ${file}")
      message(FATAL_ERROR "the CUDA compilers must only be opened at run time")
    endif()
  endforeach()
  list(LENGTH needed count)
  message(STATUS "${file}: ${count} dependencies, none of them the CUDA driver or a CUDA compiler")
endforeach()
