# The shared library with the C ABI, export control, `cmake --install` and the package
# files (CMake config and pkg-config). Included at the end of the top-level CMakeLists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The static library stays what the CLI and the tests link. Hidden visibility lets the
# compiler bind calls inside the shared library directly instead of through the PLT; the
# C ABI's functions opt back in with JITCACHE_API.
set_target_properties(jitcache PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)

# Built from the static library's objects (whole archive), so nothing is compiled twice.
# add_library needs a source; an empty one keeps the objects all in libjitcache.a.
set(JITCACHE_SHARED_STUB ${CMAKE_CURRENT_BINARY_DIR}/generated/jitcache_shared.cpp)
file(CONFIGURE OUTPUT ${JITCACHE_SHARED_STUB}
     CONTENT "// Empty: libjitcache.so is libjitcache.a linked whole.\n")
add_library(jitcache_shared SHARED ${JITCACHE_SHARED_STUB})
add_library(jitcache::jitcache ALIAS jitcache_shared)
set(JITCACHE_VERSION_SCRIPT ${PROJECT_SOURCE_DIR}/cmake/jitcache.map)
file(STRINGS ${PROJECT_SOURCE_DIR}/include/jitcache/jitcache.h JITCACHE_ABI_LINE
     REGEX "^#define JITCACHE_ABI_VERSION [0-9]+$")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" JITCACHE_ABI_VERSION "${JITCACHE_ABI_LINE}")
set_target_properties(jitcache_shared PROPERTIES
  OUTPUT_NAME jitcache
  EXPORT_NAME jitcache
  VERSION ${PROJECT_VERSION}
  SOVERSION ${JITCACHE_ABI_VERSION}
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  LINK_DEPENDS ${JITCACHE_VERSION_SCRIPT})
target_link_libraries(jitcache_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,jitcache>")
# --no-as-needed: every library on the link line becomes a dependency, so the
# `no_cuda_driver_dependency` test sees the link line as it is, whatever the toolchain's
# default.
target_link_options(jitcache_shared PRIVATE
  "LINKER:--version-script=${JITCACHE_VERSION_SCRIPT}" "LINKER:--no-undefined" "LINKER:--no-as-needed")
target_include_directories(jitcache_shared INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# The static library's public include directory is the source tree's; installed, it is
# the prefix's.
set_property(TARGET jitcache PROPERTY INTERFACE_INCLUDE_DIRECTORIES
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(jitcache PROPERTIES EXPORT_NAME jitcache_static)

set(JITCACHE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/jitcache)
install(TARGETS jitcache_shared EXPORT jitcacheTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development)
install(TARGETS jitcache EXPORT jitcacheStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS jitcache_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The tool worker, where the library and the CLI look for it: ../libexec/jitcache/ from
# their directories (runtime/compile/tool_worker.hpp).
install(TARGETS jitcache_tool_worker RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/jitcache)
# The public face only: include/jitcache/. Nothing else is installed.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/jitcache DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(EXPORT jitcacheTargets NAMESPACE jitcache:: DESTINATION ${JITCACHE_CMAKE_DIR})
install(EXPORT jitcacheStaticTargets NAMESPACE jitcache:: DESTINATION ${JITCACHE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/jitcacheConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/generated/jitcacheConfig.cmake
  INSTALL_DESTINATION ${JITCACHE_CMAKE_DIR})
# 0.x: a new minor version may change the ABI.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/generated/jitcacheConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/generated/jitcacheConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/generated/jitcacheConfigVersion.cmake
        DESTINATION ${JITCACHE_CMAKE_DIR})

# pkg-config: relocatable (paths relative to the .pc file). Libs.private serves
# `pkg-config --static`, which links libjitcache.a and so needs its dependencies.
set(JITCACHE_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
string(REGEX REPLACE "[^/]+" ".." JITCACHE_PC_TO_PREFIX "${JITCACHE_PC_DIR}")
set(JITCACHE_PC_LIBS_PRIVATE
    "-lsqlite3 -lcrypto -lxxhash -lhiredis -ldl -lstdc++ -lm -pthread")
configure_file(${PROJECT_SOURCE_DIR}/cmake/jitcache.pc.in
               ${CMAKE_CURRENT_BINARY_DIR}/generated/jitcache.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/generated/jitcache.pc DESTINATION ${JITCACHE_PC_DIR})

if(JITCACHE_BUILD_TESTS)
  include(${PROJECT_SOURCE_DIR}/cmake/abi_tests.cmake)
endif()
include(${PROJECT_SOURCE_DIR}/cmake/python.cmake)
