#include "bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <utility>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "bench_chart.h"

namespace fafo::bench {

namespace {

std::string format(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}
std::string format(const char* f, double a, double c) {
  char b[96];
  std::snprintf(b, sizeof b, f, a, c);
  return b;
}

// A cell of the comparison table: rows are tests, columns devices.
struct Row {
  std::string test, unit;
  std::vector<std::string> cells;
};

// Strategy names in first-seen order over the devices.
std::vector<std::string> strategy_names(const BenchReport& r) {
  std::vector<std::string> names;
  for (const DeviceResult& d : r.devices)
    for (const StrategyRow& s : d.strategies)
      if (std::find(names.begin(), names.end(), s.strategy) == names.end()) names.push_back(s.strategy);
  return names;
}

// Step sizes in increasing order over the devices.
std::vector<int32_t> step_sizes(const BenchReport& r) {
  std::vector<int32_t> ts;
  for (const DeviceResult& d : r.devices)
    for (const StepCost& s : d.step_cost)
      if (std::find(ts.begin(), ts.end(), s.T) == ts.end()) ts.push_back(s.T);
  std::sort(ts.begin(), ts.end());
  return ts;
}

const StepCost* find_step(const DeviceResult& d, int32_t T) {
  for (const StepCost& s : d.step_cost)
    if (s.T == T) return &s;
  return nullptr;
}

const StrategyRow* find_strategy(const DeviceResult& d, const std::string& name) {
  for (const StrategyRow& s : d.strategies)
    if (s.strategy == name) return &s;
  return nullptr;
}

std::vector<Row> comparison_rows(const BenchReport& r) {
  std::vector<Row> rows;
  auto row = [&](std::string test, std::string unit, auto cell) {
    Row out{std::move(test), std::move(unit), {}};
    bool any = false;
    for (const DeviceResult& d : r.devices) {
      std::string c = cell(d);
      any = any || !c.empty();
      out.cells.push_back(c.empty() ? "-" : c);
    }
    if (any) rows.push_back(std::move(out));
  };
  row("KV cache", "bytes / token", [&](const DeviceResult& d) {
    if (d.kv_type.empty()) return std::string();
    return d.kv_type + ", " + format("%.0f", d.kv_bytes_per_token) +
           (d.kv_ring_bytes > 0 ? format(" + window rings %.1f MiB", d.kv_ring_bytes / (1 << 20)) : std::string());
  });
  // pp and tg rows by length and depth ("tg128 @ d4096": after 4096 tokens, as llama-bench names it).
  std::map<std::pair<int32_t, int32_t>, bool> pps, tgs;
  for (const DeviceResult& d : r.devices) {
    if (d.pp_tokens > 0) pps[{d.pp_tokens, d.depth}] = true;
    if (d.tg_tokens > 0) tgs[{d.tg_tokens, d.depth}] = true;
  }
  const auto at = [](int32_t depth) { return depth > 0 ? " @ d" + std::to_string(depth) : std::string(); };
  for (const auto& pp : pps) {
    const int32_t n = pp.first.first, depth = pp.first.second;  // plain variables: clang 14 cannot capture a structured binding
    row("pp" + std::to_string(n) + at(depth), "tokens/s", [&](const DeviceResult& d) {
      return d.pp_tokens == n && d.depth == depth ? format("%.2f ± %.2f", d.pp.mean, d.pp.sd) : std::string();
    });
  }
  for (const auto& tg : tgs) {
    const int32_t n = tg.first.first, depth = tg.first.second;
    row("tg" + std::to_string(n) + at(depth), "tokens/s", [&](const DeviceResult& d) {
      return d.tg_tokens == n && d.depth == depth ? format("%.2f ± %.2f", d.tg.mean, d.tg.sd) : std::string();
    });
    row("tg" + std::to_string(n) + at(depth) + " weights read", "GB/s", [&](const DeviceResult& d) {
      return d.tg_tokens == n && d.depth == depth ? format("%.1f", d.effective_gb_per_s) : std::string();
    });
  }
  const std::vector<int32_t> ts = step_sizes(r);
  for (int32_t T : ts)
    row("t(" + std::to_string(T) + ")", "ms / step", [&](const DeviceResult& d) {
      const StepCost* s = find_step(d, T);
      return s ? format("%.3f ± %.3f", s->ms.mean, s->ms.sd) : std::string();
    });
  for (int32_t T : ts) {
    if (T == ts.front()) continue;
    row("t(" + std::to_string(T) + ") / t(" + std::to_string(ts.front()) + ")", "ratio", [&](const DeviceResult& d) {
      const StepCost* s = find_step(d, T);
      const StepCost* s1 = find_step(d, ts.front());
      return s && s1 && s1->ms.mean > 0 ? format("%.2f", s->ms.mean / s1->ms.mean) : std::string();
    });
  }
  for (const std::string& name : strategy_names(r))
    row(name, "tokens/s (speedup, tau)", [&](const DeviceResult& d) {
      const StrategyRow* s = find_strategy(d, name);
      if (s == nullptr) return std::string();
      std::string c = format("%.1f", s->tokens_per_s) + " (" + format("%.2fx", s->speedup) + ", " + format("%.2f", s->tau) + ")";
      if (s->ids_equal_ar != s->prompts) c += " ids differ from ar in " + std::to_string(s->prompts - s->ids_equal_ar);
      return c;
    });
  return rows;
}

// CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

std::string cell_text(const std::string& s) {  // a Markdown cell: no pipes or line breaks
  std::string o;
  for (char c : s) o += c == '|' ? '/' : (c == '\n' || c == '\r') ? ' ' : c;
  return o;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot write the report file");
  f << text;
  f.close();
  if (!f) throw std::runtime_error(path + ": cannot write the report file");
}

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw std::runtime_error(where + ": no field '" + key + "'");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(where + ": field '" + key + "' has the wrong type");
  }
}

}  // namespace

std::string report_markdown(const BenchReport& r) {
  std::string md = "# fafo bench: " + cell_text(r.model) + "\n\n| device | backend | name | threads | status |\n|---|---|---|---:|---|\n";
  for (const DeviceResult& d : r.devices)
    md += "| " + cell_text(d.label) + " | " + cell_text(d.backend) + " | " + cell_text(d.device.empty() ? d.description : d.device) +
          " | " + (d.threads > 0 ? std::to_string(d.threads) : std::string("-")) + " | " +
          (d.error.empty() ? std::string("measured") : "failed: " + cell_text(d.error)) + " |\n";
  const std::vector<Row> rows = comparison_rows(r);
  if (rows.empty()) return md + "\nNo measurements.\n";
  md += "\n| test | unit |";
  std::string rule = "|---|---|";
  for (const DeviceResult& d : r.devices) {
    md += ' ';
    md += cell_text(d.label);
    md += " |";
    rule += "---:|";
  }
  md += "\n" + rule + "\n";
  for (const Row& row : rows) {
    md += "| " + row.test + " | " + row.unit + " |";
    for (const std::string& c : row.cells) {
      md += ' ';
      md += cell_text(c);
      md += " |";
    }
    md += "\n";
  }
  return md;
}

std::string report_csv(const BenchReport& r) {
  std::string csv = "device,backend,device_name,threads,test,T,value,sd,unit\n";
  for (const DeviceResult& d : r.devices) {
    const std::string head = csv_field(d.label) + "," + csv_field(d.backend) + "," + csv_field(d.device) + "," +
                             std::to_string(d.threads) + ",";
    auto line = [&](const std::string& test, int64_t T, double value, double sd, const std::string& unit) {
      csv += head + csv_field(test) + "," + std::to_string(T) + "," + format("%.6g", value) + "," + format("%.6g", sd) + "," +
             csv_field(unit) + "\n";
    };
    if (!d.kv_type.empty()) line("kv_cache_" + d.kv_type, 0, d.kv_bytes_per_token, 0, "bytes/token");
    if (d.kv_ring_bytes > 0) line("kv_window_rings", 0, d.kv_ring_bytes, 0, "bytes");
    if (d.depth > 0) line("depth", d.depth, d.depth, 0, "tokens");
    if (d.pp_tokens > 0) line("pp", d.pp_tokens, d.pp.mean, d.pp.sd, "tokens/s");
    if (d.tg_tokens > 0) {
      line("tg", d.tg_tokens, d.tg.mean, d.tg.sd, "tokens/s");
      line("tg_weights_read", d.tg_tokens, d.effective_gb_per_s, 0, "GB/s");
    }
    for (const StepCost& s : d.step_cost) {
      line("step_cost", s.T, s.ms.mean, s.ms.sd, "ms");
      if (s.experts_per_layer > 0) line("step_experts_per_layer", s.T, s.experts_per_layer, 0, "experts");
      for (size_t k = 0; k < s.device_ms.size() && k < d.split_devices.size(); ++k)
        line("step_cost_on_" + d.split_devices[k], s.T, s.device_ms[k], 0, "ms");
    }
    for (const StrategyRow& s : d.strategies) {
      line("strategy_" + s.strategy, 0, s.tokens_per_s, 0, "tokens/s");
      line("strategy_" + s.strategy + "_speedup", 0, s.speedup, 0, "x");
      line("strategy_" + s.strategy + "_tau", 0, s.tau, 0, "tokens/step");
    }
  }
  return csv;
}

nlohmann::json report_json(const BenchReport& r) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceResult& d : r.devices) {
    nlohmann::json j = {{"label", d.label},   {"backend", d.backend}, {"device", d.device},
                        {"description", d.description}, {"threads", d.threads}, {"error", d.error},
                        {"warmup", d.warmup}, {"depth", d.depth}};
    if (!d.kv_type.empty())
      j["kv_cache"] = {{"type", d.kv_type}, {"bytes_per_token", d.kv_bytes_per_token}, {"window_ring_bytes", d.kv_ring_bytes}};
    if (d.pp_tokens > 0) j["pp"] = {{"tokens", d.pp_tokens}, {"tokens_per_s", d.pp.mean}, {"sd", d.pp.sd}};
    if (d.tg_tokens > 0)
      j["tg"] = {{"tokens", d.tg_tokens},
                 {"tokens_per_s", d.tg.mean},
                 {"sd", d.tg.sd},
                 {"weight_bytes_per_token", d.weight_bytes_per_token},
                 {"effective_gb_per_s", d.effective_gb_per_s}};
    nlohmann::json curve = nlohmann::json::array();
    for (const StepCost& s : d.step_cost) {
      nlohmann::json point = {{"T", s.T}, {"ms", s.ms.mean}, {"sd", s.ms.sd}};
      if (!s.device_ms.empty()) point["device_ms"] = s.device_ms;
      if (s.experts_per_layer > 0) point["experts_per_layer"] = s.experts_per_layer;
      curve.push_back(point);
    }
    j["step_cost"] = curve;
    if (!d.split_devices.empty()) j["split_devices"] = d.split_devices;
    nlohmann::json rows = nlohmann::json::array();
    for (const StrategyRow& s : d.strategies)
      rows.push_back({{"strategy", s.strategy}, {"window", s.window}, {"ngram", s.ngram}, {"guesses", s.guesses},
                      {"lookback", s.lookback}, {"tokens", s.tokens}, {"steps", s.steps},
                      {"step_tokens", s.step_tokens}, {"tau", s.tau}, {"tokens_per_s", s.tokens_per_s},
                      {"speedup", s.speedup}, {"ids_equal_ar", s.ids_equal_ar}, {"prompts", s.prompts}});
    j["strategies"] = rows;
    if (!d.profile.is_null()) j["profile"] = d.profile;
    devices.push_back(std::move(j));
  }
  return {{"model", r.model}, {"devices", devices}};
}

BenchReport report_from_json(const nlohmann::json& j) {
  BenchReport r;
  r.model = field<std::string>(j, "model", "report");
  const auto devices = field<nlohmann::json>(j, "devices", "report");
  if (!devices.is_array()) throw std::runtime_error("report: devices is not an array");
  for (size_t i = 0; i < devices.size(); ++i) {
    const nlohmann::json& dj = devices[i];
    const std::string where = "report: device " + std::to_string(i);
    DeviceResult d;
    d.label = field<std::string>(dj, "label", where);
    d.backend = field<std::string>(dj, "backend", where);
    d.device = field<std::string>(dj, "device", where);
    d.description = field<std::string>(dj, "description", where);
    d.threads = field<int32_t>(dj, "threads", where);
    d.error = field<std::string>(dj, "error", where);
    d.warmup = dj.contains("warmup") && dj["warmup"].is_boolean() && dj["warmup"].get<bool>();  // absent before it was recorded
    if (dj.contains("depth")) d.depth = field<int32_t>(dj, "depth", where);  // (not in files of earlier versions)
    if (dj.contains("kv_cache")) {
      d.kv_type = field<std::string>(dj["kv_cache"], "type", where + " kv_cache");
      d.kv_bytes_per_token = field<double>(dj["kv_cache"], "bytes_per_token", where + " kv_cache");
      if (dj["kv_cache"].contains("window_ring_bytes"))  // (not in files of earlier versions)
        d.kv_ring_bytes = field<double>(dj["kv_cache"], "window_ring_bytes", where + " kv_cache");
    }
    if (dj.contains("pp")) {
      d.pp_tokens = field<int32_t>(dj["pp"], "tokens", where + " pp");
      d.pp = {field<double>(dj["pp"], "tokens_per_s", where + " pp"), field<double>(dj["pp"], "sd", where + " pp")};
    }
    if (dj.contains("tg")) {
      const nlohmann::json& t = dj["tg"];
      d.tg_tokens = field<int32_t>(t, "tokens", where + " tg");
      d.tg = {field<double>(t, "tokens_per_s", where + " tg"), field<double>(t, "sd", where + " tg")};
      d.weight_bytes_per_token = field<double>(t, "weight_bytes_per_token", where + " tg");
      d.effective_gb_per_s = field<double>(t, "effective_gb_per_s", where + " tg");
    }
    for (const nlohmann::json& s : field<nlohmann::json>(dj, "step_cost", where)) {
      d.step_cost.push_back({field<int32_t>(s, "T", where + " step_cost"),
                             {field<double>(s, "ms", where + " step_cost"), field<double>(s, "sd", where + " step_cost")},
                             {}});
      if (s.contains("device_ms")) d.step_cost.back().device_ms = field<std::vector<double>>(s, "device_ms", where + " step_cost");
      if (s.contains("experts_per_layer"))
        d.step_cost.back().experts_per_layer = field<double>(s, "experts_per_layer", where + " step_cost");
    }
    if (dj.contains("split_devices")) d.split_devices = field<std::vector<std::string>>(dj, "split_devices", where);
    for (const nlohmann::json& s : field<nlohmann::json>(dj, "strategies", where)) {
      const std::string w = where + " strategies";
      StrategyRow row;
      row.strategy = field<std::string>(s, "strategy", w);
      row.window = field<int32_t>(s, "window", w);
      row.ngram = field<int32_t>(s, "ngram", w);
      row.guesses = field<int32_t>(s, "guesses", w);
      row.lookback = field<int32_t>(s, "lookback", w);
      row.tokens = field<int64_t>(s, "tokens", w);
      row.steps = field<int64_t>(s, "steps", w);
      row.step_tokens = s.value("step_tokens", 0);  // (not in files of earlier versions)
      row.tau = field<double>(s, "tau", w);
      row.tokens_per_s = field<double>(s, "tokens_per_s", w);
      row.speedup = field<double>(s, "speedup", w);
      row.ids_equal_ar = field<int32_t>(s, "ids_equal_ar", w);
      row.prompts = field<int32_t>(s, "prompts", w);
      d.strategies.push_back(row);
    }
    if (dj.contains("profile")) d.profile = dj["profile"];
    r.devices.push_back(std::move(d));
  }
  return r;
}

std::vector<std::string> write_bench_report(const BenchReport& report, const std::string& prefix) {
  const std::vector<std::string> paths = {prefix + ".md", prefix + ".csv", prefix + ".json", prefix + ".png"};
  write_file(paths[0], report_markdown(report));
  write_file(paths[1], report_csv(report));
  write_file(paths[2], report_json(report).dump(2) + "\n");
  write_bench_chart(report, paths[3]);
  return paths;
}

}  // namespace fafo::bench
