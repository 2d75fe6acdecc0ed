# ctest tests of the shared library and the installed package (cmake/package.cmake).
find_program(JITCACHE_PKG_CONFIG pkg-config)

# Only the C ABI leaves libjitcache.so, and all of it does.
add_test(NAME c_abi_exports
  COMMAND ${CMAKE_COMMAND} -DLIBRARY=$<TARGET_FILE:jitcache_shared> -DNM=${CMAKE_NM}
          -DHEADER=${PROJECT_SOURCE_DIR}/include/jitcache/jitcache.h
          -DVERSION_SCRIPT=${JITCACHE_VERSION_SCRIPT}
          -DSONAME=$<TARGET_SONAME_FILE_NAME:jitcache_shared> -DREADELF=${CMAKE_READELF}
          -P ${PROJECT_SOURCE_DIR}/cmake/check_exports.cmake)

# The check itself is not vacuous: a library with other exports (libxxhash) is refused.
add_test(NAME c_abi_exports_check_refuses_foreign_symbols
  COMMAND ${CMAKE_COMMAND} -DLIBRARY=${XXHASH_LIBRARY} -DNM=${CMAKE_NM}
          -DHEADER=${PROJECT_SOURCE_DIR}/include/jitcache/jitcache.h
          -DVERSION_SCRIPT=${JITCACHE_VERSION_SCRIPT} -DSONAME=unused
          -P ${PROJECT_SOURCE_DIR}/cmake/check_exports.cmake)
set_tests_properties(c_abi_exports_check_refuses_foreign_symbols PROPERTIES
  PASS_REGULAR_EXPRESSION "symbols outside the C[^;]*XXH128_cmp")

# Nothing jitcache builds depends on the CUDA driver library or on a CUDA compiler library
# (NVRTC, nvJitLink, libNVVM): all are dlopen'ed. The shared library is linked with
# --no-as-needed, so its dependencies are its whole link line.
add_test(NAME no_cuda_driver_dependency
  COMMAND ${CMAKE_COMMAND} -DREADELF=${CMAKE_READELF}
          "-DFILES=$<TARGET_FILE:jitcache_shared>;$<TARGET_FILE:jitcache_cli>;$<TARGET_FILE:jitcache_tool_worker>"
          -P ${PROJECT_SOURCE_DIR}/cmake/check_no_driver.cmake)

# ... and the check is not vacuous: a program linked (--no-as-needed) against `library` is
# refused by test `name`, with a message matching `refusal`.
function(jitcache_refused_link_test name probe library refusal)
  add_executable(${probe} ${CMAKE_CURRENT_BINARY_DIR}/generated/driver_linked_probe.c)
  target_link_libraries(${probe} PRIVATE ${library})
  target_link_options(${probe} PRIVATE "LINKER:--no-as-needed")
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} -DREADELF=${CMAKE_READELF} -DFILES=$<TARGET_FILE:${probe}>
            -P ${PROJECT_SOURCE_DIR}/cmake/check_no_driver.cmake)
  set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${refusal}")
endfunction()
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/generated/driver_linked_probe.c
     CONTENT "int main(void) { return 0; }\n")
# A program that does link the driver...
jitcache_refused_link_test(no_cuda_driver_dependency_check_refuses_a_driver_link driver_linked_probe
                           CUDA::cuda_driver "CUDA driver dependency: libcuda\\.so")
# ... or NVRTC.
jitcache_refused_link_test(no_cuda_driver_dependency_check_refuses_an_nvrtc_link nvrtc_linked_probe
                           ${CUDA_nvrtc_LIBRARY} "CUDA compiler dependency: libnvrtc\\.so")

# ... whatever the length of the path it reports (CMake wraps error text at spaces; no test
# may pass or fail by the length of the build directory's path).
add_test(NAME no_cuda_driver_dependency_check_holds_at_every_path_length
  COMMAND ${CMAKE_COMMAND} -DREADELF=${CMAKE_READELF} -DPROBE=$<TARGET_FILE:driver_linked_probe>
          -DCHECK=${PROJECT_SOURCE_DIR}/cmake/check_no_driver.cmake
          -DWORK=${CMAKE_CURRENT_BINARY_DIR}/driver-check-path-lengths
          -P ${PROJECT_SOURCE_DIR}/cmake/test_check_no_driver.cmake)

# A C program built against the installed package, through find_package and through
# pkg-config, links and runs.
add_test(NAME c_abi_installed_consumer
  COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR}
          -DCONSUMER_SOURCE=${PROJECT_SOURCE_DIR}/tests/consumer
          -DCHECKPOINT=${PROJECT_SOURCE_DIR}/examples/glm5-mini
          -DWORK=${CMAKE_CURRENT_BINARY_DIR}/consumer-test
          -DC_COMPILER=${CMAKE_C_COMPILER} -DPKG_CONFIG=${JITCACHE_PKG_CONFIG}
          -DGENERATOR=${CMAKE_GENERATOR} -DLIBDIR=${CMAKE_INSTALL_LIBDIR}
          -P ${PROJECT_SOURCE_DIR}/cmake/consumer_test.cmake)
set_tests_properties(c_abi_installed_consumer PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE)
