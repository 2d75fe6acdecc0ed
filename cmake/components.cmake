# The library is built from components, one per source folder and job. Each component is
# an object library; its `DEPS` are the components it may use, and they are the only
# rule: the component is compiled against an include view (a folder of links made at
# configure time) holding its own headers and those of its dependencies, transitively,
# plus the public include/. A header from a folder it may not use is not there, so a
# forbidden #include fails the build with "No such file or directory".
#
#   jitcache_component(NAME <name> DIR <folder> [DEPS <component>...] [SOURCES <extra>...]
#                      [LIBS <link item>...] [SYSTEM_INCLUDES <dir>...])
#
# Every component's objects end up in libjitcache.a (see the end of CMakeLists.txt).

set(JITCACHE_COMPONENTS "" CACHE INTERNAL "")
set(JITCACHE_COMPONENT_LIBS "" CACHE INTERNAL "")

function(jitcache_component)
  cmake_parse_arguments(C "" "NAME;DIR" "DEPS;SOURCES;LIBS;SYSTEM_INCLUDES" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${C_DIR}/*.cpp)
  add_library(${C_NAME} OBJECT ${sources} ${C_SOURCES})
  set_target_properties(${C_NAME} PROPERTIES
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${C_NAME} PUBLIC Threads::Threads ${C_DEPS} PRIVATE ${C_LIBS})
  if(C_SYSTEM_INCLUDES)
    target_include_directories(${C_NAME} SYSTEM PRIVATE ${C_SYSTEM_INCLUDES})
  endif()

  # The folders this component may include from: its own and its dependencies'.
  set(dirs ${C_DIR})
  foreach(dep IN LISTS C_DEPS)
    get_target_property(dep_dirs ${dep} JITCACHE_DIRS)
    list(APPEND dirs ${dep_dirs})
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  set_target_properties(${C_NAME} PROPERTIES JITCACHE_DIRS "${dirs}" SOURCE_DIR_OF_COMPONENT ${C_DIR})

  # The include view: one link per header, so that a folder's sub-folders (other
  # components) are not reachable through it.
  set(view ${PROJECT_BINARY_DIR}/include-view/${C_NAME})
  file(REMOVE_RECURSE ${view})
  foreach(dir IN LISTS dirs)
    file(GLOB headers CONFIGURE_DEPENDS LIST_DIRECTORIES false
         ${PROJECT_SOURCE_DIR}/${dir}/*.hpp ${PROJECT_SOURCE_DIR}/${dir}/*.cuh)
    foreach(header IN LISTS headers)
      get_filename_component(name ${header} NAME)
      file(MAKE_DIRECTORY ${view}/${dir})
      file(CREATE_LINK ${header} ${view}/${dir}/${name} SYMBOLIC)
    endforeach()
  endforeach()
  target_include_directories(${C_NAME} PRIVATE ${view} ${PROJECT_SOURCE_DIR}/include)

  set(JITCACHE_COMPONENTS ${JITCACHE_COMPONENTS} ${C_NAME} CACHE INTERNAL "")
  set(libs ${JITCACHE_COMPONENT_LIBS} ${C_LIBS})
  list(REMOVE_DUPLICATES libs)
  set(JITCACHE_COMPONENT_LIBS "${libs}" CACHE INTERNAL "")
endfunction()

# One test per component: a header from a folder it may not use does not compile
# (cmake/check_forbidden_include.cmake). The header is the first one found in the first
# component folder outside its rule; a component that may use every folder has no test.
function(jitcache_layering_tests)
  set(all_dirs "")
  foreach(component IN LISTS JITCACHE_COMPONENTS)
    get_target_property(own ${component} SOURCE_DIR_OF_COMPONENT)
    list(APPEND all_dirs ${own})
  endforeach()
  foreach(component IN LISTS JITCACHE_COMPONENTS)
    get_target_property(allowed ${component} JITCACHE_DIRS)
    set(forbidden_header "")
    foreach(dir IN LISTS all_dirs)
      if(dir IN_LIST allowed)
        continue()
      endif()
      file(GLOB headers LIST_DIRECTORIES false ${PROJECT_SOURCE_DIR}/${dir}/*.hpp)
      if(headers)
        list(GET headers 0 header)
        get_filename_component(name ${header} NAME)
        set(forbidden_header ${dir}/${name})
        break()
      endif()
    endforeach()
    if(forbidden_header)
      add_test(NAME layering_${component}
               COMMAND ${CMAKE_COMMAND} -DCOMPILER=${CMAKE_CXX_COMPILER}
                       -DVIEW=${PROJECT_BINARY_DIR}/include-view/${component}
                       -DHEADER=${forbidden_header}
                       -DWORK=${PROJECT_BINARY_DIR}/layering/${component}
                       -P ${PROJECT_SOURCE_DIR}/cmake/check_forbidden_include.cmake)
    endif()
  endforeach()
endfunction()
