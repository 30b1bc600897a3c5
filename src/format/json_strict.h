// Strict JSON parsing for untrusted headers and config files: duplicate keys (which nlohmann
// would silently resolve to the last one) and nesting deeper than 16 levels are errors, and
// syntax errors become efim::Error prefixed with `label` ("safetensors 'x' header: ...").
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace efim {

nlohmann::json parse_json_strict(const char* begin, const char* end, const std::string& label);

inline nlohmann::json parse_json_strict(const std::string& text, const std::string& label) {
  return parse_json_strict(text.data(), text.data() + text.size(), label);
}

}  // namespace efim
