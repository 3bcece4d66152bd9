# Optional Vulkan backend. FAFO_VULKAN=AUTO builds it when the Vulkan loader, its
# headers and glslangValidator are all found; ON requires them; OFF skips the check.
# Sets FAFO_HAVE_VULKAN and provides fafo_add_shader() for runtime/CMakeLists.txt.
set(FAFO_VULKAN AUTO CACHE STRING "Build the Vulkan backend: AUTO (if loader, headers and glslang are found), ON, OFF")
set_property(CACHE FAFO_VULKAN PROPERTY STRINGS AUTO ON OFF)

set(FAFO_HAVE_VULKAN OFF)
if(NOT FAFO_VULKAN STREQUAL "OFF")
  find_package(Vulkan QUIET)
  find_program(FAFO_GLSLANG glslangValidator)
  if(Vulkan_FOUND AND FAFO_GLSLANG)
    set(FAFO_HAVE_VULKAN ON)
    message(STATUS "fafo: Vulkan found (${Vulkan_LIBRARY}); shaders compiled with ${FAFO_GLSLANG}")
  else()
    set(missing "")
    if(NOT Vulkan_FOUND)
      list(APPEND missing "the Vulkan loader and headers (libvulkan-dev)")
    endif()
    if(NOT FAFO_GLSLANG)
      list(APPEND missing "glslangValidator (glslang-tools)")
    endif()
    list(JOIN missing " and " missing)
    if(FAFO_VULKAN STREQUAL "ON")
      message(FATAL_ERROR "fafo: FAFO_VULKAN=ON but ${missing} not found")
    endif()
    message(STATUS "fafo: ${missing} not found; building without the Vulkan backend")
  endif()
endif()

# fafo_add_shader(<target> NAME <symbol> SOURCE <file.comp> [DEFINES A=1 B ...])
# Compiles one GLSL compute shader (one variant: the DEFINES become -D flags) into
# SPIR-V at build time and embeds it in <target> as fafo::vulkan::shaders::<symbol>
# (declared in runtime/src/backend/vulkan/embedded_shaders.h). Editing the shader,
# or this file, or the embedding script rebuilds only that shader's object.
set(FAFO_EMBED_SPIRV_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_spirv.cmake)
function(fafo_add_shader target)
  cmake_parse_arguments(arg "" "NAME;SOURCE" "DEFINES" ${ARGN})
  if(NOT arg_NAME OR NOT arg_SOURCE)
    message(FATAL_ERROR "fafo_add_shader: NAME and SOURCE are required")
  endif()
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/shaders)
  set(spv ${out_dir}/${arg_NAME}.spv)
  set(cpp ${out_dir}/${arg_NAME}.spv.cpp)
  set(dep ${out_dir}/${arg_NAME}.spv.d)
  set(define_flags "")
  foreach(d ${arg_DEFINES})
    list(APPEND define_flags "-D${d}")
  endforeach()
  get_filename_component(source_abs ${arg_SOURCE} ABSOLUTE)
  get_filename_component(source_dir ${source_abs} DIRECTORY)
  add_custom_command(
    OUTPUT ${spv}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
    COMMAND ${FAFO_GLSLANG} --quiet --target-env vulkan1.2 -V ${define_flags} -I${source_dir}
            --depfile ${dep} -o ${spv} ${source_abs}
    MAIN_DEPENDENCY ${source_abs}
    DEPFILE ${dep}
    COMMENT "glslang: ${arg_NAME} (${arg_SOURCE} ${define_flags})"
    VERBATIM)
  add_custom_command(
    OUTPUT ${cpp}
    COMMAND ${CMAKE_COMMAND} -DSPV=${spv} -DOUT=${cpp} -DNAME=${arg_NAME} -P ${FAFO_EMBED_SPIRV_SCRIPT}
    DEPENDS ${spv} ${FAFO_EMBED_SPIRV_SCRIPT}
    COMMENT "embedding SPIR-V: ${arg_NAME}"
    VERBATIM)
  target_sources(${target} PRIVATE ${cpp})
endfunction()
