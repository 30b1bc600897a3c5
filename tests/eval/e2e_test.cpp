// `efim eval` end to end on the bundled model: 4 random spans and the 2 fixture tasks, PSM and
// EFIM; checks the shape of eval.json / eval.md and that a second run gives the same items.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fixture.h"

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Dirs {
  fs::path root = fs::temp_directory_path() / ("efim-eval-e2e-" + std::to_string(getpid()));
  Dirs() {
    fs::create_directories(root / "src");
    fs::create_directories(root / "data");
    std::ofstream(root / "data" / "HumanEval-SingleLineInfilling.jsonl")
        << efim::eval::fixture::tasks_jsonl();
    std::string a, b;
    for (int i = 0; i < 12; ++i) {
      a += "def square_" + std::to_string(i) + "(x):\n    \"\"\"Return x squared.\"\"\"\n"
           "    return x * x\n\n\n";
      b += "class Point" + std::to_string(i) + ":\n    def __init__(self, x, y):\n"
           "        self.x = x\n        self.y = y\n\n";
    }
    std::ofstream(root / "src" / "a.py") << a;
    std::ofstream(root / "src" / "b.py") << b;
  }
  ~Dirs() { fs::remove_all(root); }
};

int run_eval(const Dirs& d, const std::string& out) {
  const std::string cmd = std::string(EFIM_BIN) + " eval --model " + EFIM_SOURCE_DIR +
                          "/models/efim-base-py-q8_0.gguf --suite all --n-spans 4 --sources " +
                          (d.root / "src").string() + " --data " + (d.root / "data").string() +
                          " --subsets single --schemes psm,efim --threads 2 --seed 5 "
                          "--max-new-tokens 24 --out " + (d.root / out).string() +
                          " > " + (d.root / (out + ".log")).string() + " 2>&1";
  return std::system(cmd.c_str());
}

TEST(EvalE2E, JsonAndMarkdownShapeAndDeterminism) {
  Dirs d;
  ASSERT_EQ(run_eval(d, "out1"), 0) << slurp(d.root / "out1.log");
  const auto j = nlohmann::json::parse(slurp(d.root / "out1" / "eval.json"));
  ASSERT_EQ(j["summary"].size(), 4u);  // {psm, efim} x {raw, trimmed}
  for (const auto& row : j["summary"]) {
    EXPECT_EQ(row["model"], "efim-base-py-q8_0.gguf");
    EXPECT_EQ(row["span_em"]["n"], 4);
    EXPECT_EQ(row["span_es"]["n"], 4);
    EXPECT_EQ(row["humaneval_single_pass1"]["n"], 2);
    EXPECT_EQ(row["humaneval_multi_pass1"]["n"], 0);
    const double es = row["span_es"]["value"];
    EXPECT_GE(es, 0.0);
    EXPECT_LE(es, 100.0);
  }
  // 4 spans x 2 schemes x 2 variants + 2 tasks x 2 schemes x 2 variants.
  ASSERT_EQ(j["items"].size(), 24u);
  size_t spans = 0, efim_splits = 0;
  for (const auto& it : j["items"]) {
    EXPECT_TRUE(it["completion"].is_string());
    EXPECT_TRUE(it["variant"] == "raw" || it["variant"] == "trimmed");
    EXPECT_TRUE(it["scheme"] == "psm" || it["scheme"] == "efim");
    EXPECT_LE(it["n_generated"].get<int>(), 24);
    if (it["kind"] == "span") {
      ++spans;
      EXPECT_TRUE(it.contains("em") && it.contains("es"));
      const std::string ref = it["reference"];
      EXPECT_GE(ref.size(), 16u);
      EXPECT_LE(ref.size(), 128u);
    } else {
      EXPECT_TRUE(it.contains("passed"));
      EXPECT_TRUE(it["status"] == "passed" || it["status"] == "failed" ||
                  it["status"] == "timeout" || it["status"] == "signaled");
    }
    if (it["scheme"] == "efim") efim_splits += it["split"].get<size_t>() > 0;
  }
  EXPECT_EQ(spans, 16u);
  EXPECT_EQ(efim_splits, 12u);
  EXPECT_TRUE(j["config"]["sandbox"]["network_isolated"].get<bool>());
  const std::string md = slurp(d.root / "out1" / "eval.md");
  EXPECT_NE(md.find("| model | scheme | single pass@1 | multi pass@1 | random pass@1 | span EM "
                    "| span ES |"), std::string::npos) << md;
  EXPECT_NE(md.find("| efim-base-py-q8_0.gguf | psm |"), std::string::npos) << md;
  EXPECT_NE(md.find("| efim-base-py-q8_0.gguf | efim |"), std::string::npos) << md;
  EXPECT_NE(md.find("## trimmed"), std::string::npos);

  ASSERT_EQ(run_eval(d, "out2"), 0) << slurp(d.root / "out2.log");
  const auto j2 = nlohmann::json::parse(slurp(d.root / "out2" / "eval.json"));
  EXPECT_EQ(j["items"], j2["items"]) << "same seed, same items";
}

TEST(EvalE2E, BadArgumentsFailWithAMessage) {
  const std::string base = std::string(EFIM_BIN) + " eval --model " + EFIM_SOURCE_DIR +
                           "/models/efim-base-py-q8_0.gguf";
  EXPECT_NE(std::system((base + " --suite nope > /dev/null 2>&1").c_str()), 0);
  EXPECT_NE(std::system((base + " --suite humaneval > /dev/null 2>&1").c_str()), 0);  // no --data
  EXPECT_NE(std::system((base + " --schemes spm > /dev/null 2>&1").c_str()), 0);
}

}  // namespace
