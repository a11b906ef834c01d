#include "model/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "formats/json.h"
#include "formats/svg.h"
#include "tpf/error.h"

namespace tpf {

namespace {

constexpr double kWidth = 720, kHeight = 420;
constexpr double kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// 1, 2 or 5 times a power of ten, about span / 6.
double tick_step(double span) {
  const double raw = span / 6;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string loss_svg(const std::vector<std::pair<double, double>>& points,
                     const std::string& title) {
  std::ostringstream svg;
  svg << svg::begin(kWidth, kHeight, 12) << svg::title(kWidth / 2, 22, "middle", title);
  if (points.empty()) return svg.str() + svg::kEnd;
  double x0 = points.front().first, x1 = points.back().first;
  double y0 = points.front().second, y1 = y0;
  for (const auto& [x, y] : points) {
    y0 = std::min(y0, y);
    y1 = std::max(y1, y);
  }
  if (x1 <= x0) x1 = x0 + 1;
  y0 = std::max(0.0, y0 - 0.05 * (y1 - y0));
  if (y1 <= y0) y1 = y0 + 1;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto sx = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto sy = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  svg << "<g stroke='#ccc'>\n";
  const double ys = tick_step(y1 - y0);
  for (double y = std::ceil(y0 / ys) * ys; y <= y1 + 1e-9; y += ys) {
    svg << "<line x1='" << kLeft << "' x2='" << kLeft + pw << "' y1='" << sy(y) << "' y2='" << sy(y)
        << "'/>\n";
    svg << "<text stroke='none' x='" << kLeft - 6 << "' y='" << sy(y) + 4 << "' text-anchor='end'>"
        << num(y) << "</text>\n";
  }
  const double xs = tick_step(x1 - x0);
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + 1e-9; x += xs) {
    svg << "<text stroke='none' x='" << sx(x) << "' y='" << kTop + ph + 18
        << "' text-anchor='middle'>" << num(x) << "</text>\n";
  }
  svg << "</g>\n<rect x='" << kLeft << "' y='" << kTop << "' width='" << pw << "' height='" << ph
      << "' fill='none' stroke='black'/>\n";
  svg << "<text x='" << kLeft + pw / 2 << "' y='" << kHeight - 10
      << "' text-anchor='middle'>step</text>\n";
  svg << "<text transform='translate(16," << kTop + ph / 2
      << ") rotate(-90)' text-anchor='middle'>loss (nats per byte)</text>\n";
  // Raw losses light, a moving average over ~2% of the run dark.
  auto polyline = [&](const std::vector<std::pair<double, double>>& pts, const char* style) {
    svg << "<polyline fill='none' " << style << " points='";
    for (const auto& [x, y] : pts) svg << sx(x) << "," << sy(y) << " ";
    svg << "'/>\n";
  };
  polyline(points, "stroke='#9ecae1' stroke-width='1'");
  const size_t window = std::max<size_t>(1, points.size() / 50);
  std::vector<std::pair<double, double>> smooth;
  double sum = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    sum += points[i].second;
    if (i >= window) sum -= points[i - window].second;
    const size_t n = std::min(i + 1, window);
    smooth.emplace_back(points[i].first, sum / static_cast<double>(n));
  }
  polyline(smooth, "stroke='#08519c' stroke-width='2'");
  return svg.str() + svg::kEnd;
}

void write_loss_svg(const std::string& svg_path, const std::string& log_path) {
  std::ifstream in(log_path);
  if (!in) throw Error(ErrorCode::system, "cannot read the training log " + log_path);
  std::map<double, double> by_step;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json::Value r = json::parse(line, log_path);
    const json::Value* loss = r.find("loss");
    if (loss == nullptr || !loss->is_number()) continue;  // a NaN loss is logged as null
    by_step[r.at("step").as_double()] = loss->as_double();
  }
  const std::vector<std::pair<double, double>> points(by_step.begin(), by_step.end());
  std::ofstream out(svg_path, std::ios::trunc);
  out << loss_svg(points, "training loss");
  if (!out.flush()) throw Error(ErrorCode::system, "cannot write " + svg_path);
}

}  // namespace tpf
