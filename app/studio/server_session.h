// The studio's optional `fafo serve`: an OpenAI-compatible server (app/server/) on the
// open model's file and settings, started and stopped from the Server menu. Its one
// slot is a sequence on the chat's loaded weights when they were opened with the same
// settings (else it opens the file itself), made on a background thread, so the chat and
// the debugger go on with theirs; the UI thread only reads status().
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "fafo/open_model.h"

namespace fafo::server {
class SlotPool;
class Server;
}  // namespace fafo::server

namespace fafo::studio {

class ServerSession {
 public:
  struct Status {
    enum class State { Stopped, Starting, Running } state = State::Stopped;
    int port = 0;
    std::string url;    // http://host:port/v1 while running
    std::string model;  // the file it serves
    std::string error;  // why the last start failed
  };

  ServerSession();
  ~ServerSession();
  ServerSession(const ServerSession&) = delete;
  ServerSession& operator=(const ServerSession&) = delete;

  // Starts serving `model` on host:port (port 0: any free one); returns at once. A
  // running server is stopped first. `loaded`: the model already open with those
  // options (Engine::loaded_model), whose weights the slot shares; null: load them.
  void start(const OpenOptions& model, const std::string& host, int port,
             std::shared_ptr<const OpenedModel> loaded = nullptr);
  void stop();
  Status status() const;

 private:
  void run(OpenOptions model, std::string host, int port, std::shared_ptr<const OpenedModel> loaded);

  mutable std::mutex mutex_;
  Status status_;
  std::unique_ptr<server::SlotPool> pool_;
  std::unique_ptr<server::Server> server_;
  bool stop_requested_ = false;
  std::thread thread_;
};

}  // namespace fafo::studio
