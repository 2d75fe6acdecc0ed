# What the Python package (pyproject.toml, scikit-build-core) bundles: the C ABI library
# and the tool worker under jitcache/lib and the CLI under jitcache/bin, in the install component `python`,
# which scikit-build-core installs alone. EXCLUDE_FROM_ALL keeps them out of a plain
# `cmake --install`.
# A wheel holds no symbolic links: the library is installed once, under its SONAME, the
# name jitcache/_lib.py loads.
install(FILES $<TARGET_FILE:jitcache_shared>
        DESTINATION jitcache/lib RENAME libjitcache.so.${JITCACHE_ABI_VERSION}
        COMPONENT python EXCLUDE_FROM_ALL)
install(PROGRAMS $<TARGET_FILE:jitcache_cli> DESTINATION jitcache/bin COMPONENT python EXCLUDE_FROM_ALL)
# The tool worker (runtime/compile/tool_worker.hpp) beside the library, where it looks.
install(PROGRAMS $<TARGET_FILE:jitcache_tool_worker> DESTINATION jitcache/lib COMPONENT python EXCLUDE_FROM_ALL)
