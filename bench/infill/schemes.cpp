#include "bench/infill/schemes.h"

#include <algorithm>

#include "base/error.h"

namespace efim::bench {

const std::vector<Scheme>& all_schemes() {
  static const std::vector<Scheme> all = {Scheme::nocache_psm, Scheme::cache_psm, Scheme::cache_spm,
                                          Scheme::cache_efim, Scheme::cache_auto};
  return all;
}

std::string_view scheme_name(Scheme s) {
  switch (s) {
    case Scheme::nocache_psm:
      return "nocache-psm";
    case Scheme::cache_psm:
      return "cache-psm";
    case Scheme::cache_spm:
      return "cache-spm";
    case Scheme::cache_efim:
      return "cache-efim";
    case Scheme::cache_auto:
      return "cache-auto";
    case Scheme::cache_auto_noheal:
      return "cache-auto-noheal";
    case Scheme::cache_auto_exact:
      return "cache-auto-exact";
  }
  return "?";
}

Scheme parse_scheme(std::string_view name) {
  for (Scheme s : all_schemes())
    if (scheme_name(s) == name) return s;
  for (Scheme s : {Scheme::cache_auto_noheal, Scheme::cache_auto_exact})
    if (scheme_name(s) == name) return s;
  fail("unknown scheme '", name,
       "' (valid: nocache-psm, cache-psm, cache-spm, cache-efim, "
       "cache-auto, cache-auto-noheal, cache-auto-exact, or all)");
}

bool is_auto(Scheme s) {
  return s == Scheme::cache_auto || s == Scheme::cache_auto_noheal || s == Scheme::cache_auto_exact;
}

std::vector<Scheme> parse_schemes(std::string_view list) {
  if (list == "all") return all_schemes();
  std::vector<Scheme> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = std::min(list.find(',', start), list.size());
    Scheme s = parse_scheme(list.substr(start, comma - start));
    EFIM_CHECK(std::find(out.begin(), out.end(), s) == out.end(), "scheme '", scheme_name(s),
               "' listed twice in '", list, "'");
    out.push_back(s);
    start = comma + 1;
  }
  return out;
}

SchemeServer scheme_server(Scheme s) {
  SchemeServer srv;
  srv.prefix_cache = s != Scheme::nocache_psm;
  srv.infill_mode = is_auto(s) ? "auto" : "psm";
  srv.token_healing = s == Scheme::cache_auto_noheal ? "off" : "auto";
  if (s == Scheme::cache_auto_exact) srv.token_healing_variant = "exact";
  return srv;
}

std::string_view scheme_layout(Scheme s) {
  switch (s) {
    case Scheme::nocache_psm:
    case Scheme::cache_psm:
      return "client PSM ids";
    case Scheme::cache_spm:
      return "client SPM ids";
    case Scheme::cache_efim:
      return "client EFIM ids";
    case Scheme::cache_auto:
      return "server auto (text + suffix)";
    case Scheme::cache_auto_noheal:
      return "server auto, no token healing";
    case Scheme::cache_auto_exact:
      return "server auto, exact token healing";
  }
  return "?";
}

std::vector<int32_t> scheme_tokens(const FimLayout& layout, Scheme s, const UserDoc& u, int r) {
  EFIM_CHECK(r >= 0 && size_t(r) < u.typed.size(), "round ", r, " out of range [0, ",
             u.typed.size(), ") for ", u.path);
  EFIM_CHECK(!is_auto(s), "cache-auto sends text; the server builds its tokens");
  const std::string whole_prefix = u.prefix + u.typed[size_t(r)];
  FimParts parts;
  parts.suffix = u.suffix;
  switch (s) {
    case Scheme::cache_efim:
      parts.prefix = u.prefix;
      parts.inc = u.typed[size_t(r)];
      return layout.build(parts, FimOrder::efim).tokens;
    case Scheme::cache_spm:
      parts.prefix = whole_prefix;
      return layout.build(parts, FimOrder::spm).tokens;
    default:
      parts.prefix = whole_prefix;
      return layout.build(parts, FimOrder::psm).tokens;
  }
}

nlohmann::json request_body(const FimLayout& layout, Scheme s, const UserDoc& u, int r,
                            const SamplingSpec& sp, uint64_t request_index) {
  nlohmann::json body = {{"max_tokens", sp.output_tokens},
                         {"temperature", sp.temperature},
                         {"top_p", sp.top_p},
                         {"top_k", sp.top_k},
                         {"stream", true},
                         {"ignore_eos", true},
                         {"seed", sp.seed + request_index}};
  if (is_auto(s)) {
    body["prompt"] = u.prefix + u.typed.at(size_t(r));
    body["suffix"] = u.suffix;
  } else {
    body["prompt"] = scheme_tokens(layout, s, u, r);
  }
  return body;
}

size_t max_prompt_tokens(const FimLayout& layout, const std::vector<UserDoc>& users) {
  size_t most = 0;
  for (const auto& u : users)
    for (int r = 0; r < int(u.typed.size()); ++r)
      for (Scheme s : {Scheme::cache_psm, Scheme::cache_spm, Scheme::cache_efim})
        most = std::max(most, scheme_tokens(layout, s, u, r).size());
  return most;
}

}  // namespace efim::bench
