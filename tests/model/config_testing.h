#pragma once
// What the config parser tests share (hf_config_test.cc and the MoE, Gemma 3 and DeepSeek config
// tests): a config.json text or object parsed, the error a bad one throws, a published config
// with keys changed, and EXPECT_CONTAINS.

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/hf_config.h"

namespace strata::model::config_testing {

inline ModelConfig parse(const std::string& text) {
  return parse_model_config_text(text, "config.json");
}
inline ModelConfig parse(const char* text) { return parse(std::string(text)); }
inline ModelConfig parse(const nlohmann::json& j) { return parse(j.dump()); }

// `base` with `patch` merged in (RFC 7396: null deletes a key, objects merge).
inline nlohmann::json patched(const std::string& base, const nlohmann::json& patch) {
  nlohmann::json j = nlohmann::json::parse(base);
  j.merge_patch(patch);
  return j;
}

// The message of the strata::Error parsing `text` throws; a test failure if it parses.
inline std::string error_of(const std::string& text) {
  try {
    (void)parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no strata::Error for " << text;
  return "";
}
inline std::string error_of(const char* text) { return error_of(std::string(text)); }
inline std::string error_of(const nlohmann::json& j) { return error_of(j.dump()); }

}  // namespace strata::model::config_testing

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)
