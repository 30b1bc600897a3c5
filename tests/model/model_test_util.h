// Helpers shared by the model tests: temp dirs, the Python oracles (scripts/make_tiny_model.py,
// scripts/ref_forward.py, run with /usr/bin/python3 + numpy), and logits comparison.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace efim::test {

inline const std::string kPython = "/usr/bin/python3";

inline std::string source_path(const std::string& rel) {
  return std::string(EFIM_SOURCE_DIR) + "/" + rel;
}

// A fresh directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "efim-model-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Runs a shell command; a non-zero exit status is a test failure (the oracle is required).
inline ::testing::AssertionResult run_command(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  if (rc != 0)
    return ::testing::AssertionFailure() << "command failed (status " << rc << "): " << cmd;
  return ::testing::AssertionSuccess();
}

// numpy is a hard requirement of these tests: missing numpy fails them.
inline void require_numpy() {
  ASSERT_TRUE(run_command(kPython + " -c 'import numpy' 2>/dev/null"))
      << "numpy for /usr/bin/python3 is required (scripts/deps.sh installs python3-numpy)";
}

inline void make_tiny_model(const std::string& dir, const std::string& kind,
                            const std::string& dtype, int shards = 1) {
  ASSERT_TRUE(run_command(kPython + " " + source_path("scripts/make_tiny_model.py") + " " + dir +
                          " --kind " + kind + " --dtype " + dtype + " --shards " +
                          std::to_string(shards)));
}

inline std::vector<float> read_f32_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return {};
  std::vector<float> v(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

// Reference logits [tokens.size(), vocab] computed in float64 by scripts/ref_forward.py.
inline std::vector<float> reference_logits(const std::string& model_dir,
                                           const std::vector<int32_t>& tokens,
                                           const std::string& out_path) {
  std::string list;
  for (size_t i = 0; i < tokens.size(); ++i) list += (i ? "," : "") + std::to_string(tokens[i]);
  EXPECT_TRUE(run_command(kPython + " " + source_path("scripts/ref_forward.py") + " " + model_dir +
                          " --tokens " + list + " --out " + out_path));
  return read_f32_file(out_path);
}

inline float max_abs(const std::vector<float>& a) {
  float m = 0;
  for (float x : a) m = std::max(m, std::fabs(x));
  return m;
}

// max |a - b|; +inf when sizes differ or a value is not finite.
inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    float d = std::fabs(a[i] - b[i]);
    if (!std::isfinite(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace efim::test
