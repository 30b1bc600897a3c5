// llama.cpp's own server routes beyond /infill: POST /completion (its native completion:
// a string, token ids or a mix of both), GET /props, POST /tokenize, POST /detokenize.
#include <algorithm>

#include "base/error.h"
#include "server/server_impl.h"
#include "tokenizer/unicode.h"

namespace efim {
namespace {

using http::json;

// llama.cpp's "mixed" prompt: a string, or a list of strings and token ids. Strings are
// tokenized with special tokens parsed (as llama.cpp does for /completion and /tokenize) and
// the BOS token before the first piece when `add_bos`; ids are taken as given (range-checked).
std::vector<int32_t> tokenize_mixed(const Tokenizer& tok, const json& content, bool add_bos,
                                    bool parse_special, const char* field) {
  std::vector<int32_t> out;
  auto piece = [&](const json& p, size_t i) {
    if (p.is_string()) {
      EncodeOptions eo;
      eo.parse_special = parse_special;
      eo.add_bos = add_bos && i == 0;
      const auto ids = tok.encode(p.get<std::string>(), eo);
      out.insert(out.end(), ids.begin(), ids.end());
      return;
    }
    EFIM_CHECK(p.is_number_integer(), "field '", field, "': element ", i,
               " must be a string or a token id, got ", http::describe(p));
    const bool in_range = p.is_number_unsigned()
                              ? p.get<uint64_t>() < uint64_t(tok.vocab_size())
                              : p.get<int64_t>() >= 0 && p.get<int64_t>() < tok.vocab_size();
    EFIM_CHECK(in_range, "field '", field, "': token id ", p.dump(), " at ", i,
               " is outside the vocabulary [0, ", tok.vocab_size(), ")");
    out.push_back(p.get<int32_t>());
  };
  if (content.is_string()) {
    piece(content, 0);
    return out;
  }
  EFIM_CHECK(content.is_array(), "field '", field,
             "' must be a string or a list of strings and token ids, got ", http::describe(content));
  // llama.cpp reads a list of lists (or of strings only, beyond one) as several prompts.
  const bool several = content.size() > 1 && std::all_of(content.begin(), content.end(),
                                                          [](const json& x) { return x.is_string(); });
  EFIM_CHECK(!several && std::none_of(content.begin(), content.end(),
                                      [](const json& x) { return x.is_array(); }),
             "field '", field, "': efim takes one prompt per request (a string or one list of "
             "strings and token ids)");
  for (size_t i = 0; i < content.size(); ++i) piece(content[i], i);
  return out;
}

NativeJob parse_completion_native(Server::Impl& s, const json& body) {
  auto it = body.find("prompt");
  EFIM_CHECK(it != body.end() && !it->is_null(),
             "field 'prompt' (a string, or a list of strings and token ids) is required");
  const int64_t n_predict = http::get_int(body, "n_predict", -1, s.n_ctx - 1)
                                .value_or(http::get_int(body, "max_tokens", -1, s.n_ctx - 1)
                                              .value_or(-1));
  const std::optional<bool> token_healing = parse_token_healing(body);
  NativeJob job;
  parse_native_fields(s, body, job);
  const bool text = it->is_string();
  size_t text_bytes = it->is_string() ? it->get_ref<const std::string&>().size() : 0;
  if (it->is_array())
    for (const json& x : *it)
      if (x.is_string()) text_bytes += x.get_ref<const std::string&>().size();
  s.check_prompt_bytes(text_bytes, "prompt");
  job.request.prompt = tokenize_mixed(s.tok, *it, s.tok.add_bos_default(), true, "prompt");
  EFIM_CHECK(!job.request.prompt.empty(), "field 'prompt' is empty");
  if (text) job.prompt_text = it->get<std::string>();
  const int64_t room = s.n_ctx - int64_t(job.request.prompt.size());
  EFIM_CHECK(room >= 1, "prompt of ", job.request.prompt.size(),
             " tokens leaves no room in the context of ", s.n_ctx, " tokens");
  job.fill_only = n_predict == 0;
  job.request.max_tokens = int32_t(n_predict > 0 ? std::min(n_predict, room)
                                   : job.fill_only ? 1 : room);
  // Token healing of a plain text prompt's tail, as /v1/completions does.
  if (text && !job.fill_only && heal_plain(s.opt.healing, token_healing, job.prompt_text))
    job.healing = heal_prompt(s, job.request, s.tok.add_bos_default() ? 1 : 0);
  return job;
}

json props(const Server::Impl& s) {
  auto spelling = [&](int32_t id) {
    return id >= 0 ? std::string(s.tok.token_text(id)) : std::string();
  };
  const json params = {{"temperature", 0.0}, {"top_k", 0},  {"top_p", 1.0}, {"min_p", 0.0},
                       {"seed", 0},          {"n_predict", -1},
                       {"samplers", {"top_k", "temperature", "top_p", "min_p"}}};
  return {{"default_generation_settings", {{"n_ctx", s.n_ctx}, {"params", params}}},
          {"total_slots", s.opt.max_concurrent_requests},
          {"model_alias", s.opt.model_id},
          {"model_path", s.opt.model_path},
          {"modalities", {{"vision", false}, {"audio", false}}},
          {"chat_template", ""},
          {"bos_token", spelling(s.tok.bos())},
          {"eos_token", spelling(s.tok.eos())},
          {"build_info", "efim"},
          {"is_sleeping", false},
          {"infill", s.infill_error.empty()},
          {"infill_mode", std::string(mode_name(s.opt.infill_mode))}};
}

// A token's text for /tokenize's with_pieces: a string when it is valid UTF-8, else its bytes.
json piece_json(std::string_view bytes) {
  const std::string s(bytes);
  if (unicode::is_valid_utf8(s)) return s;
  json out = json::array();
  for (unsigned char c : s) out.push_back(int(c));
  return out;
}

}  // namespace

void add_llama_routes(Server::Impl& s) {
  s.http.Post("/completion", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      SlotPtr slot = s.admit();
      NativeJob job = parse_completion_native(s, http::parse_body(req.body));
      s.hold_tokens(*slot, int64_t(job.request.prompt.size()), "prompt");
      respond_native(s, std::move(job), std::move(slot), res);
    });
  });
  s.http.Post("/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      SlotPtr slot = s.admit();
      NativeJob job = parse_completion_native(s, http::parse_body(req.body));
      s.hold_tokens(*slot, int64_t(job.request.prompt.size()), "prompt");
      respond_native(s, std::move(job), std::move(slot), res);
    });
  });
  s.http.Get("/props", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(http::dump(props(s)), "application/json");
  });
  s.http.Post("/tokenize", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      const json body = http::parse_body(req.body);
      json tokens = json::array();
      if (auto it = body.find("content"); it != body.end() && !it->is_null()) {
        const bool add_special = http::get_bool(body, "add_special").value_or(false);
        const bool parse_special = http::get_bool(body, "parse_special").value_or(true);
        const bool with_pieces = http::get_bool(body, "with_pieces").value_or(false);
        for (int32_t id : tokenize_mixed(s.tok, *it, add_special, parse_special, "content")) {
          if (with_pieces)
            tokens.push_back({{"id", id}, {"piece", piece_json(s.tok.token_bytes(id))}});
          else
            tokens.push_back(id);
        }
      }
      res.set_content(http::dump(json{{"tokens", tokens}}), "application/json");
    });
  });
  s.http.Post("/detokenize", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      const json body = http::parse_body(req.body);
      std::vector<int32_t> ids;
      if (auto it = body.find("tokens"); it != body.end() && !it->is_null()) {
        EFIM_CHECK(it->is_array(), "field 'tokens' must be a list of token ids, got ",
                   http::describe(*it));
        EFIM_CHECK(std::none_of(it->begin(), it->end(), [](const json& x) { return x.is_string(); }),
                   "field 'tokens' must hold token ids only");
        ids = tokenize_mixed(s.tok, *it, false, false, "tokens");
      }
      res.set_content(http::dump(json{{"content", s.tok.decode(ids)}}), "application/json");
    });
  });
}

}  // namespace efim
