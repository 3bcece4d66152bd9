# Optional Vulkan backend. FAFO_VULKAN=AUTO builds it when the Vulkan loader, its
# headers and glslangValidator are all found; ON requires them; OFF skips the check.
# Sets FAFO_HAVE_VULKAN and provides fafo_add_shader() and fafo_embed_shaders() for
# runtime/CMakeLists.txt.
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

# The integer dot product variants (fafo_add_shader DOT4) need SPIRV-Tools and Python:
# tools/spirv_dot4.py writes the instruction into glslang's SPIR-V. Without them those
# variants are not built and the integer products add bytes with integer arithmetic.
set(FAFO_SPIRV_DOT4 OFF)
if(FAFO_HAVE_VULKAN)
  find_program(FAFO_SPIRV_AS spirv-as)
  find_program(FAFO_SPIRV_DIS spirv-dis)
  find_program(FAFO_SPIRV_VAL spirv-val)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(FAFO_SPIRV_AS AND FAFO_SPIRV_DIS AND FAFO_SPIRV_VAL AND Python3_Interpreter_FOUND)
    set(FAFO_SPIRV_DOT4 ON)
  else()
    message(STATUS "fafo: spirv-as, spirv-dis, spirv-val (spirv-tools) or python3 not found; "
                   "building the Vulkan integer products without the dot product instruction")
  endif()
endif()

# The variants are compiled by fafo-compile-shaders (tools/compile_shaders), all of them
# in one process (the DOT4 ones to SPIR-V modules, then rewritten by one
# tools/spirv_dot4.py run), where glslang's development files are found (glslang-dev)
# in glslangValidator's version: a glslangValidator run takes about 0.25 s, 0.2 of it
# building glslang's built-in tables, over a thousand variants took minutes of the
# build's CPU time that way, and the tool compiles a variant in a few milliseconds, to the
# same bytes. Otherwise (and in sanitizer builds, whose flags every program of the build
# gets) each variant is its own glslangValidator run (and DOT4 variant its own
# tools/spirv_dot4.py run).
set(FAFO_SHADER_BATCH OFF)
if(FAFO_HAVE_VULKAN AND NOT FAFO_SANITIZE)
  find_package(Threads REQUIRED)
  find_package(glslang CONFIG QUIET)
  set(validator_version "")
  if(glslang_FOUND)
    execute_process(COMMAND ${FAFO_GLSLANG} --version OUTPUT_VARIABLE validator_version ERROR_QUIET)
  endif()
  if(glslang_FOUND AND TARGET glslang::glslang AND TARGET glslang::SPIRV AND TARGET glslang::glslang-default-resource-limits
     AND validator_version MATCHES "Glslang Version: [0-9]+:${glslang_VERSION}[\n ]")
    set(FAFO_SHADER_BATCH ON)
    add_executable(fafo-compile-shaders ${PROJECT_SOURCE_DIR}/tools/compile_shaders/compile_shaders.cpp)
    target_link_libraries(fafo-compile-shaders PRIVATE fafo_warnings glslang::glslang glslang::SPIRV
                          glslang::glslang-default-resource-limits)
  else()
    message(STATUS "fafo: glslang's development files (glslang-dev) in ${FAFO_GLSLANG}'s version not found; "
                   "each shader variant is compiled by its own glslangValidator run")
  endif()
endif()
# fafo_add_shader(<target> NAME <symbol> SOURCE <file.comp> [DEFINES A=1 B ...])
# Compiles one GLSL compute shader (one variant: the DEFINES become -D flags) into
# SPIR-V at build time, written by glslang as a C array (shaders/<symbol>.spv.h), and
# lists it for fafo_embed_shaders(<target>), which defines it in <target> as
# fafo::vulkan::shaders::<symbol> (declared in runtime/src/backend/vulkan/embedded_shaders.h).
# With FAFO_SHADER_BATCH, the variant is a line of the target's manifest, which
# fafo_embed_shaders() gives to fafo-compile-shaders; else one glslangValidator run.
# With DOT4, the shader is compiled with -DDOT4=1 and tools/spirv_dot4.py then gives it
# the integer dot product instruction (needs FAFO_SPIRV_DOT4).
function(fafo_add_shader target)
  cmake_parse_arguments(arg "DOT4" "NAME;SOURCE" "DEFINES" ${ARGN})
  if(NOT arg_NAME OR NOT arg_SOURCE)
    message(FATAL_ERROR "fafo_add_shader: NAME and SOURCE are required")
  endif()
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/shaders)
  set(header ${out_dir}/${arg_NAME}.spv.h)
  set(dep ${out_dir}/${arg_NAME}.spv.d)
  set(define_flags "")
  foreach(d ${arg_DEFINES})
    list(APPEND define_flags "-D${d}")
  endforeach()
  get_filename_component(source_abs ${arg_SOURCE} ABSOLUTE)
  get_filename_component(source_dir ${source_abs} DIRECTORY)
  file(MAKE_DIRECTORY ${out_dir})
  if(FAFO_SHADER_BATCH)
    # A line of the target's manifest; a DOT4 variant is compiled to ${arg_NAME}.spv and
    # then rewritten with the other DOT4 variants of the target in one tools/spirv_dot4.py run.
    set(batch_defines ${arg_DEFINES})
    set(batch_output ${header})
    if(arg_DOT4)
      list(APPEND batch_defines DOT4=1)
      set(batch_output ${out_dir}/${arg_NAME}.spv)
      set_property(GLOBAL APPEND_STRING PROPERTY FAFO_SHADER_DOT4_MANIFEST_${target}
                   "${batch_output}\t${header}\tfafo_spirv_${arg_NAME}\n")
      set_property(GLOBAL APPEND PROPERTY FAFO_SHADER_DOT4_HEADERS_${target} ${header})
      set_property(GLOBAL APPEND PROPERTY FAFO_SHADER_DOT4_MODULES_${target} ${batch_output})
    endif()
    string(JOIN " " defines ${batch_defines})
    set_property(GLOBAL APPEND_STRING PROPERTY FAFO_SHADER_MANIFEST_${target}
                 "fafo_spirv_${arg_NAME}\t${source_abs}\t${batch_output}\t${defines}\n")
    set_property(GLOBAL APPEND PROPERTY FAFO_SHADER_BATCH_OUTPUTS_${target} ${batch_output})
    set_property(GLOBAL APPEND PROPERTY FAFO_SHADER_DIRS_${target} ${source_dir})
  elseif(arg_DOT4)
    set(spv ${out_dir}/${arg_NAME}.spv)
    set(script ${PROJECT_SOURCE_DIR}/tools/spirv_dot4.py)
    add_custom_command(
      OUTPUT ${spv}
      COMMAND ${FAFO_GLSLANG} --quiet --target-env vulkan1.2 -V ${define_flags} -DDOT4=1 -I${source_dir}
              --depfile ${dep} -o ${spv} ${source_abs}
      MAIN_DEPENDENCY ${source_abs}
      DEPFILE ${dep}
      COMMENT "glslang: ${arg_NAME} (${arg_SOURCE} ${define_flags} DOT4=1)"
      VERBATIM)
    add_custom_command(
      OUTPUT ${header}
      COMMAND ${Python3_EXECUTABLE} ${script} ${spv} ${header} fafo_spirv_${arg_NAME}
              --spirv-dis ${FAFO_SPIRV_DIS} --spirv-as ${FAFO_SPIRV_AS} --spirv-val ${FAFO_SPIRV_VAL}
      DEPENDS ${spv} ${script}
      COMMENT "spirv_dot4: ${arg_NAME}"
      VERBATIM)
  else()
    add_custom_command(
      OUTPUT ${header}
      COMMAND ${FAFO_GLSLANG} --quiet --target-env vulkan1.2 -V ${define_flags} -I${source_dir}
              --vn fafo_spirv_${arg_NAME} --depfile ${dep} -o ${header} ${source_abs}
      MAIN_DEPENDENCY ${source_abs}
      DEPFILE ${dep}
      COMMENT "glslang: ${arg_NAME} (${arg_SOURCE} ${define_flags})"
      VERBATIM)
  endif()
  set_property(GLOBAL APPEND PROPERTY FAFO_SHADERS_${target} ${arg_NAME})
endfunction()

# fafo_embed_shaders(<target> PARTS <n>)
# Defines every shader fafo_add_shader(<target> ...) listed, in <n> generated sources
# (shaders/embedded_shaders_<i>.cpp), each including its share of the C arrays: a few
# compiler runs for all the variants, which build in parallel once their arrays exist.
function(fafo_embed_shaders target)
  cmake_parse_arguments(arg "" "PARTS" "" ${ARGN})
  get_property(names GLOBAL PROPERTY FAFO_SHADERS_${target})
  list(LENGTH names count)
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/shaders)
  get_property(manifest GLOBAL PROPERTY FAFO_SHADER_MANIFEST_${target})
  if(manifest)
    # Every batched variant in one run, again whenever a file in a source's folder changes
    # (the tool resolves includes there: shaders/*.glsl, shaders/iq_grids.inc).
    get_property(batch_outputs GLOBAL PROPERTY FAFO_SHADER_BATCH_OUTPUTS_${target})
    get_property(dirs GLOBAL PROPERTY FAFO_SHADER_DIRS_${target})
    list(REMOVE_DUPLICATES dirs)
    set(globs "")
    foreach(dir ${dirs})
      list(APPEND globs ${dir}/*)
    endforeach()
    file(GLOB shader_files CONFIGURE_DEPENDS ${globs})
    list(LENGTH batch_outputs batch_count)
    set(manifest_file ${out_dir}/variants.tsv)
    file(GENERATE OUTPUT ${manifest_file} CONTENT "${manifest}")
    add_custom_command(
      OUTPUT ${batch_outputs}
      COMMAND fafo-compile-shaders ${manifest_file}
      DEPENDS fafo-compile-shaders ${manifest_file} ${shader_files}
      COMMENT "fafo-compile-shaders: ${batch_count} shader variants of ${target}"
      VERBATIM)
  endif()
  get_property(dot4_manifest GLOBAL PROPERTY FAFO_SHADER_DOT4_MANIFEST_${target})
  if(dot4_manifest)
    # The batch's DOT4 modules given the dot product instruction, all in one run.
    get_property(dot4_headers GLOBAL PROPERTY FAFO_SHADER_DOT4_HEADERS_${target})
    get_property(dot4_modules GLOBAL PROPERTY FAFO_SHADER_DOT4_MODULES_${target})
    list(LENGTH dot4_headers dot4_count)
    set(dot4_file ${out_dir}/dot4_variants.tsv)
    file(GENERATE OUTPUT ${dot4_file} CONTENT "${dot4_manifest}")
    set(script ${PROJECT_SOURCE_DIR}/tools/spirv_dot4.py)
    add_custom_command(
      OUTPUT ${dot4_headers}
      COMMAND ${Python3_EXECUTABLE} ${script} --manifest ${dot4_file}
              --spirv-dis ${FAFO_SPIRV_DIS} --spirv-as ${FAFO_SPIRV_AS} --spirv-val ${FAFO_SPIRV_VAL}
      DEPENDS ${dot4_modules} ${dot4_file} ${script}
      COMMENT "spirv_dot4: ${dot4_count} DOT4 variants of ${target}"
      VERBATIM)
  endif()
  math(EXPR last_part "${arg_PARTS} - 1")
  foreach(part RANGE ${last_part})
    set(includes "")
    set(definitions "")
    set(headers "")
    set(index 0)
    foreach(name ${names})
      math(EXPR owner "${index} % ${arg_PARTS}")
      math(EXPR index "${index} + 1")
      if(NOT owner EQUAL part)
        continue()
      endif()
      string(APPEND includes "#include \"${name}.spv.h\"\n")
      string(APPEND definitions
             "extern const EmbeddedShader ${name}{\"${name}\", fafo_spirv_${name}, std::size(fafo_spirv_${name})};\n")
      list(APPEND headers ${out_dir}/${name}.spv.h)
    endforeach()
    set(cpp ${out_dir}/embedded_shaders_${part}.cpp)
    file(CONFIGURE OUTPUT ${cpp} CONTENT
"// Generated by cmake/vulkan.cmake (fafo_embed_shaders): part ${part} of ${arg_PARTS} of the
// ${count} SPIR-V modules of ${target}, as glslang wrote them (shaders/*.spv.h).
#include <cstdint>
#include <iterator>

#include \"backend/vulkan/embedded_shaders.h\"

${includes}
namespace fafo::vulkan::shaders {

${definitions}
}  // namespace fafo::vulkan::shaders
")
    target_sources(${target} PRIVATE ${cpp})
    set_source_files_properties(${cpp} PROPERTIES OBJECT_DEPENDS "${headers}" SKIP_UNITY_BUILD_INCLUSION ON)
  endforeach()
endfunction()
