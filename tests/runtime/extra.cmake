# Helper program for the multi-process races of the source cache (source_race_helper.cpp).
add_executable(source_race_helper ${CMAKE_CURRENT_SOURCE_DIR}/runtime/source_race_helper.cpp)
target_include_directories(source_race_helper PRIVATE ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}
                           ${CMAKE_CURRENT_SOURCE_DIR}/runtime)
target_link_libraries(source_race_helper PRIVATE jitcache)
add_dependencies(test_runtime source_race_helper)
target_compile_definitions(test_runtime PRIVATE JITCACHE_SOURCE_RACE_HELPER="$<TARGET_FILE:source_race_helper>")
