// Small SVG charts for the run page (launcher/run_page.h): line plots and stacked bars, each with
// axes, ticks and labels. Pure functions that return one <svg> element to embed in HTML; every
// text that goes in (titles, labels, legends) is escaped here, so callers pass plain text.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace baton {

struct PlotPoint {
  double x = 0;
  double y = 0;
};

// One line: its points in x order, drawn as one <polyline> (and a <circle> per point with
// `markers`, for sparse series such as the eval loss; a one-point series always gets one).
struct PlotSeries {
  std::string label;
  std::string color;  // a CSS color
  std::vector<PlotPoint> points;
  bool markers = false;
};

struct LinePlot {
  std::string id;  // the <svg>'s id
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
  // Vertical dashed lines at these x, labelled (where a restart or a resumed run began).
  std::vector<std::pair<double, std::string>> x_markers;
};

// The plot, its axes fitted to every series' points (and markers). A plot with no point at all
// draws its axes and says so.
std::string LinePlotSvg(const LinePlot& plot);

// A bar is a stack of segments from zero, one per category with a positive value; `total`, when
// set, is drawn as a black line across the bar (a peak total below the sum of category peaks).
struct BarSegment {
  std::string category;
  std::string color;
  double value = 0;
};
struct Bar {
  std::string label;  // under the bar ("measured")
  std::vector<BarSegment> segments;
  std::optional<double> total;
};
// Bars side by side under one label (a stage).
struct BarGroup {
  std::string label;
  std::vector<Bar> bars;
};
struct StackedBarChart {
  std::string id;
  std::string title;
  std::string y_label;
  std::vector<BarGroup> groups;
  std::vector<std::pair<std::string, std::string>> legend;  // (category, color)
};

// Each segment is a <rect class="bar"> with data-group, data-bar and data-category attributes
// and a <title> giving its value.
std::string StackedBarSvg(const StackedBarChart& chart);

// Round tick positions (steps of 1, 2 or 5 times a power of ten) covering [low, high], about
// `target` of them; the first is <= low and the last >= high. low == high gets a span around it,
// and so does a span too small to tell from rounding (under 1e-9 of the values: 1 and
// 1.0000000000000002). Bounded for any input: at most 1.5 x target + 2 distinct ticks, a
// non-finite end taken as the other (0 when both are), ends beyond +-1e300 clamped there.
std::vector<double> NiceTicks(double low, double high, int target);
// A tick's text: up to 6 significant digits, no trailing zeros ("0.001", "250", "1.5e+06").
std::string TickLabel(double value);

}  // namespace baton
