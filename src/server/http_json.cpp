#include "server/http_json.h"

#include "base/error.h"

namespace efim::http {

json parse_body(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  EFIM_CHECK(!j.is_discarded(), "request body is not valid JSON (UTF-8) of ", body.size(),
             " bytes");
  EFIM_CHECK(j.is_object(), "request body must be a JSON object, got ", describe(j));
  return j;
}

namespace {
const json* find(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}
}  // namespace

std::optional<std::string> get_string(const json& j, const char* field) {
  const json* v = find(j, field);
  if (!v) return std::nullopt;
  EFIM_CHECK(v->is_string(), "field '", field, "' must be a string, got ", describe(*v));
  return v->get<std::string>();
}

std::optional<bool> get_bool(const json& j, const char* field) {
  const json* v = find(j, field);
  if (!v) return std::nullopt;
  EFIM_CHECK(v->is_boolean(), "field '", field, "' must be a boolean, got ", describe(*v));
  return v->get<bool>();
}

std::optional<double> get_number(const json& j, const char* field) {
  const json* v = find(j, field);
  if (!v) return std::nullopt;
  EFIM_CHECK(v->is_number(), "field '", field, "' must be a number, got ", describe(*v));
  return v->get<double>();
}

std::optional<int64_t> get_int(const json& j, const char* field, int64_t lo, int64_t hi) {
  const json* v = find(j, field);
  if (!v) return std::nullopt;
  EFIM_CHECK(v->is_number_integer(), "field '", field, "' must be an integer, got ",
             describe(*v));
  // Values beyond int64 arrive as unsigned; they are out of range either way.
  EFIM_CHECK(!(v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)), "field '",
             field, "' = ", v->get<uint64_t>(), " is out of range [", lo, ", ", hi, "]");
  const int64_t x = v->get<int64_t>();
  EFIM_CHECK(x >= lo && x <= hi, "field '", field, "' = ", x, " is out of range [", lo, ", ", hi,
             "]");
  return x;
}

std::string describe(const json& v) {
  std::string text = dump(v);
  if (text.size() > 64) {
    text.resize(61);
    while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80)
      text.pop_back();  // not inside a UTF-8 sequence
    if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();
    text += "...";
  }
  return std::string(v.type_name()) + " " + text;
}

std::string error_body(const std::string& message, const std::string& type,
                       const std::string& code) {
  json c = code.empty() ? json(nullptr) : json(code);
  json e = {{"error", {{"message", message}, {"type", type}, {"code", c}}}};
  return dump(e);
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace efim::http
