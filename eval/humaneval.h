// HumanEval-infilling tasks (Bavarian et al. 2022; JSON lines, optionally gzip-compressed):
// task_id, entry_point, prompt (text before the hole), suffix, canonical_solution, test.
#pragma once

#include <string>
#include <vector>

namespace efim::eval {

struct HumanEvalTask {
  std::string task_id, entry_point, prompt, suffix, canonical_solution, test;
};

// Reads a .jsonl or .jsonl.gz file; throws Error naming the file, line and field on bad input.
std::vector<HumanEvalTask> load_humaneval(const std::string& path);

// The program a completion is judged by:
//   prompt + completion + suffix + "\n" + test + "\n" + "check(" + entry_point + ")\n"
// (the dataset's rule; the added newlines only keep the pieces on their own lines).
std::string humaneval_program(const HumanEvalTask& t, const std::string& completion);

// The three subsets and their file names in the data folder.
struct HumanEvalSubset {
  const char* name;  // "single", "multi", "random"
  const char* file;
};
const std::vector<HumanEvalSubset>& humaneval_subsets();

}  // namespace efim::eval
