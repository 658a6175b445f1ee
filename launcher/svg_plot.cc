// SVG line plots and stacked bars for the run page.
#include "launcher/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "scheduler/timeline.h"  // XmlEscape

namespace baton {
namespace {

// The drawing area inside the axes, in pixels.
struct Frame {
  double left = 76;
  double top = 40;
  double width = 460;
  double height = 230;
  double right() const { return left + width; }
  double bottom() const { return top + height; }
};

// Maps [low, high] onto [pixel_low, pixel_high] (pixel_high < pixel_low for a y axis).
struct Scale {
  double low = 0;
  double high = 1;
  double pixel_low = 0;
  double pixel_high = 1;
  double operator()(double value) const {
    return pixel_low + (value - low) / (high - low) * (pixel_high - pixel_low);
  }
};

std::string Px(double value) { return fmt::format("{:.1f}", value); }

// The chart's opening: size, a white background and the title.
std::string OpenSvg(const std::string& id, double width, double height, const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{}\" class=\"chart\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
      XmlEscape(id), Px(width), Px(height), Px(width), Px(height), XmlEscape(title));
}

// The y axis: a grid line and a label per tick, the axis name turned on the left.
std::string YAxis(const Frame& frame, const Scale& y, const std::vector<double>& ticks,
                  const std::string& label) {
  std::string svg;
  for (double tick : ticks) {
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
        Px(frame.left), Px(y(tick)), Px(frame.right()), Px(y(tick)), Px(frame.left - 6),
        Px(y(tick) + 4), XmlEscape(TickLabel(tick)));
  }
  const double middle = frame.top + frame.height / 2;
  svg += fmt::format(
      "<text x=\"14\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>\n",
      Px(middle), Px(middle), XmlEscape(label));
  return svg + fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
                           Px(frame.left), Px(frame.top), Px(frame.left), Px(frame.bottom()));
}

// The x axis: a tick mark and a label per tick, the axis name under them.
std::string XAxis(const Frame& frame, const Scale& x, const std::vector<double>& ticks,
                  const std::string& label) {
  std::string svg =
      fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
                  Px(frame.left), Px(frame.bottom()), Px(frame.right()), Px(frame.bottom()));
  for (double tick : ticks) {
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
        Px(x(tick)), Px(frame.bottom()), Px(x(tick)), Px(frame.bottom() + 5), Px(x(tick)),
        Px(frame.bottom() + 18), XmlEscape(TickLabel(tick)));
  }
  return svg + fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                           Px(frame.left + frame.width / 2), Px(frame.bottom() + 36),
                           XmlEscape(label));
}

// A legend box in the plot's top right corner: a colour swatch and a label per entry.
std::string Legend(const Frame& frame,
                   const std::vector<std::pair<std::string, std::string>>& entries) {
  if (entries.empty()) return "";
  size_t longest = 0;
  for (const auto& [label, color] : entries) longest = std::max(longest, label.size());
  const double width = 34 + 6.5 * static_cast<double>(longest);
  const double x = frame.right() - width - 6;
  const double y = frame.top + 6;
  std::string svg = fmt::format(
      "<g class=\"legend\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"white\" "
      "fill-opacity=\"0.85\" stroke=\"#bbb\"/>\n",
      Px(x), Px(y), Px(width), Px(6 + 16 * static_cast<double>(entries.size())));
  for (size_t i = 0; i < entries.size(); ++i) {
    const double row = y + 14 + 16 * static_cast<double>(i);
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"16\" height=\"8\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{}\">{}</text>\n",
        Px(x + 6), Px(row - 8), XmlEscape(entries[i].second), Px(x + 28), Px(row),
        XmlEscape(entries[i].first));
  }
  return svg + "</g>\n";
}

// The smallest and largest of `values` (+-inf when empty).
struct Range {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  void Add(double value) {
    low = std::min(low, value);
    high = std::max(high, value);
  }
  bool empty() const { return low > high; }
};

// One series: its polyline, and its markers.
std::string SeriesSvg(const PlotSeries& series, const Scale& x, const Scale& y) {
  std::string points;
  for (const PlotPoint& p : series.points) {
    if (!points.empty()) points += ' ';
    points += Px(x(p.x)) + "," + Px(y(p.y));
  }
  std::string svg = fmt::format(
      "<polyline class=\"series\" data-label=\"{}\" fill=\"none\" stroke=\"{}\" "
      "stroke-width=\"1.5\" points=\"{}\"/>\n",
      XmlEscape(series.label), XmlEscape(series.color), points);
  if (!series.markers && series.points.size() > 1) return svg;
  for (const PlotPoint& p : series.points) {
    svg += fmt::format("<circle class=\"marker\" cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"/>\n",
                       Px(x(p.x)), Px(y(p.y)), XmlEscape(series.color));
  }
  return svg;
}

}  // namespace

std::vector<double> NiceTicks(double low, double high, int target) {
  // Beyond these the span or a padded end overflows, or a tenth of the span underflows; nothing a
  // run logs comes near them.
  constexpr double kLargest = 1e300, kSmallest = 1e-290;
  // A span below this fraction of the values is rounding (1 and 1.0000000000000002): ticks that
  // fine would be as many as the values' magnitude over their last bit.
  constexpr double kFinestRelativeSpan = 1e-9;
  if (!std::isfinite(low)) low = std::isfinite(high) ? high : 0;
  if (!std::isfinite(high)) high = low;
  low = std::clamp(std::min(low, high), -kLargest, kLargest);
  high = std::clamp(high, low, kLargest);
  const double magnitude_of_values = std::max(std::abs(low), std::abs(high));
  if (!(high - low > std::max(magnitude_of_values * kFinestRelativeSpan, kSmallest))) {
    const double middle = low / 2 + high / 2;
    const double pad = std::abs(middle) < kSmallest ? 1.0 : std::abs(middle) * 0.1;
    low = middle - pad;
    high = middle + pad;
  }
  target = std::max(target, 1);
  const double raw = high / target - low / target;  // never overflows, unlike (high - low)
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normalised = raw / magnitude;
  const double step = (normalised < 1.5 ? 1
                       : normalised < 3 ? 2
                       : normalised < 7 ? 5
                                        : 10) *
                      magnitude;
  // The span is at least 1e-9 of the values and step about span / target, so first and last are
  // integers well below 2^53 and the count is about target: every tick is distinct.
  const double first = std::floor(low / step);
  const int count = static_cast<int>(std::ceil(high / step) - first);
  std::vector<double> ticks;
  for (int i = 0; i <= count; ++i) ticks.push_back((first + i) * step);
  return ticks;
}

std::string TickLabel(double value) {
  if (std::abs(value) < 1e-12) return "0";
  return fmt::format("{:.6g}", value);
}

std::string LinePlotSvg(const LinePlot& plot) {
  const Frame frame;
  Range xs, ys;
  for (const PlotSeries& series : plot.series) {
    for (const PlotPoint& p : series.points) {
      xs.Add(p.x);
      ys.Add(p.y);
    }
  }
  for (const auto& [x, label] : plot.x_markers) xs.Add(x);
  const bool empty = ys.empty();
  if (empty) xs = ys = Range{0, 1};
  const std::vector<double> x_ticks = NiceTicks(xs.low, xs.high, 8);
  const std::vector<double> y_ticks = NiceTicks(ys.low, ys.high, 5);
  const Scale x{x_ticks.front(), x_ticks.back(), frame.left, frame.right()};
  const Scale y{y_ticks.front(), y_ticks.back(), frame.bottom(), frame.top};
  std::string svg = OpenSvg(plot.id, frame.right() + 20, frame.bottom() + 46, plot.title);
  svg += YAxis(frame, y, y_ticks, plot.y_label) + XAxis(frame, x, x_ticks, plot.x_label);
  for (const auto& [at, label] : plot.x_markers) {
    svg += fmt::format(
        "<line class=\"restart\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\" "
        "stroke-dasharray=\"4 3\"/><text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\">{}"
        "</text>\n",
        Px(x(at)), Px(frame.top), Px(x(at)), Px(frame.bottom()), Px(x(at) + 3),
        Px(frame.bottom() - 4), XmlEscape(label));
  }
  std::vector<std::pair<std::string, std::string>> legend;
  for (const PlotSeries& series : plot.series) {
    if (series.points.empty()) continue;
    svg += SeriesSvg(series, x, y);
    legend.emplace_back(series.label, series.color);
  }
  if (empty) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no values yet</text>\n",
                       Px(frame.left + frame.width / 2), Px(frame.top + frame.height / 2));
  }
  return svg + Legend(frame, legend) + "</svg>\n";
}

std::string StackedBarSvg(const StackedBarChart& chart) {
  constexpr double kBarWidth = 40, kBarGap = 6, kGroupGap = 28;
  Frame frame;
  double highest = 0;
  size_t bars = 0;
  for (const BarGroup& group : chart.groups) {
    for (const Bar& bar : group.bars) {
      double sum = 0;
      for (const BarSegment& s : bar.segments) sum += std::max(s.value, 0.0);
      highest = std::max({highest, sum, bar.total.value_or(0.0)});
      ++bars;
    }
  }
  frame.width = std::max(460.0, static_cast<double>(bars) * (kBarWidth + kBarGap) +
                                    static_cast<double>(chart.groups.size()) * kGroupGap +
                                    150);  // + the legend
  const std::vector<double> ticks = NiceTicks(0, highest > 0 ? highest : 1, 5);
  const Scale y{0, ticks.back(), frame.bottom(), frame.top};
  std::string svg = OpenSvg(chart.id, frame.right() + 20, frame.bottom() + 46, chart.title);
  svg += YAxis(frame, y, ticks, chart.y_label);
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
                     Px(frame.left), Px(frame.bottom()), Px(frame.right()), Px(frame.bottom()));
  double x = frame.left + kGroupGap / 2;
  for (const BarGroup& group : chart.groups) {
    const double group_start = x;
    for (const Bar& bar : group.bars) {
      double base = 0;
      for (const BarSegment& s : bar.segments) {
        if (s.value <= 0) continue;
        svg += fmt::format(
            "<rect class=\"bar\" data-group=\"{}\" data-bar=\"{}\" data-category=\"{}\" "
            "x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} {} {}: {}"
            "</title></rect>\n",
            XmlEscape(group.label), XmlEscape(bar.label), XmlEscape(s.category), Px(x),
            Px(y(base + s.value)), Px(kBarWidth), Px(y(base) - y(base + s.value)),
            XmlEscape(s.color), XmlEscape(group.label), XmlEscape(bar.label), XmlEscape(s.category),
            XmlEscape(TickLabel(s.value)));
        base += s.value;
      }
      if (bar.total) {
        svg += fmt::format(
            "<line class=\"total\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\" "
            "stroke-width=\"2\"><title>total {}</title></line>\n",
            Px(x - 3), Px(y(*bar.total)), Px(x + kBarWidth + 3), Px(y(*bar.total)),
            XmlEscape(TickLabel(*bar.total)));
      }
      svg +=
          fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text>\n",
                      Px(x + kBarWidth / 2), Px(frame.bottom() + 13), XmlEscape(bar.label));
      x += kBarWidth + kBarGap;
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       Px((group_start + x - kBarGap) / 2), Px(frame.bottom() + 30),
                       XmlEscape(group.label));
    x += kGroupGap;
  }
  return svg + Legend(frame, chart.legend) + "</svg>\n";
}

}  // namespace baton
