# Warnings (errors by default) and optional sanitizers for every target.
set(VMMIPC_WARNINGS -Wall -Wextra)
if(VMMIPC_WERROR)
  list(APPEND VMMIPC_WARNINGS -Werror)
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${VMMIPC_WARNINGS}>")
# nvcc passes the host compiler's warnings through -Xcompiler.
list(JOIN VMMIPC_WARNINGS "," vmmipc_cuda_warnings)
add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${vmmipc_cuda_warnings}>")
# Error messages are cut at a fixed length on purpose.
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
  add_compile_options($<$<COMPILE_LANGUAGE:C>:-Wno-format-truncation>)
endif()
if(VMMIPC_SANITIZE)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${VMMIPC_SANITIZE};-fno-omit-frame-pointer;-fno-sanitize-recover=all>")
  add_link_options(-fsanitize=${VMMIPC_SANITIZE})
endif()
