#include "eval/humaneval.h"

#include <zlib.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"

namespace efim::eval {
namespace {

std::string gunzip(const std::string& bytes, const std::string& path) {
  z_stream zs{};
  EFIM_CHECK(inflateInit2(&zs, 15 + 32) == Z_OK, "zlib init failed for ", path);
  std::string out;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      fail("corrupt gzip data in ", path, " (zlib code ", rc, ")");
    }
    out.append(buf, sizeof buf - zs.avail_out);
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      fail("truncated gzip data in ", path);
    }
  }
  inflateEnd(&zs);
  return out;
}

std::string field(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  EFIM_CHECK(it != j.end() && it->is_string(), where, ": field '", key,
             "' is missing or not a string");
  return it->get<std::string>();
}

}  // namespace

std::vector<HumanEvalTask> load_humaneval(const std::string& path) {
  std::string text = read_file(path);
  if (text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f &&
      static_cast<unsigned char>(text[1]) == 0x8b)
    text = gunzip(text, path);
  std::vector<HumanEvalTask> tasks;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = str(path, " line ", line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(where, ": invalid JSON: ", e.what());
    }
    EFIM_CHECK(j.is_object(), where, ": expected a JSON object");
    tasks.push_back({field(j, "task_id", where), field(j, "entry_point", where),
                     field(j, "prompt", where), field(j, "suffix", where),
                     field(j, "canonical_solution", where), field(j, "test", where)});
  }
  return tasks;
}

std::string humaneval_program(const HumanEvalTask& t, const std::string& completion) {
  return t.prompt + completion + t.suffix + "\n" + t.test + "\ncheck(" + t.entry_point + ")\n";
}

const std::vector<HumanEvalSubset>& humaneval_subsets() {
  static const std::vector<HumanEvalSubset> s = {
      {"single", "HumanEval-SingleLineInfilling.jsonl.gz"},
      {"multi", "HumanEval-MultiLineInfilling.jsonl.gz"},
      {"random", "HumanEval-RandomSpanInfillingLight.jsonl.gz"}};
  return s;
}

}  // namespace efim::eval
