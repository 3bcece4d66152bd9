// The report of a benchmark run over one or more devices: one comparison table (a
// column per device) as Markdown, the same figures as CSV (one row per figure), the
// whole run as JSON, and the chart (bench_chart.h), written side by side.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_result.h"

namespace fafo::bench {

// The devices (label, backend, device, threads, what failed) and one table with a row
// per test (pp, tg, GB/s, t(T), t(T)/t(1), each strategy's tokens/s, speedup and tau)
// and a column per device.
std::string report_markdown(const BenchReport& report);
// Header: device,backend,device_name,threads,test,T,value,sd,unit; one line per figure.
std::string report_csv(const BenchReport& report);
// {"model", "devices": [{label, backend, device, description, threads, pp, tg,
// step_cost, strategies, profile, error}]}: every field of bench_result.h.
nlohmann::json report_json(const BenchReport& report);
// The report back from report_json's output (what the studio loads); throws
// std::runtime_error naming what is missing or of the wrong type.
BenchReport report_from_json(const nlohmann::json& j);

// Writes PREFIX.md, PREFIX.csv, PREFIX.json and PREFIX.png; returns their paths.
// Throws std::runtime_error naming a file that cannot be written.
std::vector<std::string> write_bench_report(const BenchReport& report, const std::string& prefix);

}  // namespace fafo::bench
