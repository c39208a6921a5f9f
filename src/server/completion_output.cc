#include "server/completion_output.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <span>

#include "server/response_json.h"

namespace strata::server {
namespace {

size_t count_chars(std::string_view utf8) {
  size_t n = 0;
  for (const char c : utf8) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

CompletionOutput::CompletionOutput(const CompletionRequest& request, const ServedModel& model,
                                   size_t prompt_idx)
    : request_(request), model_(model), prompt_(request.prompts[prompt_idx]) {
  for (const std::string& s : request.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
  choices_.resize(static_cast<size_t>(request.n));
  for (int32_t i = 0; i < request.n; ++i) {
    Choice& c = choices_[static_cast<size_t>(i)];
    c.index = static_cast<int32_t>(prompt_idx) * request.n + i;
    if (model.tokenizer != nullptr) c.decoder.emplace(*model.tokenizer, true);
    if (request.echo && prompt_idx < request.prompt_texts.size() &&
        !request.prompt_texts[prompt_idx].empty()) {
      prompt_text_ = request.prompt_texts[prompt_idx];
      c.text = prompt_text_;
    } else if (request.echo && model.tokenizer != nullptr) {
      c.text = model.tokenizer->decode(prompt_, /*skip_special_tokens=*/false);
    }
    c.num_chars = count_chars(c.text);
    if (request.tool_call_format) c.tools.emplace(*request.tool_call_format);
  }
}

// Each prompt token's character offset in the echoed text. Token ids echo as their decode, so
// the offsets follow it; a text prompt echoes as sent, so its ids are matched against the text's
// own encoding and the ids the tokenizer added around it (BOS) point at the start or the end.
std::vector<int32_t> CompletionOutput::prompt_offsets() const {
  std::vector<int32_t> out(prompt_.size(), 0);
  if (model_.tokenizer == nullptr) return out;
  const tokenizer::Tokenizer& tok = *model_.tokenizer;
  std::span<const int32_t> own = prompt_;
  size_t first = 0, limit = SIZE_MAX;
  bool skip_special = false;
  if (!prompt_text_.empty()) {
    limit = count_chars(prompt_text_);
    const std::vector<int32_t> plain = tok.encode(prompt_text_, /*add_special_tokens=*/false);
    const auto at = std::search(prompt_.begin(), prompt_.end(), plain.begin(), plain.end());
    if (at != prompt_.end() && !plain.empty()) {
      first = static_cast<size_t>(at - prompt_.begin());
      own = std::span<const int32_t>(prompt_).subspan(first, plain.size());
    } else {
      skip_special = true;  // an unusual post-processor: the added ids are special, so skip them
    }
  }
  tokenizer::StreamDecoder decoder(tok, skip_special);
  size_t chars = 0;
  for (size_t i = 0; i < own.size(); ++i) {
    out[first + i] = static_cast<int32_t>(std::min(chars, limit));
    chars += count_chars(decoder.push(own[i]));
  }
  for (size_t i = first + own.size(); i < out.size(); ++i) {
    out[i] = static_cast<int32_t>(std::min(chars, limit));
  }
  return out;
}

std::string CompletionOutput::token_text(int32_t id) const {
  if (request_.return_tokens_as_token_ids || model_.tokenizer == nullptr) {
    return "token_id:" + std::to_string(id);
  }
  return model_.tokenizer->decode(std::vector<int32_t>{id}, /*skip_special_tokens=*/false);
}

void CompletionOutput::add_logprob(Choice& c, const TokenLogprobs* lp, int32_t token,
                                   size_t text_offset) {
  CompletionLogprobs& l = c.logprobs;
  l.tokens.push_back(token_text(token));
  l.text_offset.push_back(static_cast<int32_t>(text_offset));
  if (lp == nullptr) {
    l.token_logprobs.emplace_back();
    l.top_logprobs.emplace_back();
    return;
  }
  l.token_logprobs.emplace_back(lp->logprob);
  std::vector<std::pair<std::string, float>> top;
  for (const auto& [id, value] : lp->top_logprobs) top.emplace_back(token_text(id), value);
  l.top_logprobs.emplace_back(std::move(top));
}

// Moves text from held to text: all of it, or all but what could still begin a stop string
// (cut at a UTF-8 character boundary). A stop string found ends the choice there.
void CompletionOutput::release(Choice& c, bool all) {
  for (const std::string& stop : request_.stop) {
    const size_t at = c.held.find(stop);
    if (at != std::string::npos) {
      c.text += c.held.substr(0, at);
      c.held.clear();
      c.stopped = true;
      c.finish_reason = "stop";
      return;
    }
  }
  size_t keep = all || max_stop_len_ == 0 ? 0 : std::min(c.held.size(), max_stop_len_ - 1);
  size_t cut = c.held.size() - keep;
  while (cut > 0 && cut < c.held.size() &&
         (static_cast<unsigned char>(c.held[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  c.text += c.held.substr(0, cut);
  c.held.erase(0, cut);
}

void CompletionOutput::add_tokens(Choice& c, const CompletionDelta& d) {
  for (size_t i = 0; i < d.token_ids.size() && !c.stopped; ++i) {
    const int32_t id = d.token_ids[i];
    ++c.num_tokens;
    if (request_.return_token_ids) c.token_ids.push_back(id);
    if (request_.params.logprobs >= 0) {
      add_logprob(c, i < d.logprobs.size() ? &d.logprobs[i] : nullptr, id, c.num_chars);
    }
    if (c.decoder) {
      const std::string piece = c.decoder->push(id);
      c.num_chars += count_chars(piece);
      c.held += piece;
    }
    release(c, false);
  }
  if (d.finish_reason && !c.stopped) {
    if (c.decoder) c.held += c.decoder->flush();
    release(c, true);
    if (!c.stopped) {
      c.finish_reason = *d.finish_reason == FinishReason::kStop ? "stop" : "length";
      c.stopped = true;
    }
  }
}

bool CompletionOutput::add(const RequestOutput& out) {
  if (!out.prompt_logprobs.empty() && request_.echo && request_.params.logprobs >= 0) {
    const std::vector<int32_t> offsets = prompt_offsets();
    for (Choice& c : choices_) {
      for (size_t i = 0; i < prompt_.size(); ++i) {
        const auto* lp = i < out.prompt_logprobs.size() && out.prompt_logprobs[i]
                             ? &*out.prompt_logprobs[i]
                             : nullptr;
        add_logprob(c, lp, prompt_[i], static_cast<size_t>(offsets[i]));
      }
    }
  }
  cached_tokens_ = {out.metrics.num_cached_tokens, out.metrics.num_host_tier_tokens,
                    out.metrics.num_disk_tier_tokens};
  for (const CompletionDelta& d : out.deltas) {
    add_tokens(choices_[static_cast<size_t>(d.index)], d);
  }
  if (out.finished) {
    for (Choice& c : choices_) {
      if (c.stopped) continue;
      c.text += c.held;
      c.held.clear();
      c.stopped = true;
      c.finish_reason = out.cancelled ? "abort" : "length";
    }
  }
  for (Choice& c : choices_) parse_tools(c);
  return finished();
}

// Feeds the text released since the last call to the choice's tool-call parser, and at the end
// its rest; a choice that stopped with calls finishes "tool_calls", as OpenAI's do.
void CompletionOutput::parse_tools(Choice& c) {
  if (!c.tools || c.parse_finished) return;
  auto take = [&c](ToolCallParse p) {
    c.content += p.content;
    for (ParsedToolCall& call : p.calls) {
      c.calls.push_back({static_cast<int32_t>(c.calls.size()), tool_call_id(), std::move(call.name),
                         std::move(call.arguments)});
    }
  };
  take(c.tools->feed(std::string_view(c.text).substr(c.parsed)));
  c.parsed = c.text.size();
  if (!c.stopped) return;
  take(c.tools->finish());
  c.parse_finished = true;
  if (!c.calls.empty() && c.finish_reason == "stop") c.finish_reason = "tool_calls";
}

bool CompletionOutput::finished() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.stopped; });
}

CompletionOutput::ChoiceDelta CompletionOutput::delta_of(const Choice& c, Sent from) const {
  ChoiceDelta d{c.index, shown(c).substr(from.text), std::nullopt, c.finish_reason, std::nullopt};
  d.tool_calls.assign(c.calls.begin() + static_cast<std::ptrdiff_t>(from.calls), c.calls.end());
  if (request_.return_token_ids) {
    d.token_ids.emplace(c.token_ids.begin() + static_cast<std::ptrdiff_t>(from.token_ids),
                        c.token_ids.end());
  }
  if (request_.params.logprobs >= 0) {
    CompletionLogprobs l;
    const CompletionLogprobs& all = c.logprobs;
    for (size_t i = from.logprobs; i < all.size(); ++i) {
      l.tokens.push_back(all.tokens[i]);
      l.token_logprobs.push_back(all.token_logprobs[i]);
      l.top_logprobs.push_back(all.top_logprobs[i]);
      l.text_offset.push_back(all.text_offset[i]);
    }
    d.logprobs = std::move(l);
  }
  return d;
}

std::vector<CompletionOutput::ChoiceDelta> CompletionOutput::take_deltas() {
  std::vector<ChoiceDelta> out;
  for (Choice& c : choices_) {
    const bool finishing = c.finish_reason.has_value() && c.sent != std::string::npos;
    if (c.sent == std::string::npos) continue;  // finish already sent
    if (shown(c).size() == c.sent && c.logprobs.size() == c.logprobs_sent &&
        c.token_ids.size() == c.token_ids_sent && c.calls.size() == c.calls_sent && !finishing) {
      continue;
    }
    out.push_back(delta_of(c, {c.sent, c.logprobs_sent, c.token_ids_sent, c.calls_sent}));
    if (!c.finish_reason) out.back().finish_reason.reset();
    c.sent = finishing ? std::string::npos : shown(c).size();
    c.logprobs_sent = c.logprobs.size();
    c.token_ids_sent = c.token_ids.size();
    c.calls_sent = c.calls.size();
  }
  return out;
}

std::vector<CompletionOutput::ChoiceDelta> CompletionOutput::choices() const {
  std::vector<ChoiceDelta> out;
  for (const Choice& c : choices_) out.push_back(delta_of(c, {}));
  return out;
}

int64_t CompletionOutput::completion_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += c.num_tokens;
  return n;
}

}  // namespace strata::server
