// The evaluation: random spans in held-out Python files (EM / ES) and HumanEval-infilling
// (pass@1, one sample per task, executed in the sandbox), each under PSM and EFIM prompts,
// each completion scored raw and after the infill layer's suffix-repeat trim ("trimmed").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/generate.h"
#include "eval/humaneval.h"
#include "eval/sandbox.h"
#include "eval/spans.h"

namespace efim::eval {

struct EvalOptions {
  bool random_span = true, humaneval = true;
  std::vector<Scheme> schemes = {{FimOrder::psm}, {FimOrder::efim}};
  std::vector<std::string> subsets = {"single", "multi", "random"};  // HumanEval subsets
  size_t n_spans = 500;
  uint64_t seed = 1;
  size_t limit = 0;              // HumanEval tasks per subset at most (0 = all); first N by seed
  size_t prefix_chars = 2000;    // random spans: prefix text kept nearest the hole
  size_t suffix_chars = 1000;    // random spans: suffix text kept nearest the hole
  int threads = 2;               // sandbox processes at once
  GenerateOptions gen;           // sampling, max tokens, context
  SandboxOptions sandbox;
};

// One scored completion. kind: "span" or "humaneval"; variant: "raw" or "trimmed".
struct ItemResult {
  std::string model, kind, subset, scheme, variant, id;
  std::string completion, reference;
  size_t split = 0;          // EFIM split index into the prefix (0 for PSM)
  bool em = false;           // spans
  double es = 0;             // spans
  bool passed = false;       // humaneval
  std::string status;        // humaneval: sandbox status
  int32_t n_prompt = 0, n_generated = 0;
  int32_t n_healed = 0;      // prompt tokens backed off by token healing
  std::string finish;
};

// Random-span items: spans drawn from `files`, one InfillJob per (span, scheme).
struct SpanSet {
  std::vector<Span> spans;
  std::vector<InfillJob> jobs;        // [span][scheme] flattened
  std::vector<std::string> refs;      // per job
  std::vector<std::string> ids;       // per job: "file:begin-end"
};
SpanSet make_span_jobs(const std::vector<SourceFile>& files, const EvalOptions& opts);

// HumanEval jobs for tasks x schemes (prefix = prompt, split drawn per task from the seed).
std::vector<InfillJob> make_humaneval_jobs(const std::vector<HumanEvalTask>& tasks,
                                           const EvalOptions& opts);

// The first `limit` tasks after a seeded shuffle (all, in file order, when limit is 0).
std::vector<HumanEvalTask> select_tasks(std::vector<HumanEvalTask> tasks, size_t limit,
                                        uint64_t seed);

// Scores span completions (raw and trimmed): appended to `out`.
void score_spans(const SpanSet& set, const std::vector<InfillOutput>& gen,
                 const std::string& model, const EvalOptions& opts,
                 std::vector<ItemResult>& out);

// Runs every (raw, trimmed) completion in the sandbox, `opts.threads` at a time; identical
// programs run once. Appended to `out`.
void score_humaneval(const std::vector<HumanEvalTask>& tasks, const std::string& subset,
                     const std::vector<InfillJob>& jobs, const std::vector<InfillOutput>& gen,
                     const std::string& model, const EvalOptions& opts,
                     std::vector<ItemResult>& out);

// Whole run over one model (already loaded). sources: held-out files for random spans;
// data_dir: folder with the HumanEval files.
void evaluate_model(Model& model, const Tokenizer& tok, const std::string& model_name,
                    const std::vector<SourceFile>& sources, const std::string& data_dir,
                    const EvalOptions& opts, std::vector<ItemResult>& out);

// Summary rows: one per (model, scheme, variant), with counts.
struct SummaryCell {
  size_t n = 0;
  double value = 0;  // pass@1 in %, EM in %, ES mean (0-100)
};
struct SummaryRow {
  std::string model, scheme, variant;
  SummaryCell single, multi, random, em, es;
};
std::vector<SummaryRow> summarize(const std::vector<ItemResult>& items);

nlohmann::json to_json(const std::vector<ItemResult>& items, const std::vector<SummaryRow>& rows,
                       const nlohmann::json& config);
std::string to_markdown(const std::vector<SummaryRow>& rows, const std::string& title);

}  // namespace efim::eval
