# Installs the build to a fresh prefix, then builds tests/consumer against it (with
# find_package, and with `cc $(pkg-config --cflags --libs jitcache)`; then the C++ API
# from the static library) and runs each against one temporary cache: the first run
# compiles the checkpoint's 4 variants, the others find all 4 cached.
# Run as: cmake -DBUILD_DIR= -DCONSUMER_SOURCE= -DCHECKPOINT= -DWORK= -DC_COMPILER=
#               -DPKG_CONFIG= -DGENERATOR= -DLIBDIR= -P consumer_test.cmake
cmake_minimum_required(VERSION 3.24)
foreach(var BUILD_DIR CONSUMER_SOURCE CHECKPOINT WORK C_COMPILER GENERATOR LIBDIR)
  if(NOT ${var})
    message(FATAL_ERROR "consumer_test: ${var} is not set")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

function(expect output pattern what)
  if(NOT output MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: output does not match '${pattern}':\n${output}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(prefix ${WORK}/prefix)
set(cache ${WORK}/cache)

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# Only the public headers are installed.
file(GLOB_RECURSE installed_headers RELATIVE ${prefix}/include ${prefix}/include/*)
foreach(h ${installed_headers})
  if(NOT h MATCHES "^jitcache/[a-z_]+\\.(h|hpp)$")
    message(FATAL_ERROR "installed a header outside include/jitcache/: ${h}")
  endif()
endforeach()
if(NOT "jitcache/jitcache.h" IN_LIST installed_headers)
  message(FATAL_ERROR "jitcache/jitcache.h is not installed: ${installed_headers}")
endif()

run("configure the consumer" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${WORK}/build -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run("build the consumer" ${CMAKE_COMMAND} --build ${WORK}/build)
run("run the find_package consumer" ${WORK}/build/consumer ${CHECKPOINT} ${cache})
message(STATUS "find_package consumer:\n${run_output}")
expect("${run_output}" "layers 79\n" "find_package consumer")
expect("${run_output}" "variants 4 cached 0 compiled 4" "find_package consumer")

# The C++ API from the static library, with its dependencies found by the package.
run("configure the static consumer" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${WORK}/build-static
    -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCONSUMER_CXX_STATIC=ON)
run("build the static consumer" ${CMAKE_COMMAND} --build ${WORK}/build-static --target consumer_static)
run("run the static consumer" ${WORK}/build-static/consumer_static ${CHECKPOINT} ${cache})
message(STATUS "static C++ consumer:\n${run_output}")
expect("${run_output}" "layers 79\n" "static C++ consumer")
expect("${run_output}" "variants 4 cached 4 compiled 0" "static C++ consumer")

if(PKG_CONFIG)
  run("pkg-config" ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/${LIBDIR}/pkgconfig
      ${PKG_CONFIG} --cflags --libs jitcache)
  string(STRIP "${run_output}" flags)
  expect("${flags}" "^-I[^ ]+/include -L[^ ]+ -ljitcache$" "pkg-config --cflags --libs")
  run("cc $(pkg-config ...)" ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/${LIBDIR}/pkgconfig
      sh -c "${C_COMPILER} -std=c99 -Wall -Wextra -Werror -pedantic ${CONSUMER_SOURCE}/consumer.c $(${PKG_CONFIG} --cflags --libs jitcache) -o ${WORK}/consumer-pc")
  run("run the pkg-config consumer" ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/${LIBDIR}
      ${WORK}/consumer-pc ${CHECKPOINT} ${cache})
  message(STATUS "pkg-config consumer:\n${run_output}")
  expect("${run_output}" "layers 79\n" "pkg-config consumer")
  expect("${run_output}" "variants 4 cached 4 compiled 0" "pkg-config consumer")
else()
  message(FATAL_ERROR "pkg-config was not found when the build was configured (apt-get install pkg-config)")
endif()
