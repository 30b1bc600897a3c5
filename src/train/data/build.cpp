// Corpus manifest reading and the parallel corpus -> shards build (see build.h).
#include "train/data/build.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "train/data/shards.h"

namespace efim::train {
namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t begin = 0;
  for (;;) {
    size_t tab = line.find('\t', begin);
    fields.push_back(line.substr(begin, tab == std::string::npos ? std::string::npos : tab - begin));
    if (tab == std::string::npos) return fields;
    begin = tab + 1;
  }
}

CorpusDoc parse_row(const std::string& line, size_t line_no, const std::string& where) {
  std::vector<std::string> f = split_tabs(line);
  EFIM_CHECK(f.size() == 5, where, " line ", line_no, ": ", f.size(), " fields, expected 5");
  CorpusDoc d{f[0], f[1], 0, f[3], f[4]};
  EFIM_CHECK(!d.path.empty() && d.path[0] != '/' && d.path.find("..") == std::string::npos,
             where, " line ", line_no, ": path '", d.path, "' must be relative, without '..'");
  size_t used = 0;
  try {
    d.bytes = std::stoull(f[2], &used);
  } catch (const std::exception&) {
    used = 0;
  }
  EFIM_CHECK(used == f[2].size() && used > 0, where, " line ", line_no, ": bytes '", f[2],
             "' is not a number");
  EFIM_CHECK(d.split == "train" || d.split == "valid", where, " line ", line_no, ": split '",
             d.split, "' (expected train or valid)");
  return d;
}

// One document's output, kept until it is written in manifest order.
struct DocResult {
  std::string text;  // the samples' views point into it
  std::vector<Sample> samples;
  std::string jsonl;
  std::string error;
};

void process_doc(const SampleBuilder& builder, const BuildOptions& opts, const CorpusDoc& doc,
                 DocResult& r) {
  try {
    r.text = read_file((std::filesystem::path(opts.corpus_dir) / "files" / doc.path).string());
    EFIM_CHECK(r.text.size() == doc.bytes, "corpus file '", doc.path, "' has ", r.text.size(),
               " bytes, the manifest says ", doc.bytes);
    r.samples = builder.document(r.text, doc.path);
    if (!opts.jsonl) return;
    for (size_t k = 0; k < r.samples.size(); ++k) {
      const Sample& s = r.samples[k];
      nlohmann::json j = {{"doc", doc.path}, {"chunk", k}, {"kind", kind_name(s.kind)},
                          {"fragments", s.fragments}, {"tokens", s.tokens}};
      r.jsonl += j.dump() + "\n";
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
}

std::string build_json(const BuildOptions& o) {
  nlohmann::json j = {{"corpus", o.corpus_dir},
                      {"split", o.split},
                      {"tokenizer", o.tokenizer_label},
                      {"seed", o.fim.seed},
                      {"chunk_chars", o.fim.chunk_chars},
                      {"fim_rate", o.fim.fim_rate},
                      {"short_hole_share", o.fim.short_hole_share},
                      {"hole_mean_chars", o.fim.hole_mean_chars},
                      {"fragment_rate", o.fim.fragment_rate},
                      {"order", "psm"}};
  return j.dump();
}

}  // namespace

std::vector<CorpusDoc> read_manifest(const std::string& dir, const std::string& split) {
  const std::string where = (std::filesystem::path(dir) / "manifest.tsv").string();
  std::istringstream in(read_file(where));
  std::string line;
  EFIM_CHECK(std::getline(in, line) && line == "path\tpackage\tbytes\tsha256\tsplit", where,
             ": first line must be the header 'path<TAB>package<TAB>bytes<TAB>sha256<TAB>split'");
  std::vector<CorpusDoc> docs;
  for (size_t line_no = 2; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    CorpusDoc d = parse_row(line, line_no, where);
    if (split.empty() || d.split == split) docs.push_back(std::move(d));
  }
  return docs;
}

BuildStats build_shards(const Tokenizer& tok, const BuildOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  EFIM_CHECK(opts.split == "train" || opts.split == "valid", "split '", opts.split,
             "' (expected train or valid)");
  std::vector<CorpusDoc> docs = read_manifest(opts.corpus_dir, opts.split);
  if (opts.max_docs > 0 && docs.size() > opts.max_docs) docs.resize(opts.max_docs);
  EFIM_CHECK(!docs.empty(), "corpus '", opts.corpus_dir, "' has no documents in split '",
             opts.split, "'");
  SampleBuilder builder(tok, opts.fim);
  ShardVocab vocab{tok.vocab_size(), tok.eos(), tok.fim().prefix, tok.fim().suffix,
                   tok.fim().middle};
  ShardWriter writer(opts.out_dir, vocab, {opts.shard_tokens, build_json(opts)});
  std::unique_ptr<FILE, int (*)(FILE*)> jsonl(nullptr, &std::fclose);
  const std::string jsonl_path = (std::filesystem::path(opts.out_dir) / "samples.jsonl").string();
  if (opts.jsonl) {
    jsonl.reset(std::fopen(jsonl_path.c_str(), "wb"));
    EFIM_CHECK(jsonl, "cannot open '", jsonl_path, "' for writing");
  }

  BuildStats st;
  uint64_t total_bytes = 0;
  for (const auto& d : docs) total_bytes += d.bytes;
  ProgressBar bar(opts.progress ? total_bytes : 0, {"data " + opts.split, "B", false});
  ThreadPool pool(std::max(1, opts.threads));
  constexpr size_t kBatch = 64;  // documents in flight
  std::vector<DocResult> results(kBatch);
  for (size_t first = 0; first < docs.size(); first += kBatch) {
    const size_t n = std::min(kBatch, docs.size() - first);
    for (auto& r : results) r = DocResult{};
    pool.parallel_for(static_cast<int64_t>(n), 1, [&](int, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        process_doc(builder, opts, docs[first + static_cast<size_t>(i)],
                    results[static_cast<size_t>(i)]);
    });
    for (size_t i = 0; i < n; ++i) {  // in manifest order
      DocResult& r = results[i];
      EFIM_CHECK(r.error.empty(), r.error);
      for (const Sample& s : r.samples) {
        writer.add(s.tokens);
        st.fragments += s.fragments;
        st.kind_count[static_cast<int>(s.kind)] += 1;
      }
      if (jsonl)
        EFIM_CHECK(std::fwrite(r.jsonl.data(), 1, r.jsonl.size(), jsonl.get()) == r.jsonl.size(),
                   "write error on '", jsonl_path, "'");
      st.docs += 1;
      st.bytes += r.text.size();
      if (opts.progress) bar.add(r.text.size());
    }
    if (opts.progress) bar.set_note(str(writer.tokens(), " tokens"));
  }
  writer.finish();
  if (jsonl) EFIM_CHECK(std::fclose(jsonl.release()) == 0, "write error on '", jsonl_path, "'");
  bar.finish();
  st.samples = writer.samples();
  st.tokens = writer.tokens();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace efim::train
