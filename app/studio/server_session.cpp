#include "server_session.h"

#include <filesystem>

#include "server.h"
#include "slot_pool.h"

namespace fafo::studio {

ServerSession::ServerSession() = default;
ServerSession::~ServerSession() { stop(); }

void ServerSession::start(const OpenOptions& model, const std::string& host, int port,
                          std::shared_ptr<const OpenedModel> loaded) {
  stop();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status_ = Status{};
    status_.state = Status::State::Starting;
    status_.model = model.path;
    stop_requested_ = false;
  }
  thread_ = std::thread([this, model, host, port, loaded] { run(model, host, port, loaded); });
}

void ServerSession::run(OpenOptions model, std::string host, int port, std::shared_ptr<const OpenedModel> loaded) {
  try {
    // The first load is a sequence on the chat's weights when given; a reload (after a
    // lost device) opens the file.
    auto first = std::make_shared<std::shared_ptr<const OpenedModel>>(std::move(loaded));
    auto pool = std::make_unique<server::SlotPool>(1, 16, [model, first] {
      if (!*first) return open_model(model);
      const std::shared_ptr<const OpenedModel> chat = std::move(*first);
      *first = nullptr;
      return open_sequence(*chat);
    });
    server::ServerOptions o;
    o.host = host;
    o.port = port;
    o.model_name = std::filesystem::path(model.path).stem().string();
    o.defaults.sampling = SamplerOptions{0.8f, 40, 0.95f, 0.05f, 0};
    o.defaults.random_seed = true;
    o.defaults.decoding.strategy = Strategy::Auto;
    auto server = std::make_unique<server::Server>(o, *pool);
    const int bound = server->bind();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_requested_) {
        status_.state = Status::State::Stopped;
        return;
      }
      pool_ = std::move(pool);
      server_ = std::move(server);
      status_.state = Status::State::Running;
      status_.port = bound;
      status_.url = "http://" + host + ":" + std::to_string(bound) + "/v1";
    }
    server_->listen();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    status_.error = e.what();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  status_.state = Status::State::Stopped;
  status_.url.clear();
}

void ServerSession::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = true;
    if (server_) server_->stop();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  server_.reset();
  pool_.reset();
  status_.state = Status::State::Stopped;
  status_.url.clear();
}

ServerSession::Status ServerSession::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

}  // namespace fafo::studio
