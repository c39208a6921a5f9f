# Flags every Strata target shares. Host code is warning-free under -Wall -Wextra -Werror; device
# code (.cu) gets the same warnings passed to the host compiler.
set(STRATA_CXX_WARNINGS -Wall -Wextra -Werror)
# GCC 12 at -O2/-O3 reports std::string internals inlined from libstdc++ as out-of-bounds or
# overlapping copies (GCC bugs 105329, 105651, 106199): false positives in headers we do not own.
# clang, which builds the sanitizer stage, keeps its bounds warnings.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND STRATA_CXX_WARNINGS -Wno-restrict -Wno-array-bounds -Wno-stringop-overflow)
endif()

# lld where the toolchain has it (scripts/install_deps.sh installs it): it links a test binary or
# the CLI in a third of GNU ld's time. Not for the links nvcc drives (CUDA-language targets).
include(CheckLinkerFlag)
check_linker_flag(CXX -fuse-ld=lld STRATA_HAVE_LLD)
if(STRATA_HAVE_LLD)
  add_link_options($<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=lld>)
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

# strata_module_headers(<target> <dir>): <target> exposes the headers of src/<dir> -- that folder
# only, not its subfolders -- as "<dir>/<name>.h", to itself and to every target that links it.
# src/ itself is on no include path, so a target sees another folder's headers only through its
# declared dependencies: an include of a folder it does not link fails to compile. Each folder
# gets one include root under the build tree (symbolic links to its headers, remade at every
# configure), shared by the targets the folder holds.
function(strata_module_headers target dir)
  string(REPLACE "/" "_" name "${dir}")
  set(root "${CMAKE_BINARY_DIR}/strata_modules/${name}")
  get_property(made GLOBAL PROPERTY STRATA_MODULE_ROOTS)
  if(NOT "${root}" IN_LIST made)
    set_property(GLOBAL APPEND PROPERTY STRATA_MODULE_ROOTS "${root}")
    file(REMOVE_RECURSE "${root}")
    file(MAKE_DIRECTORY "${root}/${dir}")
    file(GLOB headers CONFIGURE_DEPENDS
         "${PROJECT_SOURCE_DIR}/src/${dir}/*.h" "${PROJECT_SOURCE_DIR}/src/${dir}/*.cuh")
    foreach(header ${headers})
      get_filename_component(file "${header}" NAME)
      file(CREATE_LINK "${header}" "${root}/${dir}/${file}" SYMBOLIC)
    endforeach()
  endif()
  target_include_directories(${target} PUBLIC "${root}")
endfunction()
