// The run page's gate for the timeline SVG files it places inline (launcher/run_page.h): an
// allowlist parser that accepts only what Baton's own timeline pictures are made of
// (scheduler/timeline.h RenderSvg, launcher/outputs.h MeasuredTimelineSvg) and writes the page's
// copy itself from what it parsed.
//
// Safe by construction, not by a list of what to refuse: the copy holds only the elements
// svg, g, rect, text, tspan and title; only the attributes those pictures use, each value checked
// against its kind (a number or percentage, a #rgb/#rrggbb colour or one of a few keywords, the
// SVG namespace for xmlns): no value can hold a URL, an entity or a script; and text re-escaped.
// Anything else anywhere (another element or attribute, a comment, a declaration, an entity other
// than the five XmlEscape writes, single quotes, a malformed tag) rejects the whole file: the page
// then says it is not shown. Nothing in the copy is fetched or run by a browser.
//
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace baton {

struct InlineSvgResult {
  std::optional<std::string> svg;  // the <svg> element to place inline; nullopt: rejected
  // When rejected, where and what, as plain text that names only the allowlist's own elements
  // and attributes, never the file's: "byte 5: an attribute Baton's timeline pictures do not use".
  std::string why;
};

// Parses `text` (an SVG file: one <svg> root, whitespace around it) against the allowlist.
InlineSvgResult InlineSvg(std::string_view text);

}  // namespace baton
