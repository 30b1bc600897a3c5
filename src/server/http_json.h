// JSON request fields for the HTTP routes: typed, range-checked reads that throw efim::Error
// naming the field (the routes answer 400 with that message), and the error body format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace efim::http {

using nlohmann::json;

// Parses a request body; throws Error for malformed JSON (invalid UTF-8 included) or a body
// that is not a JSON object.
json parse_body(const std::string& body);

// Absent or null fields give nullopt; a value of another type or out of range throws Error.
std::optional<std::string> get_string(const json& j, const char* field);
std::optional<bool> get_bool(const json& j, const char* field);
std::optional<double> get_number(const json& j, const char* field);
std::optional<int64_t> get_int(const json& j, const char* field, int64_t lo, int64_t hi);

// A client's value as an error message quotes it: its JSON type and text, cut to 64 bytes
// (`string "abc"`, `array [1,2]`).
std::string describe(const json& v);

// {"error": {"message", "type", "code"}}; an empty code is written as null.
std::string error_body(const std::string& message, const std::string& type,
                       const std::string& code = {});

// Serializes model text safely: invalid UTF-8 bytes become U+FFFD instead of throwing.
std::string dump(const json& j);

}  // namespace efim::http
