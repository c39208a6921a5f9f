#pragma once
// PCRE2 as the reference matcher of the grammar layer's regex dialect (a subset of PCRE's with
// the same meaning): a whole-subject match in UTF mode, \xHH and \uHHHH as the dialect reads them.

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace strata::grammar {

class PcreReference {
 public:
  explicit PcreReference(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF | PCRE2_ALT_BSUX, &err,
                          &offset, nullptr);
    if (code_ == nullptr) throw std::runtime_error("PCRE2 refused " + pattern);
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~PcreReference() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  PcreReference(const PcreReference&) = delete;
  PcreReference& operator=(const PcreReference&) = delete;

  // Whether the whole of s matches (false for invalid UTF-8, which PCRE2 refuses to match).
  bool matches(std::string_view s) const {
    const int rc =
        pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data_, nullptr);
    return rc >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

}  // namespace strata::grammar
