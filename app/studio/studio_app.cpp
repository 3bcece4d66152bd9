#include "studio_app.h"

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "panels.h"
#include "png_text.h"
#include "screenshot.h"
#include "trace_io.h"

namespace fafo::studio {

namespace {

void glfw_error(int code, const char* message) { std::fprintf(stderr, "fafo-studio: GLFW error %d: %s\n", code, message); }

// Screenshot mode: whether what the picture should show is there, and which step to show.
struct ScreenshotTarget {
  size_t steps = 0;
  bool ready = false;
};

ScreenshotTarget screenshot_target(const StudioState& s, const AppOptions& o) {
  if (s.view == View::Bench) {  // the run's end, with every device listed in the setup
    const BenchSetup& b = s.bench_setup;
    const bool listed = !b.targets.empty() || !b.targets_error.empty();
    return {0, !s.ev.busy && s.bench_now.status != BenchStatus::Running && listed};
  }
  const size_t have = s.traces.size();
  // A start paused after its first step: that step, once the generator waits after it;
  // or whatever there is once the engine has nothing left to do (the model could not be
  // opened, the run failed or ended before a step): the picture then shows the error.
  if (o.start_paused) return {have, (have > 0 && s.engine->gate().waiting()) || !s.ev.busy};
  const size_t want = o.steps > 0 ? static_cast<size_t>(o.steps) : have;
  // A generation stopped at --steps may still be finishing its last step: do not wait for it.
  const bool enough = o.steps > 0 && have >= want && (s.ev.has_model || o.open.path.empty());
  return {std::min(want, have), !s.ev.busy || enough};
}

// Takes the engine's news (this frame's state, new steps, a newly opened model) and the
// Bench view's run.
void sync(StudioState& s) {
  s.ev = s.engine->view();
  if (s.view == View::Bench) s.bench_now = s.bench.snapshot();
  if (s.engine->gate().drain(s.traces)) {
    s.playback.restart();
    s.selected_token = -1;
    if (s.source.empty() || s.source.rfind("replay: ", 0) == 0) {
      s.source = "live: " + s.ev.model_path;
      s.model_note.clear();
      s.trace_problem.clear();
    }
  }
  if (s.ev.model_serial != s.seen_model_serial) {
    s.seen_model_serial = s.ev.model_serial;
    if (s.ev.has_model) {
      s.text = s.ev.text;
      if (s.recent) s.recent->add(s.ev.model_path);
      if (s.source.rfind("replay: ", 0) == 0) s.trace_problem = trace_fit_problem(s.traces, s.ev.n_vocab, s.ev.n_layer);
    }
  }
}

void draw_frame(StudioState& s) {
  s.layout.clear();
  const float top = draw_menu_bar(s);
  begin_panels(s, top);
  if (s.view == View::Chat) {
    draw_model_panel(s);
    draw_decoding_panel(s);
    draw_chat_panel(s);
    draw_transcript_panel(s);
  } else if (s.view == View::Bench) {
    draw_bench_setup_panel(s);
    draw_bench_results_panel(s);
    draw_bench_log_panel(s);
  } else {
    draw_controls_panel(s);
    draw_charts_panel(s);
    draw_window_panel(s);
    draw_candidates_panel(s);
    draw_kv_panel(s);
    draw_pool_panel(s);
    draw_transcript_panel(s);
  }
  draw_file_dialog(s);
  s.relayout = false;
}

}  // namespace

const char* const kNoDisplayMessage = "fafo-studio: no display: run under xvfb-run or set DISPLAY\n";

bool have_display() {
  const char* x = std::getenv("DISPLAY");
  const char* wayland = std::getenv("WAYLAND_DISPLAY");
  return (x && *x) || (wayland && *wayland);
}

int run_studio(StudioState& s, const AppOptions& o) {
  if (!have_display()) {
    std::fputs(kNoDisplayMessage, stderr);
    return 3;
  }
  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    std::fputs(kNoDisplayMessage, stderr);
    return 3;
  }
  GLFWwindow* window = glfwCreateWindow(o.width, o.height, "fafo-studio", nullptr, nullptr);
  if (!window) {
    std::fputs("fafo-studio: cannot create an OpenGL window (no display or no OpenGL 3)\n", stderr);
    glfwTerminate();
    return 3;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(o.screenshot.empty() ? 1 : 0);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // the same layout on every start
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 130");

  const bool screenshot = !o.screenshot.empty();
  s.fixed_layout = screenshot;
  init_bench_view(s, o);
  if (screenshot) s.playback.set_speed(0.0);  // show every step as soon as it is known
  int exit_code = 0;
  int settle_frames = 0;  // frames rendered after the target was reached (ImGui lays out over two)
  auto last = std::chrono::steady_clock::now();
  while (!glfwWindowShouldClose(window) && !s.quit) {
    if (screenshot) {
      glfwPollEvents();
      if (settle_frames == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // leave the CPU to the engine
    }
    else glfwWaitEventsTimeout(1.0 / 60.0);  // redraw at least 60 times a second for live steps
    sync(s);
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - last).count();
    last = now;
    bool capture = false;
    if (screenshot) {  // no time limit: it waits for what the picture should show
      const ScreenshotTarget target = screenshot_target(s, o);
      if (target.ready && target.steps > 0) s.playback.seek(target.steps - 1, s.traces.size());
      if (target.ready) capture = ++settle_frames >= 3;
    } else {
      s.playback.update(dt, s.traces.size());
    }

    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    draw_frame(s);
    ImGui::Render();
    int fb_w = 0, fb_h = 0;
    glfwGetFramebufferSize(window, &fb_w, &fb_h);
    glViewport(0, 0, fb_w, fb_h);
    glClearColor(0.08f, 0.08f, 0.1f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    if (capture) {
      const std::string model = s.ev.has_model ? s.ev.model_path : "";
      const nlohmann::json description = s.layout.description(s.view, fb_w, fb_h, s.playback.shown(), model, o.args);
      if (write_framebuffer_png(o.screenshot, fb_w, fb_h, kScreenshotKeyword, description.dump())) {
        std::fprintf(stderr, "fafo-studio: wrote %s (%dx%d, %s view, %zu step%s)\n", o.screenshot.c_str(), fb_w, fb_h,
                     view_name(s.view), s.playback.shown(), s.playback.shown() == 1 ? "" : "s");
      } else {
        std::fprintf(stderr, "fafo-studio: cannot write %s\n", o.screenshot.c_str());
        exit_code = 1;
      }
      if (!o.layout_json.empty() &&
          !write_json_file(o.layout_json, s.layout.to_json(s.view, fb_w, fb_h, s.playback.shown(), model))) {
        std::fprintf(stderr, "fafo-studio: cannot write %s\n", o.layout_json.c_str());
        exit_code = 1;
      }
      if (!s.ev.error.empty()) {
        std::fprintf(stderr, "fafo-studio: error: %s\n", s.ev.error.c_str());
        exit_code = 1;
      }
      const std::string bench_error = !s.bench_setup.error.empty() ? s.bench_setup.error : s.bench.snapshot().error;
      if (!bench_error.empty()) {
        std::fprintf(stderr, "fafo-studio: error: bench: %s\n", bench_error.c_str());
        exit_code = 1;
      }
      break;
    }
    glfwSwapBuffers(window);
  }
  s.engine->stop();
  s.bench.cancel();  // its thread ends at its next measurement; the state's destruction waits for it
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_code;
}

}  // namespace fafo::studio
