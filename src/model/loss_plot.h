// The loss curve of a training run as an SVG picture, drawn from its JSONL log (so a resumed run's
// picture shows the whole history).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tpf {

// Reads {"step": .., "loss": ..} records from log_path and writes the picture to svg_path.
// Later records for a step replace earlier ones (a resume that repeats steps).
void write_loss_svg(const std::string& svg_path, const std::string& log_path);

// The picture for given (step, loss) points.
std::string loss_svg(const std::vector<std::pair<double, double>>& points,
                     const std::string& title);

}  // namespace tpf
