// Request fields shared by the generation routes (OpenAI, llama.cpp, Ollama): sampling, the
// sampler chain, stop strings, the number of completions, and the llama.cpp sampling options
// efim does not implement (refused unless at their "off" value, never silently ignored).
#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.h"
#include "server/server_impl.h"

namespace efim {
namespace {

using http::json;

// llama.cpp stages that efim does not run: with their parameters at the off values (which
// check_unimplemented enforces) llama.cpp's own stage is the identity, so skipping is exact.
bool is_identity_stage(const std::string& lower) {
  static const char* const kNames[] = {"dry",         "typ_p",       "typ-p",  "typp", "typ",
                                       "top_n_sigma", "top-n-sigma", "topnsigma", "xtc",
                                       "penalties"};
  return std::any_of(std::begin(kNames), std::end(kNames),
                     [&](const char* n) { return lower == n; });
}

std::vector<SamplerStage> parse_stage_names(const json& names) {
  std::vector<SamplerStage> out;
  for (const json& n : names) {
    EFIM_CHECK(n.is_string(), "field 'samplers' must hold sampler names, got ", http::describe(n));
    std::string lower = n.get<std::string>();
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    SamplerStage s{};
    if (parse_sampler_stage(lower, s)) {
      out.push_back(s);
      continue;
    }
    if (is_identity_stage(lower)) continue;
    throw Error(str("field 'samplers': sampler '", n.get<std::string>(),
                    "' is not supported; efim runs top_k, top_p, min_p, temperature and infill "
                    "(dry, typ_p, top_n_sigma, xtc and penalties are accepted as no-ops at their "
                    "off settings)"));
  }
  return out;
}

// llama.cpp's one-letter form: k top_k, p top_p, m min_p, t temperature, i infill; d dry,
// y typ_p, s top_n_sigma, x xtc, e penalties are the no-op stages.
std::vector<SamplerStage> parse_stage_chars(const std::string& chars) {
  std::vector<SamplerStage> out;
  for (char c : chars) {
    switch (c) {
      case 'k': out.push_back(SamplerStage::top_k); break;
      case 'p': out.push_back(SamplerStage::top_p); break;
      case 'm': out.push_back(SamplerStage::min_p); break;
      case 't': out.push_back(SamplerStage::temperature); break;
      case 'i': out.push_back(SamplerStage::infill); break;
      case 'd': case 'y': case 's': case 'x': case 'e': break;
      default:
        throw Error(str("field 'samplers': sampler letter '", std::string(1, c),
                        "' is not supported (efim: k p m t i; d y s x e as no-ops)"));
    }
  }
  return out;
}

// A sampling option llama.cpp honours and efim does not: refused unless it is at `off`.
void refuse_number(const json& body, const char* field, double off) {
  if (auto v = http::get_number(body, field); v && *v != off)
    throw Error(str("field '", field, "' = ", *v, " is not supported by efim (only ", off,
                    ", which turns it off); leave it out"));
}

}  // namespace

std::vector<SamplerStage> parse_samplers(const json& body) {
  auto it = body.find("samplers");
  if (it == body.end() || it->is_null()) return {};
  if (it->is_string()) return parse_stage_chars(it->get<std::string>());
  EFIM_CHECK(it->is_array(), "field 'samplers' must be a list of names or a string, got ",
             http::describe(*it));
  return parse_stage_names(*it);
}

void check_unimplemented(const json& body) {
  refuse_number(body, "repeat_penalty", 1.0);
  refuse_number(body, "frequency_penalty", 0.0);
  refuse_number(body, "presence_penalty", 0.0);
  refuse_number(body, "dry_multiplier", 0.0);
  refuse_number(body, "typical_p", 1.0);
  refuse_number(body, "xtc_probability", 0.0);
  refuse_number(body, "mirostat", 0.0);
  refuse_number(body, "dynatemp_range", 0.0);
  if (auto v = http::get_number(body, "top_n_sigma"); v && *v > 0)
    throw Error(str("field 'top_n_sigma' = ", *v, " is not supported by efim; leave it out"));
  for (const char* f : {"grammar", "json_schema", "response_format", "logit_bias", "lora"}) {
    auto it = body.find(f);
    if (it == body.end() || it->is_null()) continue;
    const bool empty = (it->is_string() || it->is_array() || it->is_object()) && it->empty();
    EFIM_CHECK(empty, "field '", f, "' is not supported by efim; leave it out");
  }
}

SamplingParams parse_sampling(const json& body, int32_t vocab) {
  check_unimplemented(body);
  SamplingParams p;
  if (auto v = http::get_number(body, "temperature")) p.temperature = float(*v);
  if (auto v = http::get_number(body, "top_p")) p.top_p = float(*v);
  if (auto v = http::get_number(body, "min_p")) p.min_p = float(*v);
  // llama.cpp clients send top_k up to (and beyond) the vocabulary; more than vocab is "off".
  if (auto v = http::get_int(body, "top_k", 0, INT64_MAX))
    p.top_k = int32_t(std::min<int64_t>(*v, vocab));
  // llama.cpp's and Ollama's -1 asks for a random seed.
  if (auto v = http::get_int(body, "seed", INT64_MIN, INT64_MAX))
    p.seed = *v == -1 ? (uint64_t(std::random_device{}()) << 32) | std::random_device{}()
                      : uint64_t(*v);
  p.chain = parse_samplers(body);
  validate(p);
  return p;
}

void parse_speculative(const json& body, Request& r) {
  if (auto v = http::get_bool(body, "speculative")) r.speculative = *v;
  if (auto v = http::get_int(body, "speculative.n_max", 0, 1024)) {
    r.speculative = r.speculative && *v > 0;
    r.max_draft = int32_t(*v);
  }
  // The shortest draft is the engine's (efim serve --draft-min); any value is accepted.
  (void)http::get_int(body, "speculative.n_min", 0, 1024);
  // llama.cpp's draft-model probability floor (n-gram drafts have no probabilities).
  if (auto v = http::get_number(body, "speculative.p_min")) {
    EFIM_CHECK(*v >= 0 && *v <= 1, "field 'speculative.p_min' must be in [0, 1], got ", *v);
    r.draft_p_min = static_cast<float>(*v);
  }
}

std::vector<std::string> parse_stops(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return {};
  if (it->is_string()) return {it->get<std::string>()};
  EFIM_CHECK(it->is_array(), "field '", field, "' must be a string or a list of strings, got ",
             http::describe(*it));
  std::vector<std::string> out;
  for (const json& s : *it) {
    EFIM_CHECK(s.is_string(), "field '", field, "' must hold strings only, got ", http::describe(s));
    out.push_back(s.get<std::string>());
  }
  return out;
}

int parse_n_choices(const json& body, std::initializer_list<const char*> fields) {
  for (const char* f : fields)
    if (auto v = http::get_int(body, f, 1, kMaxChoices)) return int(*v);
  return 1;
}

}  // namespace efim
