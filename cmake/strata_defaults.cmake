# Flags every Strata target shares. Host code is warning-free under -Wall -Wextra -Werror; device
# code (.cu) gets the same warnings passed to the host compiler.
set(STRATA_CXX_WARNINGS -Wall -Wextra -Werror)
# GCC 12 at -O2/-O3 reports std::string internals inlined from libstdc++ as out-of-bounds or
# overlapping copies (GCC bugs 105329, 105651, 106199): false positives in headers we do not own.
# clang, which builds the sanitizer stage, keeps its bounds warnings.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND STRATA_CXX_WARNINGS -Wno-restrict -Wno-array-bounds -Wno-stringop-overflow)
endif()

if(STRATA_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=address,undefined)
endif()

# strata_target_defaults(<target>): warnings, include root, and the CUDA architecture.
function(strata_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${STRATA_CXX_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:${STRATA_CUDA_GENCODE} -Xcompiler=-Wall,-Wextra -Werror=all-warnings>)
  target_compile_features(${target} PUBLIC cxx_std_20)
endfunction()
