# A partial build installs what it built. Building the target vmmipc makes
# both library variants (src/CMakeLists.txt); without them 'cmake --install'
# stops here, first (install rules run in the order they are declared),
# saying what to build. The Python module, if not built, is left out
# (python/CMakeLists.txt).
install(CODE "foreach(_f \"$<TARGET_FILE:vmmipc>\" \"$<TARGET_FILE:vmmipc_static>\")
  if(NOT EXISTS \"\${_f}\")
    message(FATAL_ERROR \"vmmipc: \${_f} is not built: build the library first (cmake --build ${PROJECT_BINARY_DIR} --target vmmipc), or everything\")
  endif()
endforeach()")
