# The CLI tests run the built `jitcache` binary as a user would.
add_dependencies(test_tools jitcache_cli)
target_compile_definitions(test_tools PRIVATE JITCACHE_CLI_PATH="$<TARGET_FILE:jitcache_cli>")
