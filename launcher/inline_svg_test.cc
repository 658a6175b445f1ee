// The run page's timeline gate (launcher/inline_svg.h): Baton's own timeline pictures pass
// unchanged; every way found to run script or fetch through an SVG file is rejected, and the
// page then names the file instead of placing it.
#include "launcher/inline_svg.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/run_page.h"
#include "scheduler/generators.h"
#include "scheduler/simulator.h"
#include "scheduler/timeline.h"

namespace baton {
namespace {

// What a trial against the old denylist got through (issue 56), one SVG file each, and the text
// that must not reach the page from it.
struct Payload {
  const char* name;
  const char* svg;
  const char* marker;
};
// clang-format off
constexpr Payload kPayloads[] = {
    {"viewBox smuggling a value",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 javascript:alert(1)"></svg>)svg",
     "javascript"},
    {"viewBox of three numbers",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10"></svg>)svg",
     "viewBox=\"0 0 10\""},
    {"slash before an event handler",
     R"svg(<svg/onload="alert(1)" xmlns="http://www.w3.org/2000/svg"></svg>)svg", "onload"},
    {"entity-encoded colon in href",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg"><a href="javascript&#58;alert(1)"><text>x</text></a></svg>)svg",
     "javascript"},
    {"entity-encoded letter in xlink:href",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"><a xlink:href="&#x6a;avascript:alert(1)"><rect width="9" height="9"/></a></svg>)svg",
     "avascript"},
    {"animate values",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg"><a><animate attributeName="href" values="javascript&#x3a;alert(1)"/><text>x</text></a></svg>)svg",
     "animate"},
    {"img with slashes",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg"><img/src="x"/onerror="alert(1)"></svg>)svg", "onerror"},
    {"embed of a data URL",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg"><embed src="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg=="/></svg>)svg",
     "data:"},
    {"iframe srcdoc",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg"><iframe srcdoc="&lt;script&gt;alert(1)&lt;/script&gt;"></iframe></svg>)svg",
     "srcdoc"},
    {"image fetched from the network",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg"><image href="http://127.0.0.1:9/track.png" width="1" height="1"/></svg>)svg",
     "127.0.0.1"},
    {"style importing a URL",
     R"svg(<svg xmlns="http://www.w3.org/2000/svg"><style>@import url(http://127.0.0.1:9/x.css);</style></svg>)svg",
     "@import"},
};
// clang-format on

// A timeline as `baton schedule --format svg` and timeline_simulated.svg draw it, and with the
// measured picture's notes under it (launcher/outputs.cc MeasuredTimelineSvg).
std::string BatonTimeline() {
  const Schedule schedule = OneFOneB(4, 8);
  std::string svg = RenderSvg(schedule, Simulate(schedule));
  svg.insert(svg.rfind("</svg>"),
             "<text font-family=\"monospace\" font-size=\"12\" y=\"224\"><tspan x=\"10\">measured "
             "step (ms) vs simulator (FLOP costs)</tspan><tspan x=\"10\" dy=\"16\">stage 0: "
             "measured bubble 0.310, predicted 0.273</tspan></text>\n");
  return svg;
}

TEST(InlineSvgTest, BatonsOwnTimelinePassesUnchanged) {
  const std::string svg = BatonTimeline();
  const InlineSvgResult result = InlineSvg(svg);
  ASSERT_TRUE(result.svg.has_value()) << result.why;
  EXPECT_EQ(*result.svg + "\n", svg);
  EXPECT_EQ(*InlineSvg("\n  " + svg + "\n\n").svg + "\n", svg);  // whitespace around it
}

TEST(InlineSvgTest, EveryPayloadIsRejected) {
  for (const Payload& payload : kPayloads) {
    const InlineSvgResult result = InlineSvg(payload.svg);
    EXPECT_FALSE(result.svg.has_value()) << payload.name << ": " << *result.svg;
    EXPECT_FALSE(result.why.empty()) << payload.name;
  }
}

TEST(InlineSvgTest, AnythingOutsideTheAllowlistIsRejected) {
  const std::string open = "<svg xmlns=\"http://www.w3.org/2000/svg\">";
  for (const std::string& svg : std::vector<std::string>{
           open + "<!-- a comment --></svg>", "<?xml version=\"1.0\"?>" + open + "</svg>",
           "<!DOCTYPE svg>" + open + "</svg>",
           open + "<text>&#106;</text></svg>",                   // a numeric reference
           open + "<text>&nbsp;</text></svg>",                   // a named one
           open + "<rect fill=\"url(#g)\"/></svg>",              // a paint server
           open + "<rect fill='white'/></svg>",                  // single quotes
           open + "<rect x=\"1\" x=\"2\"/></svg>",               // an attribute twice
           open + "<rect width=\"calc(1px)\"/></svg>",           // not a number
           open + "<text font-family=\"Arial\">a</text></svg>",  // not a keyword
           open + "<rect id=\"a\"/></svg>",                      // an attribute not used
           open + "<g><g></g></g></svg>",                        // out of place
           open + "<svg></svg></svg>",                           // a second root
           open + "<rect/></svg><script>alert(1)</script>",      // more after the root
           open + "<rect/>",                                     // never closed
           open + "</g></svg>",                                  // closes nothing
           "<SVG></SVG>", "not svg at all", ""}) {
    EXPECT_FALSE(InlineSvg(svg).svg.has_value()) << svg;
  }
}

TEST(InlineSvgTest, TextIsEscapedAgainAndTheFiveReferencesKept) {
  const std::string svg =
      "<svg xmlns=\"http://www.w3.org/2000/svg\"><text>a &lt;b&gt; &amp; &quot;c&quot; "
      "&#39;d&apos; e > f</text></svg>";
  const InlineSvgResult result = InlineSvg(svg);
  ASSERT_TRUE(result.svg.has_value()) << result.why;
  EXPECT_EQ(*result.svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\"><text>a &lt;b&gt; &amp; &quot;c&quot; "
            "&#39;d&#39; e &gt; f</text></svg>");
}

// The page: Baton's timeline placed as it is; a payload not placed, the file named, and nothing
// of it on the page.
TEST(InlineSvgTest, TheRunPagePlacesBatonsTimelineAndNoPayload) {
  RunPageInputs inputs;
  inputs.dir = "out/timelines";
  inputs.timeline_simulated = BatonTimeline();
  for (const Payload& payload : kPayloads) {
    inputs.timeline = payload.svg;
    const std::string page = RenderRunPage(inputs);
    EXPECT_EQ(page.find(payload.marker), std::string::npos) << payload.name;
    EXPECT_EQ(page.find("<script"), std::string::npos) << payload.name;
    EXPECT_NE(page.find("timeline.svg: not shown"), std::string::npos) << payload.name;
    const std::string own = BatonTimeline();
    EXPECT_NE(page.find(own.substr(0, own.rfind("</svg>") + 6)), std::string::npos) << payload.name;
  }
}

}  // namespace
}  // namespace baton
