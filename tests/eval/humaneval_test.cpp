// HumanEval loading, program assembly and pass@1 scoring of a fixture with known outcomes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "eval/harness.h"
#include "fixture.h"

namespace efim::eval {
namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("efim-he-" + std::to_string(getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string put(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

TEST(HumanEval, LoadsPlainAndGzip) {
  TempDir d;
  const std::string plain = d.put("t.jsonl", fixture::tasks_jsonl());
  auto tasks = load_humaneval(plain);
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].task_id, "Fixture/0/L1");
  EXPECT_EQ(tasks[1].entry_point, "first_word");
  EXPECT_EQ(tasks[0].suffix, "    return c\n");
  ASSERT_EQ(std::system(("gzip -kf " + plain).c_str()), 0);
  auto gz = load_humaneval(plain + ".gz");
  ASSERT_EQ(gz.size(), 2u);
  EXPECT_EQ(gz[1].canonical_solution, tasks[1].canonical_solution);
}

TEST(HumanEval, BadInputNamesLineAndField) {
  TempDir d;
  try {
    load_humaneval(d.put("a.jsonl", "{\"task_id\": \"x\"}\n"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("entry_point"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_humaneval(d.put("b.jsonl", "\n{not json\n")), Error);
  EXPECT_THROW(load_humaneval(d.put("c.jsonl.gz", "\x1f\x8b garbage")), Error);
}

TEST(HumanEval, ProgramIsPromptCompletionSuffixTestCheck) {
  HumanEvalTask t{"id", "f", "def f():\n", "    return 1\n", "", "def check(c):\n    pass\n"};
  EXPECT_EQ(humaneval_program(t, "    x = 0\n"),
            "def f():\n    x = 0\n    return 1\n\ndef check(c):\n    pass\n\ncheck(f)\n");
}

TEST(HumanEval, ScoresAFixtureWithKnownOutcomes) {
  TempDir d;
  auto tasks = load_humaneval(d.put("t.jsonl", fixture::tasks_jsonl()));
  EvalOptions o;
  o.schemes = {{FimOrder::psm}, {FimOrder::efim}};
  o.sandbox.timeout_s = 3;
  auto jobs = make_humaneval_jobs(tasks, o);
  ASSERT_EQ(jobs.size(), 4u);  // task-major, scheme-minor
  EXPECT_EQ(jobs[0].scheme.order, FimOrder::psm);
  EXPECT_EQ(jobs[1].scheme.order, FimOrder::efim);
  EXPECT_EQ(jobs[0].split, jobs[1].split);  // one split per task
  EXPECT_GE(jobs[1].split, 1u);
  EXPECT_LT(jobs[1].split, tasks[0].prompt.size());
  std::vector<InfillOutput> gen(4);
  gen[0].text = "    c = a + b\n";                          // right
  gen[1].text = "    c = a - b\n";                          // wrong: assert fails
  gen[2].text = "    w = words[0] if words else ''\n    return w\nxyz(\n";  // right once trimmed
  gen[3].text = "    while True: pass\n";                   // timeout
  std::vector<ItemResult> items;
  score_humaneval(tasks, "single", jobs, gen, "m", o, items);
  ASSERT_EQ(items.size(), 8u);  // jobs x {raw, trimmed}
  auto find = [&](size_t job, const char* variant) -> const ItemResult& {
    return items[2 * job + (std::string(variant) == "raw" ? 0 : 1)];
  };
  EXPECT_TRUE(find(0, "raw").passed);
  EXPECT_TRUE(find(0, "trimmed").passed);
  EXPECT_FALSE(find(1, "raw").passed);
  EXPECT_EQ(find(1, "raw").status, "failed");
  EXPECT_FALSE(find(2, "raw").passed) << "the repeated suffix leaves a syntax error";
  EXPECT_TRUE(find(2, "trimmed").passed) << find(2, "trimmed").completion;
  EXPECT_EQ(find(2, "trimmed").completion, "    w = words[0] if words else ''\n");
  EXPECT_FALSE(find(3, "raw").passed);
  EXPECT_EQ(find(3, "raw").status, "timeout");
  EXPECT_EQ(find(1, "raw").scheme, "efim");
  EXPECT_EQ(find(0, "raw").id, "Fixture/0/L1");

  auto rows = summarize(items);
  ASSERT_EQ(rows.size(), 4u);  // {psm, efim} x {raw, trimmed}
  for (const auto& r : rows) {
    EXPECT_EQ(r.single.n, 2u);
    EXPECT_EQ(r.em.n, 0u);
    const double want = r.scheme == "psm" ? (r.variant == "raw" ? 50.0 : 100.0) : 0.0;
    EXPECT_DOUBLE_EQ(r.single.value, want) << r.scheme << " " << r.variant;
  }
  const std::string md = to_markdown(rows, "t");
  EXPECT_NE(md.find("| m | psm | 100.00 (2) | - | - | - | - |"), std::string::npos) << md;
  auto j = to_json(items, rows, {{"seed", 1}});
  EXPECT_EQ(j["items"].size(), 8u);
  EXPECT_EQ(j["summary"][0]["humaneval_single_pass1"]["n"], 2);
}

TEST(HumanEval, SelectTasksIsASeededSubset) {
  std::vector<HumanEvalTask> t(10);
  for (int i = 0; i < 10; ++i) t[i].task_id = std::to_string(i);
  auto a = select_tasks(t, 4, 1), b = select_tasks(t, 4, 1), c = select_tasks(t, 4, 2);
  ASSERT_EQ(a.size(), 4u);
  bool differs = false;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i].task_id, b[i].task_id);
    differs |= a[i].task_id != c[i].task_id;
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(select_tasks(t, 0, 1).size(), 10u);
  EXPECT_EQ(select_tasks(t, 0, 1)[3].task_id, "3");
}

}  // namespace
}  // namespace efim::eval

namespace efim::eval {
namespace {

TEST(SpanScoring, KnownCompletionsGiveKnownScores) {
  std::vector<SourceFile> files = {{"f.py", ""}};
  for (int i = 0; i < 30; ++i) files[0].text += "value_" + std::to_string(i) + " = compute(i)\n";
  EvalOptions o;
  o.n_spans = 3;
  o.seed = 9;
  SpanSet set = make_span_jobs(files, o);
  ASSERT_EQ(set.jobs.size(), 6u);
  for (size_t i = 0; i < set.jobs.size(); i += 2) {
    EXPECT_EQ(set.jobs[i].prefix, set.jobs[i + 1].prefix);
    EXPECT_EQ(set.jobs[i].prefix + set.refs[i] + set.jobs[i].suffix, files[0].text);
    EXPECT_EQ(set.jobs[i + 1].scheme.order, FimOrder::efim);
    EXPECT_GE(set.jobs[i + 1].split, 1u);
    EXPECT_LT(set.jobs[i + 1].split, set.jobs[i].prefix.size());
  }
  std::vector<InfillOutput> gen(6);
  gen[0].text = set.refs[0];                 // exact
  gen[1].text = "  " + set.refs[1] + "\n ";  // not EM, ES 100 (stripped)
  gen[2].text = "";                          // ES 0 unless the reference is blank
  gen[3].text = set.refs[3];
  gen[4].text = set.refs[4] + set.jobs[4].suffix;  // runs on into the suffix
  gen[5].text = set.refs[5];
  std::vector<ItemResult> items;
  score_spans(set, gen, "m", o, items);
  ASSERT_EQ(items.size(), 12u);
  EXPECT_TRUE(items[0].em);
  EXPECT_DOUBLE_EQ(items[0].es, 100.0);
  EXPECT_FALSE(items[2].em);
  EXPECT_DOUBLE_EQ(items[2].es, 100.0);
  EXPECT_FALSE(items[4].em);
  EXPECT_DOUBLE_EQ(items[4].es, 0.0);
  EXPECT_FALSE(items[8].em);                              // raw: the suffix repeated
  EXPECT_EQ(items[9].variant, "trimmed");
  EXPECT_LE(items[9].completion.size(), items[8].completion.size());
  auto rows = summarize(items);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].em.n, 3u);
  EXPECT_EQ(rows[0].scheme, "psm");
  EXPECT_EQ(rows[0].variant, "raw");
  EXPECT_NEAR(rows[0].em.value, 100.0 / 3, 1e-9);  // psm jobs 0, 2, 4: only 0 is exact
  EXPECT_NEAR(rows[2].em.value, 200.0 / 3, 1e-9);  // efim jobs 1, 3, 5: 3 and 5
}

}  // namespace
}  // namespace efim::eval
