// GGUF reader/writer: round trip of every metadata type, and a clear GgufError
// (naming the file and offset) for every kind of malformed file.
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fafo/gguf.h"
#include "test_support.h"

using namespace fafo;

namespace {

// Builds GGUF bytes by hand so tests can write hostile files.
struct RawGguf {
  std::vector<uint8_t> bytes;
  template <typename T>
  RawGguf& raw(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
    return *this;
  }
  RawGguf& str(const std::string& s) {
    raw<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return raw(version).raw(n_tensors).raw(n_kv);
  }
  RawGguf& kv_u32(const std::string& key, uint32_t v) { return str(key).raw<uint32_t>(4).raw(v); }
  RawGguf& tensor_info(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).raw<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) raw(d);
    return raw(type).raw(offset);
  }
  RawGguf& pad(size_t alignment) {
    while (bytes.size() % alignment) bytes.push_back(0);
    return *this;
  }
  RawGguf& data(size_t n) {
    bytes.resize(bytes.size() + n, 0);
    return *this;
  }
  std::string write(const std::string& name) const {
    const auto path = (test::temp_dir("gguf") / name).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
};

// Opens the file and returns the error message (fails the test if it opens).
std::string open_error(const std::string& path) {
  try {
    GgufFile::open(path);
  } catch (const GgufError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a GgufError for " << path;
  return "";
}

#define EXPECT_ERROR_HAS(msg, text) EXPECT_NE((msg).find(text), std::string::npos) << "message: " << (msg)

// A valid file with one F32 tensor [8, 2].
RawGguf valid_file() {
  RawGguf g;
  g.header(3, 1, 1).kv_u32("test.value", 7).tensor_info("t", {8, 2}, 0, 0).pad(32).data(64);
  return g;
}

}  // namespace

TEST(Gguf, WriterRoundTripsEveryMetadataType) {
  GgufWriter w;
  w.set_u32("k.u32", 4000000000u);
  w.set_i32("k.i32", -5);
  w.set_f32("k.f32", 0.25f);
  w.set_bool("k.bool", true);
  w.set_string("k.str", "héllo");
  w.set_string_array("k.strs", {"a", "", "ccc"});
  w.set_f32_array("k.f32s", {1.5f, -2.0f});
  w.set_i32_array("k.i32s", {1, -2, 3});
  GgufValue u8;
  u8.type = GgufType::UINT8;
  u8.v = uint64_t{200};
  w.set("k.u8", u8);
  GgufValue i64;
  i64.type = GgufType::INT64;
  i64.v = int64_t{-(1LL << 40)};
  w.set("k.i64", i64);
  GgufValue f64;
  f64.type = GgufType::FLOAT64;
  f64.v = 3.141592653589793;
  w.set("k.f64", f64);
  GgufValue nested;
  nested.type = GgufType::ARRAY;
  GgufValue::Array outer{GgufType::ARRAY, {}};
  GgufValue inner;
  inner.type = GgufType::ARRAY;
  inner.v = GgufValue::Array{GgufType::UINT16, {}};
  outer.items.push_back(inner);
  nested.v = outer;
  w.set("k.nested", nested);
  std::vector<uint8_t> data(3 * 32 * 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  w.add_tensor("weights", TensorType::F32, {32, 3}, data);
  w.add_tensor("bias", TensorType::F32, {5}, std::vector<uint8_t>(20, 1));
  const auto path = (test::temp_dir("gguf-rt") / "rt.gguf").string();
  w.write(path);

  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->require_int("k.u32"), 4000000000LL);
  EXPECT_EQ(f->require_int("k.i32"), -5);
  EXPECT_EQ(f->require_float("k.f32"), 0.25);
  EXPECT_TRUE(f->get_bool("k.bool", false));
  EXPECT_EQ(f->require_string("k.str"), "héllo");
  EXPECT_EQ(f->find("k.strs")->as_array().items.at(2).as_string(), "ccc");
  EXPECT_EQ(f->find("k.f32s")->as_array().items.at(1).as_float(), -2.0);
  EXPECT_EQ(f->find("k.i32s")->as_array().items.at(1).as_int(), -2);
  EXPECT_EQ(f->require_int("k.u8"), 200);
  EXPECT_EQ(f->require_int("k.i64"), -(1LL << 40));
  EXPECT_EQ(f->require_float("k.f64"), 3.141592653589793);
  EXPECT_EQ(f->find("k.nested")->as_array().items.at(0).as_array().elem_type, GgufType::UINT16);
  ASSERT_EQ(f->tensors().size(), 2u);
  const GgufTensor& t = f->require_tensor("weights");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{32, 3}));
  EXPECT_EQ(t.n_bytes, data.size());
  EXPECT_EQ(std::memcmp(t.data, data.data(), data.size()), 0);
  EXPECT_EQ(f->require_tensor("bias").data[19], 1);
  EXPECT_EQ((f->require_tensor("bias").data - f->require_tensor("weights").data) % 32, 0);
  EXPECT_EQ(f->get_int("absent", 9), 9);
}

TEST(Gguf, ReadsCustomAlignment) {
  GgufWriter w(64);
  w.add_tensor("a", TensorType::F32, {3}, std::vector<uint8_t>(12, 2));
  w.add_tensor("b", TensorType::F32, {3}, std::vector<uint8_t>(12, 3));
  const auto path = (test::temp_dir("gguf-align") / "a.gguf").string();
  w.write(path);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->require_tensor("b").offset, 64u);
  EXPECT_EQ(f->require_tensor("b").data[0], 3);
}

TEST(Gguf, ValidHandMadeFileOpens) {
  auto f = GgufFile::open(valid_file().write("valid.gguf"));
  EXPECT_EQ(f->require_int("test.value"), 7);
  EXPECT_EQ(f->require_tensor("t").n_rows(), 2);
}

TEST(Gguf, Version2Opens) {
  RawGguf g;
  g.header(2, 0, 1).kv_u32("x", 1);
  EXPECT_EQ(GgufFile::open(g.write("v2.gguf"))->version(), 2u);
}

TEST(GgufErrors, MissingFile) {
  const std::string msg = open_error("/nonexistent/model.gguf");
  EXPECT_ERROR_HAS(msg, "/nonexistent/model.gguf");
  EXPECT_ERROR_HAS(msg, "cannot open");
}

TEST(GgufErrors, EmptyFile) { EXPECT_ERROR_HAS(open_error(RawGguf{}.write("empty.gguf")), "empty file"); }

TEST(GgufErrors, BadMagic) {
  RawGguf g = valid_file();
  g.bytes[0] = 'X';
  const auto path = g.write("magic.gguf");
  const std::string msg = open_error(path);
  EXPECT_ERROR_HAS(msg, path);
  EXPECT_ERROR_HAS(msg, "offset 0");
  EXPECT_ERROR_HAS(msg, "bad magic");
}

TEST(GgufErrors, UnknownVersion) {
  RawGguf g;
  g.header(7, 0, 0);
  const std::string msg = open_error(g.write("version.gguf"));
  EXPECT_ERROR_HAS(msg, "offset 4");
  EXPECT_ERROR_HAS(msg, "unknown GGUF version 7");
  RawGguf v1;
  v1.header(1, 0, 0);
  EXPECT_ERROR_HAS(open_error(v1.write("v1.gguf")), "version 1 is not supported");
}

TEST(GgufErrors, TruncatedHeaderAtEveryByte) {
  // Cutting the header anywhere must give a truncation error, never a crash.
  const RawGguf full = valid_file();
  const size_t header_end = full.bytes.size() - 64;
  for (size_t cut = 1; cut < header_end; ++cut) {
    RawGguf g;
    g.bytes.assign(full.bytes.begin(), full.bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::string msg = open_error(g.write("cut.gguf"));
    EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("bad magic") != std::string::npos ||
                msg.find("exceeds") != std::string::npos || msg.find("past the end") != std::string::npos)
        << "cut at " << cut << ": " << msg;
  }
}

TEST(GgufErrors, TruncatedTensorData) {
  RawGguf g = valid_file();
  g.bytes.resize(g.bytes.size() - 1);
  const std::string msg = open_error(g.write("data.gguf"));
  EXPECT_ERROR_HAS(msg, "tensor 't'");
  EXPECT_ERROR_HAS(msg, "runs past the end of the file");
}

TEST(GgufErrors, StringLengthPastEnd) {
  RawGguf g;
  g.header(3, 0, 1).raw<uint64_t>(1ull << 40).data(16);  // key length, then too few bytes
  const std::string msg = open_error(g.write("strlen.gguf"));
  EXPECT_ERROR_HAS(msg, "offset 24");
  EXPECT_ERROR_HAS(msg, "string length");
}

TEST(GgufErrors, ArrayLengthPastEnd) {
  RawGguf g;
  g.header(3, 0, 1).str("arr").raw<uint32_t>(9).raw<uint32_t>(6).raw<uint64_t>(1ull << 50);
  const std::string msg = open_error(g.write("arrlen.gguf"));
  EXPECT_ERROR_HAS(msg, "key 'arr'");
  EXPECT_ERROR_HAS(msg, "array length");
}

TEST(GgufErrors, UnknownMetadataType) {
  RawGguf g;
  g.header(3, 0, 1).str("k").raw<uint32_t>(99);
  EXPECT_ERROR_HAS(open_error(g.write("kvtype.gguf")), "unknown metadata value type 99");
}

TEST(GgufErrors, DuplicateKey) {
  RawGguf g;
  g.header(3, 0, 2).kv_u32("same", 1).kv_u32("same", 2);
  EXPECT_ERROR_HAS(open_error(g.write("dupkey.gguf")), "duplicate metadata key 'same'");
}

TEST(GgufErrors, HugeCounts) {
  RawGguf g;
  g.header(3, 1ull << 60, 0);
  EXPECT_ERROR_HAS(open_error(g.write("ntensors.gguf")), "tensor count");
  RawGguf h;
  h.header(3, 0, 1ull << 62);
  EXPECT_ERROR_HAS(open_error(h.write("nkv.gguf")), "metadata count");
}

TEST(GgufErrors, OverflowingDimensions) {
  RawGguf g;
  g.header(3, 1, 0).tensor_info("big", {1ull << 32, 1ull << 32, 1ull << 32}, 0, 0).pad(32);
  const std::string msg = open_error(g.write("overflow.gguf"));
  EXPECT_ERROR_HAS(msg, "tensor 'big'");
  EXPECT_ERROR_HAS(msg, "overflows");
}

TEST(GgufErrors, ZeroOrTooManyDimensions) {
  RawGguf g;
  g.header(3, 1, 0).tensor_info("t", {4, 4, 4, 4, 4}, 0, 0);
  EXPECT_ERROR_HAS(open_error(g.write("dims.gguf")), "5 dimensions");
  RawGguf z;
  z.header(3, 1, 0).tensor_info("t", {4, 0}, 0, 0);
  EXPECT_ERROR_HAS(open_error(z.write("zero.gguf")), "invalid size 0");
}

TEST(GgufErrors, UnknownTensorType) {
  RawGguf g;
  g.header(3, 1, 0).tensor_info("t", {32}, 77, 0).pad(32).data(128);
  const std::string msg = open_error(g.write("ttype.gguf"));
  EXPECT_ERROR_HAS(msg, "tensor 't'");
  EXPECT_ERROR_HAS(msg, "unknown tensor type id 77");
  // A format ggml defines and fafo does not read is named, with the ones fafo reads.
  RawGguf iq;
  iq.header(3, 1, 0).tensor_info("blk.0.attn_q.weight", {256}, 22, 0).pad(32).data(128);
  const std::string named = open_error(iq.write("iq2s.gguf"));
  EXPECT_ERROR_HAS(named, "tensor 'blk.0.attn_q.weight' is IQ2_S (ggml type 22), a weight format fafo does not read");
  EXPECT_ERROR_HAS(named, "(it reads F32 F16 ");
  EXPECT_ERROR_HAS(named, " MXFP4)");
}

TEST(GgufErrors, RowNotMultipleOfBlock) {
  RawGguf g;
  g.header(3, 1, 0).tensor_info("q", {33}, 2 /* Q4_0 */, 0).pad(32).data(64);
  EXPECT_ERROR_HAS(open_error(g.write("block.gguf")), "not a multiple of the Q4_0 block size 32");
}

TEST(GgufErrors, DuplicateTensorName) {
  RawGguf g;
  g.header(3, 2, 0).tensor_info("t", {8}, 0, 0).tensor_info("t", {8}, 0, 32).pad(32).data(64);
  EXPECT_ERROR_HAS(open_error(g.write("duptensor.gguf")), "duplicate tensor name 't'");
}

TEST(GgufErrors, TensorDataOutOfBounds) {
  RawGguf g;
  g.header(3, 1, 0).tensor_info("t", {8}, 0, 1ull << 40).pad(32).data(32);
  EXPECT_ERROR_HAS(open_error(g.write("oob.gguf")), "runs past the end of the file");
}

TEST(GgufErrors, MisalignedTensorOffset) {
  RawGguf g;
  g.header(3, 1, 0).tensor_info("t", {8}, 0, 4).pad(32).data(64);
  EXPECT_ERROR_HAS(open_error(g.write("misaligned.gguf")), "not a multiple of the alignment");
}

TEST(GgufErrors, BadAlignmentValue) {
  RawGguf g;
  g.header(3, 0, 1).kv_u32("general.alignment", 24);
  EXPECT_ERROR_HAS(open_error(g.write("align.gguf")), "not a power of two");
}

TEST(GgufErrors, BadBool) {
  RawGguf g;
  g.header(3, 0, 1).str("b").raw<uint32_t>(7).raw<uint8_t>(5);
  EXPECT_ERROR_HAS(open_error(g.write("bool.gguf")), "neither 0 nor 1");
}

TEST(GgufErrors, DeeplyNestedArrays) {
  RawGguf g;
  g.header(3, 0, 1).str("deep").raw<uint32_t>(9);
  for (int i = 0; i < 20; ++i) g.raw<uint32_t>(9).raw<uint64_t>(1);
  EXPECT_ERROR_HAS(open_error(g.write("deep.gguf")), "nested too deeply");
}

TEST(GgufErrors, MissingRequiredKeyAndTensor) {
  auto f = GgufFile::open(valid_file().write("req.gguf"));
  try {
    f->require_string("general.architecture");
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "missing required key 'general.architecture'");
  }
  try {
    f->require_tensor("output.weight");
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "missing required tensor 'output.weight'");
  }
  EXPECT_THROW(f->require_string("test.value"), GgufError);  // wrong type
}

TEST(GgufErrors, RandomCorruptionNeverCrashes) {
  // Flip bytes of a real-looking file at many places; opening must either succeed or throw GgufError.
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.add_tensor("x", TensorType::F32, {4, 2}, std::vector<uint8_t>(32, 0));
  const auto dir = test::temp_dir("gguf-fuzz");
  w.write((dir / "base.gguf").string());
  std::ifstream in(dir / "base.gguf", std::ios::binary);
  std::vector<uint8_t> base((std::istreambuf_iterator<char>(in)), {});
  uint64_t state = 12345;
  int opened = 0, rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    RawGguf g;
    g.bytes = base;
    for (int k = 0; k < 3; ++k) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      g.bytes[(state >> 33) % g.bytes.size()] = static_cast<uint8_t>(state >> 13);
    }
    try {
      GgufFile::open(g.write("fuzz.gguf"));
      ++opened;
    } catch (const GgufError&) {
      ++rejected;
    }
  }
  EXPECT_EQ(opened + rejected, 400);
  EXPECT_GT(rejected, 0);
}

TEST(GgufErrors, ByteSizeThatWrapsAroundIsRejected) {
  RawGguf g;
  g.header(3, 1, 0).tensor_info("wrap", {1ull << 62}, 0 /* F32: 4 bytes each */, 0).pad(32).data(32);
  const std::string msg = open_error(g.write("wrap.gguf"));
  EXPECT_ERROR_HAS(msg, "tensor 'wrap'");
  EXPECT_ERROR_HAS(msg, "byte size overflows");
}

TEST(GgufErrors, AlignmentBelowEightIsRejected) {
  RawGguf g;
  g.header(3, 0, 1).kv_u32("general.alignment", 2);
  EXPECT_ERROR_HAS(open_error(g.write("align2.gguf")), "smaller than 8");
}

TEST(GgufErrors, IntegerTooLargeForItsUse) {
  RawGguf g;
  g.header(3, 0, 1).str("big").raw<uint32_t>(10).raw<uint64_t>(1ull << 63);
  auto f = GgufFile::open(g.write("bigint.gguf"));
  try {
    f->require_int("big");
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "key 'big'");
    EXPECT_ERROR_HAS(std::string(e.what()), "too large");
  }
}

TEST(GgufErrors, FifoIsRejectedWithoutHanging) {
  const auto path = test::temp_dir("gguf-fifo") / "pipe.gguf";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  EXPECT_ERROR_HAS(open_error(path.string()), "not a regular file");
}

TEST(GgufErrors, HugeMetadataArraysAreRefused) {
  // 17M one-byte elements: more than the reader keeps in memory for metadata.
  RawGguf g;
  const uint64_t n = (1ull << 24) + 16;
  g.header(3, 0, 1).str("blob").raw<uint32_t>(9).raw<uint32_t>(0).raw<uint64_t>(n).data(n);
  EXPECT_ERROR_HAS(open_error(g.write("blob.gguf")), "refusing to load them");
}

TEST(Gguf, ManyMetadataKeysOpenQuickly) {
  RawGguf g;
  const int n = 50000;
  g.header(3, 0, n);
  for (int i = 0; i < n; ++i) g.kv_u32("key." + std::to_string(i), static_cast<uint32_t>(i));
  const auto path = g.write("manykeys.gguf");
  const auto t0 = std::chrono::steady_clock::now();
  auto f = GgufFile::open(path);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(f->metadata().size(), static_cast<size_t>(n));
  EXPECT_LT(s, 2.0);  // quadratic duplicate checks took ~5 s here
}
