// safetensors: round trips (single file and sharded folder), the real sharded checkpoint, and
// malformed headers, offsets and shard indexes.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "format/safetensors.h"
#include "format_test_util.h"

namespace efim {
namespace {

namespace fs = std::filesystem;
using test::random_bytes;
using test::TempDir;

std::vector<SafetensorsTensor> sample_tensors() {
  std::vector<SafetensorsTensor> ts = {
      {"model.embed_tokens.weight", DType::BF16, {6, 4}, ""},
      {"model.norm.weight", DType::F32, {4}, ""},
      {"lm_head.weight", DType::F16, {6, 4}, ""},
      {"ids", DType::I32, {2, 3}, ""},
      {"mask", DType::I8, {3, 1, 5}, ""},
      {"scalar", DType::F32, {}, ""},
      {"empty", DType::F32, {0, 4}, ""},
  };
  uint32_t seed = 7;
  for (auto& t : ts) {
    uint64_t n = 1;
    for (auto d : t.shape) n *= static_cast<uint64_t>(d);
    t.bytes = random_bytes(n * dtype_info(t.dtype).block_bytes, seed++);
  }
  return ts;
}

void expect_matches(const TensorSource& src, const std::vector<SafetensorsTensor>& ts) {
  for (const auto& t : ts) {
    auto v = src.find(t.name);
    ASSERT_TRUE(v.has_value()) << t.name;
    EXPECT_EQ(v->name, t.name);
    EXPECT_EQ(v->dtype, t.dtype) << t.name;
    EXPECT_EQ(v->shape, t.shape) << t.name;
    ASSERT_EQ(v->nbytes, t.bytes.size()) << t.name;
    if (v->nbytes) {
      EXPECT_EQ(std::memcmp(v->data, t.bytes.data(), v->nbytes), 0) << t.name;
    }
  }
  EXPECT_FALSE(src.find("absent").has_value());
}

TEST(Safetensors, RoundTripSingleFile) {
  TempDir dir;
  auto ts = sample_tensors();
  write_safetensors(dir.file("m.safetensors"), ts, {{"format", "pt"}, {"note", "x\"y"}});
  auto f = SafetensorsFile::open(dir.file("m.safetensors"));
  expect_matches(*f, ts);
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x\"y"}}));
  // File order = data order = the order written.
  std::vector<std::string> names;
  for (const auto& t : ts) names.push_back(t.name);
  EXPECT_EQ(f->tensor_names(), names);
  // Header is padded so the data section starts 8-byte aligned.
  std::string bytes = read_file(dir.file("m.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["model.norm.weight"]["dtype"], "F32");
  EXPECT_EQ(header["ids"]["shape"], nlohmann::json({2, 3}));
}

TEST(Safetensors, RoundTripShardedFolder) {
  TempDir dir;
  auto ts = sample_tensors();
  write_safetensors_folder(dir.path().string(), ts, 64);  // forces several shards
  ASSERT_TRUE(fs::exists(dir.path() / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir.path() / "model.safetensors"));
  auto index = nlohmann::json::parse(read_file(dir.file("model.safetensors.index.json")));
  std::set<std::string> shard_files;
  for (const auto& [name, file] : index["weight_map"].items()) shard_files.insert(file);
  EXPECT_GE(shard_files.size(), 3u);
  const std::string n_str = std::to_string(shard_files.size());
  EXPECT_EQ(*shard_files.begin(), "model-00001-of-0000" + n_str + ".safetensors");
  uint64_t total = 0;
  for (const auto& t : ts) total += t.bytes.size();
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  for (const auto& file : shard_files) {
    auto shard = SafetensorsFile::open(dir.file(file));
    uint64_t in_shard = 0;
    for (const auto& name : shard->tensor_names()) in_shard += shard->find(name)->nbytes;
    EXPECT_TRUE(in_shard <= 64 || shard->tensor_names().size() == 1) << file;
    EXPECT_EQ(shard->metadata().at("format"), "pt");
  }
  auto folder = SafetensorsFolder::open(dir.path().string());
  expect_matches(*folder, ts);
  EXPECT_EQ(folder->tensor_names().size(), ts.size());

  // Small enough for one shard: a single model.safetensors.
  TempDir one;
  write_safetensors_folder(one.path().string(), ts, 0);
  EXPECT_TRUE(fs::exists(one.path() / "model.safetensors"));
  expect_matches(*SafetensorsFolder::open(one.path().string()), ts);
}

// A folder opened as a private huge-page copy (how models load) gives a fused part's whole 2 MB
// pages back through the shard that holds it; a shared mapping and ranges outside every shard
// give nothing back, and the other tensors keep their bytes.
TEST(Safetensors, DiscardGivesBackWholePagesOfTheShardCopy) {
  TempDir dir;
  const size_t mb2 = size_t{2} << 20;
  std::vector<SafetensorsTensor> ts = {{"a", DType::F32, {3, static_cast<int64_t>(mb2 / 4)}, ""},
                                       {"b", DType::F32, {3, static_cast<int64_t>(mb2 / 4)}, ""}};
  for (uint32_t i = 0; i < ts.size(); ++i) ts[i].bytes = random_bytes(3 * mb2, 40 + i);
  write_safetensors_folder(dir.path().string(), ts, 4 * mb2);  // one tensor per shard
  ASSERT_TRUE(fs::exists(dir.path() / "model.safetensors.index.json"));
  auto shared = SafetensorsFolder::open(dir.path().string());
  auto copy = SafetensorsFolder::open(dir.path().string(), MapMode::kPrivateHugePages);
  const TensorView a = *copy->find("a"), b = *copy->find("b");
  EXPECT_EQ(shared->discard(shared->find("b")->data, 3 * mb2), 0u);
  const std::string outside(16, 'x');
  EXPECT_EQ(copy->discard(outside.data(), outside.size()), 0u);
  // 6 MB inside one shard's copy: at least one whole 2 MB page, at most all three.
  const size_t released = copy->discard(b.data, b.nbytes);
  EXPECT_GE(released, mb2);
  EXPECT_LE(released, b.nbytes);
  EXPECT_EQ(released % mb2, 0u);
  const auto* bd = static_cast<const uint8_t*>(b.data);
  size_t zeros = 0;
  for (size_t i = 0; i < b.nbytes; i += 4096) zeros += bd[i] == 0 && bd[i + 1] == 0 && bd[i + 2] == 0;
  EXPECT_GE(zeros * 4096, released);  // the released pages read as zeros
  EXPECT_EQ(std::memcmp(a.data, ts[0].bytes.data(), a.nbytes), 0);  // the other shard keeps its bytes
  EXPECT_EQ(std::memcmp(shared->find("b")->data, ts[1].bytes.data(), b.nbytes), 0);
}

TEST(Safetensors, RealShardedCheckpoint) {
  const std::string dir = std::string(EFIM_SOURCE_DIR) + "/../shared/models/efim-base-py";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " is absent (optional shared model)";
  auto folder = SafetensorsFolder::open(dir);
  auto index = nlohmann::json::parse(read_file(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(folder->tensor_names().size(), index["weight_map"].size());
  uint64_t total = 0;
  for (const auto& name : folder->tensor_names()) {
    auto v = folder->find(name);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->dtype, DType::BF16) << name;
    EXPECT_EQ(v->nbytes, static_cast<uint64_t>(v->numel()) * 2) << name;
    total += v->nbytes;
  }
  EXPECT_EQ(total, index["metadata"]["total_size"].get<uint64_t>());
  auto emb = folder->find("model.embed_tokens.weight");
  ASSERT_TRUE(emb.has_value());
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{16384, 384}));
  auto norm = folder->find("model.layers.0.input_layernorm.weight");
  ASSERT_TRUE(norm.has_value());
  EXPECT_EQ(norm->shape, (std::vector<int64_t>{384}));
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  auto expect_msg = [&](std::vector<SafetensorsTensor> ts, const std::string& want) {
    try {
      write_safetensors(dir.file("x.safetensors"), ts);
      ADD_FAILURE() << "no error, expected: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  expect_msg({{"a", DType::F32, {2}, "1234567"}}, "tensor 'a' of dtype f32 needs 8 bytes, got 7");
  expect_msg({{"a", DType::Q8_0, {32}, std::string(34, 'q')}}, "cannot hold dtype q8_0");
  expect_msg({{"a", DType::I8, {1}, "x"}, {"a", DType::I8, {1}, "y"}}, "'a' appears twice");
  expect_msg({{"__metadata__", DType::I8, {1}, "x"}}, "reserved");
  expect_msg({{"a", DType::I8, {-1}, ""}}, "negative dim -1");
}

// ---- malformed files ----

std::string file_with_header(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

std::string error_of(const std::string& bytes) {
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());  // exact size for ASan
  try {
    auto f = SafetensorsFile::parse(copy.data(), copy.size(), "t.safetensors");
    uint64_t sum = 0;
    for (const auto& name : f->tensor_names()) {
      auto v = f->find(name);
      for (uint64_t i = 0; i < v->nbytes; ++i) sum += static_cast<const uint8_t*>(v->data)[i];
    }
    (void)sum;
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string one(const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
  return R"({"t": {"dtype": ")" + dtype + R"(", "shape": )" + shape + R"(, "data_offsets": [)" +
         std::to_string(b) + "," + std::to_string(e) + "]}}";
}

TEST(SafetensorsMalformed, Header) {
  EXPECT_ERROR(std::string(5, '\0'), "file is 5 bytes, too short");
  std::string big(16, '\0');
  big[6] = 1;  // header length 2^48
  EXPECT_ERROR(big, "header length 281474976710656 runs past the end of the file (size 16)");
  EXPECT_ERROR(file_with_header("{\"t\": ", ""), "'t.safetensors' header: invalid JSON");
  EXPECT_ERROR(file_with_header("[1, 2]", ""), "header must be a JSON object, got array");
  EXPECT_ERROR(file_with_header(R"({"__metadata__": {"a": 1}})", ""),
               "__metadata__ value of 'a' must be a string, got 1");
  std::string deep = "{\"t\": " + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_ERROR(file_with_header(deep, ""), "JSON nests deeper than 16");
  EXPECT_EQ(error_of(file_with_header("{}  ", "")), "");  // trailing spaces are padding
}

TEST(SafetensorsMalformed, HeaderLengthCap) {
  // A header longer than 100 MB is refused before JSON parsing.
  std::string bytes(8 + (100u << 20) + 1, ' ');
  uint64_t n = (100u << 20) + 1;
  std::memcpy(bytes.data(), &n, 8);
  EXPECT_ERROR(bytes, "header length 104857601 exceeds the 104857600-byte limit");
}

TEST(SafetensorsMalformed, Entries) {
  const std::string d16(16, 'd');
  EXPECT_EQ(error_of(file_with_header(one("F32", "[2, 2]", 0, 16), d16)), "");
  EXPECT_ERROR(file_with_header(one("F64", "[2]", 0, 16), d16),
               "tensor 't' has unsupported dtype 'F64'");
  EXPECT_ERROR(file_with_header(one("I64", "[2]", 0, 16), d16), "unsupported dtype 'I64'");
  EXPECT_ERROR(file_with_header(one("F32", "[2, 3]", 0, 16), d16),
               "tensor 't' holds 16 bytes but shape [2,3] of F32 needs 24");
  EXPECT_ERROR(file_with_header(one("BF16", "[4]", 0, 16), d16), "needs 8");
  EXPECT_ERROR(file_with_header(one("F32", "[4]", 0, 32), d16),
               "data_offsets [0, 32] end past the data section (16 bytes)");
  EXPECT_ERROR(file_with_header(one("F32", "[0]", 9, 8), d16), "are reversed");
  EXPECT_ERROR(file_with_header(one("F32", "[-1]", 0, 0), d16), "shape dim must be a non-negative");
  EXPECT_ERROR(file_with_header(one("F32", "[1.5]", 0, 0), d16), "shape dim");
  EXPECT_ERROR(file_with_header(one("F32", "[4611686018427387904, 4]", 0, 16), d16),
               "has too many elements");
  EXPECT_ERROR(file_with_header(R"({"t": {"dtype": "F32", "shape": [1]}})", d16),
               "needs \"data_offsets\"");
  EXPECT_ERROR(file_with_header(R"({"t": 5})", d16), "tensor 't' entry must be an object");
  EXPECT_ERROR(file_with_header(R"({"t": {"shape": [1], "data_offsets": [0, 4]}})", d16),
               "no string \"dtype\"");
}

TEST(SafetensorsMalformed, DuplicatesAndOverlaps) {
  const std::string d16(16, 'd');
  EXPECT_ERROR(file_with_header(R"({"t": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]},
      "t": {"dtype": "I8", "shape": [1], "data_offsets": [1, 2]}})", d16),
               "duplicate JSON key \"t\"");
  EXPECT_ERROR(file_with_header(R"({"t": {"dtype": "I8", "dtype": "F32", "shape": [1],
      "data_offsets": [0, 1]}})", d16), "duplicate JSON key \"dtype\"");
  EXPECT_ERROR(file_with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", d16),
               "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
  // Identical ranges overlap too; empty tensors overlap nothing.
  EXPECT_ERROR(file_with_header(R"({"a": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]},
      "b": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}})", d16), "overlap");
  EXPECT_EQ(error_of(file_with_header(R"({"a": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]},
      "b": {"dtype": "I8", "shape": [0], "data_offsets": [2, 2]}})", d16)), "");
}

TEST(SafetensorsMalformed, EveryTruncatedPrefixThrows) {
  TempDir dir;
  auto ts = sample_tensors();
  write_safetensors(dir.file("m.safetensors"), ts, {{"format", "pt"}});
  const std::string bytes = read_file(dir.file("m.safetensors"));
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(error_of(bytes.substr(0, n)).empty()) << "prefix " << n << " parsed";
  EXPECT_EQ(error_of(bytes), "");
}

TEST(SafetensorsMalformed, RandomMutations) {
  TempDir dir;
  auto ts = sample_tensors();
  write_safetensors(dir.file("m.safetensors"), ts, {{"format", "pt"}});
  const std::string bytes = read_file(dir.file("m.safetensors"));
  std::mt19937 rng(99);
  int ok = 0, rejected = 0;
  const std::string interesting = "{}[]\":,0123456789-.eE \\";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string m = bytes;
    int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      size_t pos = rng() % m.size();
      m[pos] = rng() % 2 ? interesting[rng() % interesting.size()] : static_cast<char>(rng());
    }
    std::string err = error_of(m);  // throws anything but efim::Error -> test fails
    (err.empty() ? ok : rejected)++;
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(ok, 10);
}

// ---- shard indexes ----

class SafetensorsIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = {{"x", DType::F32, {2}, std::string(8, 'a')}};
    b_ = {{"y", DType::I8, {3}, "bbb"}, {"z", DType::I8, {1}, "c"}};
    write_safetensors(dir_.file("s1.safetensors"), a_);
    write_safetensors(dir_.file("s2.safetensors"), b_);
  }
  void index(const std::string& weight_map) {
    write_file(dir_.file("model.safetensors.index.json"), R"({"weight_map": )" + weight_map + "}");
  }
  std::string error() {
    try {
      SafetensorsFolder::open(dir_.path().string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  TempDir dir_;
  std::vector<SafetensorsTensor> a_, b_;
};

TEST_F(SafetensorsIndex, Valid) {
  index(R"({"x": "s1.safetensors", "y": "s2.safetensors", "z": "s2.safetensors"})");
  auto f = SafetensorsFolder::open(dir_.path().string());
  EXPECT_EQ(f->tensor_names(), (std::vector<std::string>{"x", "y", "z"}));
  expect_matches(*f, a_);
  expect_matches(*f, b_);
}

TEST_F(SafetensorsIndex, MissingShardFile) {
  index(R"({"x": "s1.safetensors", "y": "gone.safetensors"})");
  EXPECT_NE(error().find("names shard 'gone.safetensors' which does not exist"), std::string::npos)
      << error();
}

TEST_F(SafetensorsIndex, MissingTensor) {
  index(R"({"x": "s1.safetensors", "w": "s2.safetensors"})");
  EXPECT_NE(error().find("maps tensor 'w' to shard 's2.safetensors' but that shard has no such"),
            std::string::npos) << error();
  index(R"({"x": "s2.safetensors", "y": "s1.safetensors"})");
  EXPECT_NE(error().find("(it is in 's1.safetensors')"), std::string::npos) << error();
}

TEST_F(SafetensorsIndex, TensorInTwoShards) {
  write_safetensors(dir_.file("s3.safetensors"), a_);
  index(R"({"x": "s1.safetensors", "y": "s3.safetensors"})");
  EXPECT_NE(error().find("tensor 'x' is in both shard 's1.safetensors' and shard 's3.safetensors'"),
            std::string::npos) << error();
}

TEST_F(SafetensorsIndex, BadIndexFiles) {
  index(R"({"x": "../s1.safetensors"})");
  EXPECT_NE(error().find("is not a plain file name"), std::string::npos) << error();
  index(R"({"x": 3})");
  EXPECT_NE(error().find("weight_map['x'] must be a file name"), std::string::npos) << error();
  index(R"({"x": "s1.safetensors", "x": "s2.safetensors"})");
  EXPECT_NE(error().find("duplicate JSON key \"x\""), std::string::npos) << error();
  write_file(dir_.file("model.safetensors.index.json"), "{\"weight_map\": [");
  EXPECT_NE(error().find("invalid JSON"), std::string::npos) << error();
  write_file(dir_.file("model.safetensors.index.json"), "{}");
  EXPECT_NE(error().find("needs an object \"weight_map\""), std::string::npos) << error();
}

TEST(SafetensorsFolderOpen, EmptyFolder) {
  TempDir dir;
  try {
    SafetensorsFolder::open(dir.path().string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither model.safetensors nor"), std::string::npos);
  }
}

}  // namespace
}  // namespace efim
