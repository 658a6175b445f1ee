// The allowlist parser behind the run page's inline timelines (see inline_svg.h).
#include "launcher/inline_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>
#include <vector>

#include "scheduler/timeline.h"  // XmlEscape

namespace baton {
namespace {

// What an attribute's value may be.
enum class ValueKind {
  kNamespace,   // exactly the SVG namespace
  kLength,      // a number, or a number followed by '%'
  kNumber,      // -12, 3.5, 1e+06
  kViewBox,     // four numbers, space-separated
  kColor,       // #rgb, #rrggbb, white, black, none
  kFontFamily,  // sans-serif, monospace
  kTextAnchor,  // start, middle, end
};

// clang-format off
// The attributes Baton's timeline pictures use (scheduler/timeline.cc RenderSvg, launcher/
// outputs.cc MeasuredTimelineSvg), on any allowed element.
constexpr std::pair<std::string_view, ValueKind> kAttributes[] = {
    {"xmlns", ValueKind::kNamespace},     {"width", ValueKind::kLength},
    {"height", ValueKind::kLength},       {"x", ValueKind::kLength},
    {"y", ValueKind::kLength},            {"dy", ValueKind::kLength},
    {"font-size", ValueKind::kNumber},    {"fill-opacity", ValueKind::kNumber},
    {"fill", ValueKind::kColor},          {"stroke", ValueKind::kColor},
    {"font-family", ValueKind::kFontFamily}, {"text-anchor", ValueKind::kTextAnchor},
    {"viewBox", ValueKind::kViewBox}};

// Each element and the elements it may hold; <svg> only as the root.
struct ElementRule {
  std::string_view name;
  std::array<std::string_view, 3> children;
};
constexpr ElementRule kElements[] = {
    {"svg", {"g", "rect", "text"}},
    {"g", {"title", "rect", "text"}},
    {"text", {"tspan"}},
    {"rect", {}}, {"tspan", {}}, {"title", {}}};

// The character references XmlEscape writes (and &apos;), and what they stand for.
constexpr std::pair<std::string_view, char> kReferences[] = {
    {"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&#39;", '\''}, {"&apos;", '\''}};
// clang-format on

const ElementRule* FindElement(std::string_view name) {
  for (const ElementRule& rule : kElements) {
    if (rule.name == name) return &rule;
  }
  return nullptr;
}

bool MayHold(const ElementRule& parent, std::string_view child) {
  return std::find(parent.children.begin(), parent.children.end(), child) != parent.children.end();
}

const ValueKind* FindAttribute(std::string_view name) {
  for (const auto& [attribute, kind] : kAttributes) {
    if (attribute == name) return &kind;
  }
  return nullptr;
}

// A decimal number: optional '-', digits with an optional fraction, an optional exponent.
bool IsNumber(std::string_view value) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i;
    return i > start;
  };
  if (i < value.size() && value[i] == '-') ++i;
  bool any = digits();
  if (i < value.size() && value[i] == '.') {
    ++i;
    any = digits() || any;
  }
  if (!any) return false;
  if (i < value.size() && (value[i] == 'e' || value[i] == 'E')) {
    ++i;
    if (i < value.size() && (value[i] == '+' || value[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == value.size();
}

bool IsHexColor(std::string_view value) {
  if (value.empty() || value[0] != '#' || (value.size() != 4 && value.size() != 7)) return false;
  return std::all_of(value.begin() + 1, value.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

bool IsOneOf(std::string_view value, std::initializer_list<std::string_view> allowed) {
  return std::find(allowed.begin(), allowed.end(), value) != allowed.end();
}

bool ValueFits(std::string_view value, ValueKind kind) {
  switch (kind) {
    case ValueKind::kNamespace:
      return value == "http://www.w3.org/2000/svg";
    case ValueKind::kLength:
      return IsNumber(value.substr(0, value.size() - (value.ends_with('%') ? 1 : 0)));
    case ValueKind::kNumber:
      return IsNumber(value);
    case ValueKind::kViewBox: {
      int numbers = 0;
      for (size_t at = 0; at <= value.size(); ++numbers) {
        const size_t space = std::min(value.find(' ', at), value.size());
        if (!IsNumber(value.substr(at, space - at))) return false;
        at = space + 1;
      }
      return numbers == 4;
    }
    case ValueKind::kColor:
      return IsHexColor(value) || IsOneOf(value, {"white", "black", "none"});
    case ValueKind::kFontFamily:
      return IsOneOf(value, {"sans-serif", "monospace"});
    case ValueKind::kTextAnchor:
      return IsOneOf(value, {"start", "middle", "end"});
  }
  return false;
}

// One pass over the file, writing the copy as it goes; the first thing outside the allowlist
// stops it.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  InlineSvgResult Run() {
    SkipSpace();
    if (!Starts("<svg")) return Rejected("no <svg> element first");
    while (pos_ < text_.size()) {
      const bool ok = text_[pos_] != '<' ? Text() : Starts("</") ? CloseTag() : OpenTag();
      if (!ok) return Rejected(why_);
      if (open_.empty() && root_seen_) {
        SkipSpace();
        if (pos_ != text_.size()) return Rejected("more after </svg>");
        return {std::move(out_), ""};
      }
    }
    return Rejected("ends before </svg>");
  }

 private:
  InlineSvgResult Rejected(const std::string& why) const {
    return {std::nullopt, fmt::format("byte {}: {}", failed_at_ ? *failed_at_ : pos_, why)};
  }
  // Stops the parse: `why`, at byte `at` (the start of the tag or attribute at fault).
  bool Fail(std::string why, size_t at) {
    why_ = std::move(why);
    failed_at_ = at;
    return false;
  }
  bool Starts(std::string_view prefix) const { return text_.substr(pos_).starts_with(prefix); }
  static bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
  size_t SkipSpace() {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsSpace(text_[pos_])) ++pos_;
    return pos_ - start;
  }
  // [a-z][a-zA-Z-]*: every element and attribute name Baton writes (viewBox the one with an
  // uppercase letter); anything else (a colon, '!' or '?' of a comment or declaration) ends the
  // name there. Only the allowlist's names pass after that.
  std::string_view Name() {
    const size_t start = pos_;
    const auto fits = [&](char c) {
      return (c >= 'a' && c <= 'z') || (pos_ > start && ((c >= 'A' && c <= 'Z') || c == '-'));
    };
    while (pos_ < text_.size() && fits(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // <name attribute="value" ...> or .../>
  bool OpenTag() {
    const size_t start = pos_++;  // '<'
    const std::string_view name = Name();
    if (name.empty()) return Fail("a comment, declaration or malformed tag", start);
    const ElementRule* rule = FindElement(name);
    if (rule == nullptr) {
      return Fail("an element Baton's timeline pictures do not use", start);
    }
    const bool allowed =
        open_.empty() ? name == "svg" && !root_seen_ : MayHold(*open_.back(), name);
    if (!allowed) return Fail(fmt::format("the element {} is out of place", name), start);
    root_seen_ = true;
    out_ += '<';
    out_ += name;
    std::vector<std::string_view> seen;
    while (true) {
      const size_t spaces = SkipSpace();
      if (Starts(">")) {
        ++pos_;
        out_ += '>';
        open_.push_back(rule);
        return true;
      }
      if (Starts("/>")) {
        pos_ += 2;
        out_ += "/>";
        return true;
      }
      if (spaces == 0) return Fail(fmt::format("a malformed <{}> tag", name), start);
      if (!Attribute(seen)) return false;
    }
  }

  // name="value", its value of its kind.
  bool Attribute(std::vector<std::string_view>& seen) {
    const size_t start = pos_;
    const std::string_view name = Name();
    if (name.empty() || !Starts("=\"")) return Fail("a malformed attribute", start);
    const ValueKind* kind = FindAttribute(name);
    if (kind == nullptr) {
      return Fail("an attribute Baton's timeline pictures do not use", start);
    }
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return Fail(fmt::format("the attribute {} twice", name), start);
    }
    seen.push_back(name);
    pos_ += 2;
    const size_t end = text_.find('"', pos_);
    if (end == std::string_view::npos) {
      return Fail("an attribute value without its closing quote", start);
    }
    const std::string_view value = text_.substr(pos_, end - pos_);
    if (!ValueFits(value, *kind)) {
      return Fail(fmt::format("the attribute {} has a value Baton's timelines never write", name),
                  start);
    }
    pos_ = end + 1;
    out_ += fmt::format(" {}=\"{}\"", name, value);
    return true;
  }

  // </name> of the innermost open element.
  bool CloseTag() {
    const size_t start = pos_;
    pos_ += 2;
    const std::string_view name = Name();
    if (open_.empty() || name != open_.back()->name || !Starts(">")) {
      return Fail("a closing tag that closes no open element", start);
    }
    ++pos_;
    open_.pop_back();
    out_ += fmt::format("</{}>", name);
    return true;
  }

  // Text up to the next tag: the five references decoded, everything escaped again.
  bool Text() {
    std::string text;
    while (pos_ < text_.size() && text_[pos_] != '<') {
      const char c = text_[pos_];
      if (c == '&') {
        const auto* reference =
            std::find_if(std::begin(kReferences), std::end(kReferences),
                         [&](const auto& entry) { return Starts(entry.first); });
        if (reference == std::end(kReferences)) return Fail("a character reference", pos_);
        text += reference->second;
        pos_ += reference->first.size();
        continue;
      }
      if (static_cast<unsigned char>(c) < 0x20 && !IsSpace(c)) {
        return Fail("a control character", pos_);
      }
      text += c;
      ++pos_;
    }
    out_ += XmlEscape(text);
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string out_;
  std::vector<const ElementRule*> open_;  // the elements open at pos_, outermost first
  bool root_seen_ = false;
  std::string why_;
  std::optional<size_t> failed_at_;
};

}  // namespace

InlineSvgResult InlineSvg(std::string_view text) { return Parser(text).Run(); }

}  // namespace baton
