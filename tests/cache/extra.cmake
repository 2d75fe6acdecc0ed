# Helper program for the multi-process and crash tests of the cache (cache_helper.cpp).
add_executable(cache_helper ${CMAKE_CURRENT_SOURCE_DIR}/cache/cache_helper.cpp)
target_include_directories(cache_helper PRIVATE ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(cache_helper PRIVATE jitcache)
add_dependencies(test_cache cache_helper)
target_compile_definitions(test_cache PRIVATE JITCACHE_CACHE_HELPER="$<TARGET_FILE:cache_helper>")
