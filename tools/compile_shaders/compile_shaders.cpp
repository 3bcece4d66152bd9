// fafo-compile-shaders: compiles a list of GLSL compute shader variants to SPIR-V in one
// process, each written as glslangValidator writes it with `-V --target-env vulkan1.2
// -D... --vn NAME` (a C array in a header, cmake/vulkan.cmake embeds it), or without --vn
// (the binary module, for tools/spirv_dot4.py to rewrite). glslangValidator
// spends about 0.2 s of each run building glslang's built-in symbol tables, and the
// Vulkan backend has over a thousand variants; here the tables are built once and a
// variant takes a few milliseconds. Same library, same options: the same words
// (tests/compile_shaders_test.sh compares a sample with glslangValidator's).
//
// Usage: fafo-compile-shaders MANIFEST
// Each line of MANIFEST: NAME <tab> SOURCE <tab> OUTPUT <tab> DEFINES, where NAME is the
// array's name (glslangValidator's --vn) and DEFINES space-separated NAME or NAME=VALUE
// (its -D). An OUTPUT ending in .spv gets the binary module instead of the header, as
// glslangValidator writes it without --vn (tools/spirv_dot4.py rewrites those). Includes
// resolve against the including file's folder, then the SOURCE's. Exit status 1 at the
// first variant that does not compile (with glslang's log and the variant's name), 2 for
// bad usage.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <glslang/Public/ResourceLimits.h>
#include <glslang/Public/ShaderLang.h>
#include <glslang/SPIRV/GlslangToSpv.h>

namespace {

struct Variant {
  std::string name, source, output;
  std::vector<std::string> defines;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep))
    if (!item.empty() || sep == '\t') out.push_back(item);
  return out;
}

bool read_file(const std::string& path, std::string& text) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  text = ss.str();
  return true;
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// An include (quoted or not) by its path relative to the including file's folder, else to
// the top source's: what glslangValidator's DirStackFileIncluder finds for fafo's
// shaders, which include files of their own folder by name (it also searches the
// folders of every file up the include chain and takes absolute paths).
class Includer : public glslang::TShader::Includer {
 public:
  explicit Includer(std::string source_dir) : source_dir_(std::move(source_dir)) {}
  IncludeResult* includeLocal(const char* name, const char* includer, size_t) override {
    for (const std::string& dir : {folder_of(includer), source_dir_}) {
      auto text = std::make_unique<std::string>();
      const std::string path = dir + "/" + name;
      if (read_file(path, *text)) {
        auto* result = new IncludeResult(path, text->data(), text->size(), text.get());
        text.release();
        return result;
      }
    }
    return nullptr;
  }
  IncludeResult* includeSystem(const char* name, const char* includer, size_t depth) override {
    return includeLocal(name, includer, depth);
  }
  void releaseInclude(IncludeResult* result) override {
    if (!result) return;
    delete static_cast<std::string*>(result->userData);
    delete result;
  }

 private:
  std::string source_dir_;
};

// glslangValidator's preamble for -D flags: "#define NAME\n", or "#define NAME VALUE\n"
// for NAME=VALUE.
std::string preamble_of(const std::vector<std::string>& defines) {
  std::string out;
  for (std::string d : defines) {
    const size_t eq = d.find('=');
    if (eq != std::string::npos) d[eq] = ' ';
    out += "#define " + d + "\n";
  }
  return out;
}

bool compile(const Variant& v) {
  std::string text;
  if (!read_file(v.source, text)) {
    std::fprintf(stderr, "fafo-compile-shaders: %s: cannot read %s\n", v.name.c_str(), v.source.c_str());
    return false;
  }
  glslang::TShader shader(EShLangCompute);
  const char* strings[] = {text.c_str()};
  const int lengths[] = {static_cast<int>(text.size())};
  const char* names[] = {v.source.c_str()};
  shader.setStringsWithLengthsAndNames(strings, lengths, names, 1);
  const std::string preamble = preamble_of(v.defines);
  shader.setPreamble(preamble.c_str());
  shader.setEnvInput(glslang::EShSourceGlsl, EShLangCompute, glslang::EShClientVulkan, 100);
  shader.setEnvClient(glslang::EShClientVulkan, glslang::EShTargetVulkan_1_2);
  shader.setEnvTarget(glslang::EShTargetSpv, glslang::EShTargetSpv_1_5);
  const auto messages = static_cast<EShMessages>(EShMsgSpvRules | EShMsgVulkanRules);
  Includer includer(folder_of(v.source));
  glslang::TProgram program;
  bool ok = shader.parse(GetDefaultResources(), 100, false, messages, includer);
  if (ok) {
    program.addShader(&shader);
    ok = program.link(messages);
  }
  if (!ok) {
    std::string defines;
    for (const std::string& d : v.defines) defines += " -D" + d;
    std::fprintf(stderr, "fafo-compile-shaders: %s (%s%s) does not compile:\n%s%s\n", v.name.c_str(), v.source.c_str(),
                 defines.c_str(), shader.getInfoLog(), program.getInfoLog());
    return false;
  }
  std::vector<unsigned int> spirv;
  spv::SpvBuildLogger logger;
  glslang::SpvOptions options;
  glslang::GlslangToSpv(*program.getIntermediate(EShLangCompute), spirv, &logger, &options);
  const std::string messages_text = logger.getAllMessages();
  if (!messages_text.empty()) std::fprintf(stderr, "fafo-compile-shaders: %s: %s", v.name.c_str(), messages_text.c_str());
  // glslang's own writers (glslangValidator's output, byte for byte), which report a file
  // they cannot open only on stdout: an output that is not there afterwards is that.
  std::remove(v.output.c_str());
  const std::string suffix = ".spv";
  if (v.output.size() > suffix.size() && v.output.compare(v.output.size() - suffix.size(), suffix.size(), suffix) == 0)
    glslang::OutputSpvBin(spirv, v.output.c_str());
  else
    glslang::OutputSpvHex(spirv, v.output.c_str(), v.name.c_str());
  if (!std::ifstream(v.output)) {
    std::fprintf(stderr, "fafo-compile-shaders: %s: cannot write %s\n", v.name.c_str(), v.output.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fafo-compile-shaders MANIFEST\n");
    return 2;
  }
  std::ifstream manifest(argv[1]);
  if (!manifest) {
    std::fprintf(stderr, "fafo-compile-shaders: cannot read %s\n", argv[1]);
    return 2;
  }
  std::vector<Variant> variants;
  std::string line;
  for (int number = 1; std::getline(manifest, line); ++number) {
    if (line.empty()) continue;
    std::vector<std::string> fields = split(line, '\t');
    if (fields.size() == 3 && line.back() == '\t') fields.emplace_back();  // no defines
    if (fields.size() != 4 || fields[0].empty() || fields[1].empty() || fields[2].empty()) {
      std::fprintf(stderr, "fafo-compile-shaders: %s:%d: expected NAME<tab>SOURCE<tab>OUTPUT<tab>DEFINES\n", argv[1],
                   number);
      return 2;
    }
    variants.push_back({fields[0], fields[1], fields[2], split(fields[3], ' ')});
  }
  glslang::InitializeProcess();
  bool ok = true;
  for (const Variant& v : variants)
    if (!(ok = compile(v))) break;
  glslang::FinalizeProcess();
  return ok ? 0 : 1;
}
