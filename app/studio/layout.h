// Where the panels of each view go, and a record of where they were drawn. Plain C++
// (no ImGui): the app fills the record each frame; --layout-json writes it next to a
// screenshot, so a test can look inside each panel's rectangle of the PNG, and every
// screenshot carries its description() (png_text.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "app_options.h"

namespace fafo::studio {

// Fractions of the area under the menu bar.
struct PanelRect {
  float x, y, w, h;
};

// The panels of a view, in drawing order.
const std::vector<std::string>& view_panels(View view);
// Where `panel` goes in `view`; nullopt when the view does not show it.
std::optional<PanelRect> panel_rect(View view, std::string_view panel);

// One panel as drawn (pixels): its window, and its contents area (title bar left out).
struct PanelRecord {
  std::string name;
  float x = 0, y = 0, w = 0, h = 0;
  float content_x = 0, content_y = 0, content_w = 0, content_h = 0;
  int64_t items = -1;   // what the panel drew: rows, cells, tokens, messages (-1: not said)
  bool empty = false;   // drawn without contents (--debug-empty-panel)
};

class LayoutRecord {
 public:
  void clear() {
    panels_.clear();
    menus_.clear();
  }
  void add(PanelRecord p) { panels_.push_back(std::move(p)); }
  // A menu of the menu bar, left to right.
  void add_menu(std::string name) { menus_.push_back(std::move(name)); }
  // Sets the item count of the panel added last.
  void set_items(int64_t n) {
    if (!panels_.empty()) panels_.back().items = n;
  }
  const std::vector<PanelRecord>& panels() const { return panels_; }
  const std::vector<std::string>& menus() const { return menus_; }
  // Everything recorded, with the view, the window's size, the step shown and the open
  // model's path ("": none): what --layout-json writes.
  nlohmann::json to_json(View view, int width, int height, size_t steps_shown, const std::string& model = "") const;
  // What a screenshot shows, in the terms that stay the same from run to run of the same
  // command: the view, the size, the menus, each panel's name and rectangle (whole
  // pixels), the step shown, the model's path and the command line (`args`). Timings
  // and what the panels drew are left out.
  nlohmann::json description(View view, int width, int height, size_t steps_shown, const std::string& model,
                             const std::vector<std::string>& args) const;

 private:
  std::vector<PanelRecord> panels_;
  std::vector<std::string> menus_;
};

// Writes `j` to `path`; false when it cannot.
bool write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace fafo::studio
