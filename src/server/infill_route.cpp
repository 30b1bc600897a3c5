// POST /infill, llama.cpp-compatible (the requests llama.vim and llama.vscode send): the prompt
// is planned by the InfillPlanner (PSM / SPM / EFIM by the server's mode), stops on the infill
// stop tokens, `stop` strings and n_indent, and cuts a completion that starts repeating the
// suffix. The answer is llama.cpp's native one (native.cpp); n_cmpl > 1 (llama.vscode asks
// for 3) answers a list of completions of one prompt.
#include "base/error.h"
#include "server/server_impl.h"

namespace efim {
namespace {

using http::json;

std::vector<ExtraChunk> parse_extra(const json& body) {
  auto it = body.find("input_extra");
  if (it == body.end() || it->is_null()) return {};
  EFIM_CHECK(it->is_array(), "field 'input_extra' must be a list, got ", http::describe(*it));
  std::vector<ExtraChunk> out;
  for (const json& c : *it) {
    EFIM_CHECK(c.is_object(), "field 'input_extra' must hold objects, got ", http::describe(c));
    ExtraChunk e;
    e.filename = http::get_string(c, "filename").value_or("");
    e.text = http::get_string(c, "text").value_or("");
    out.push_back(std::move(e));
  }
  return out;
}

NativeJob parse_infill(Server::Impl& s, const json& body) {
  const std::string prefix = http::get_string(body, "input_prefix").value_or("");
  const std::string suffix = http::get_string(body, "input_suffix").value_or("");
  const std::string prompt = http::get_string(body, "prompt").value_or("");
  const std::vector<ExtraChunk> extra = parse_extra(body);
  const int64_t n_predict = http::get_int(body, "n_predict", -1, s.n_ctx - 1).value_or(-1);
  const std::optional<bool> token_healing = parse_token_healing(body);
  NativeJob job;
  parse_native_fields(s, body, job);
  job.suffix = suffix;
  job.prompt_text = prompt;

  // A quarter of the context stays free for the completion, or n_predict when that is more:
  // a warm-up (n_predict 0) and the real request after it (n_predict 128) get the same prompt
  // budget, so the real one finds the warm-up's tokens cached.
  const int64_t reserve = std::max<int64_t>({1, n_predict, s.n_ctx / 4});
  InfillRequest ir;
  ir.prefix = prefix;
  ir.suffix = suffix;
  ir.prompt = prompt;
  ir.extra = extra;
  ir.max_prompt_tokens = size_t(s.n_ctx - reserve);
  InfillPlan p = s.plan_infill(ir, "n_predict", n_predict);
  job.truncated = p.prompt.truncated;
  job.plan = {{"layout", order_name(p.prompt.order)}, {"reason", reason_name(p.reason)}};
  job.request.prompt = std::move(p.prompt.tokens);
  job.request.draft_place = p.place;  // the previous completions here draft this one
  job.request.draft_typed_from = p.prompt.middle_end;
  job.fill_only = n_predict == 0;
  const int64_t room = s.n_ctx - int64_t(job.request.prompt.size());
  EFIM_CHECK(room >= 1, "infill prompt of ", job.request.prompt.size(),
             " tokens leaves no room in the context of ", s.n_ctx);
  // n_predict 0 still samples one token (the engine needs max_tokens > 0); it is not sent.
  const int64_t n = n_predict > 0 ? std::min(n_predict, room) : job.fill_only ? 1 : room;
  job.request.max_tokens = int32_t(n);
  // ignore_eos asks for max_tokens tokens (benchmarks): the infill's end tokens and its
  // suffix-repeat cut are ends of text as well, so they are off too.
  if (job.request.ignore_eos)
    job.suffix.reset();
  else
    job.request.stop_tokens = s.infill_stops;
  // A prompt-only request (n_predict 0) caches the prompt as it is: nothing to heal.
  if (!job.fill_only && heal_infill(s.opt.healing, token_healing))
    job.healing = heal_prompt(s, job.request, p.prompt.middle_end);
  return job;
}

}  // namespace

void add_infill_routes(Server::Impl& s) {
  s.http.Post("/infill", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      SlotPtr slot = s.admit();  // held until the response is complete
      NativeJob job = parse_infill(s, http::parse_body(req.body));
      s.hold_tokens(*slot, int64_t(job.request.prompt.size()), "the infill prompt");
      respond_native(s, std::move(job), std::move(slot), res);
    });
  });
}

}  // namespace efim
