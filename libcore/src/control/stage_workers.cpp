#include "stage_workers.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "control_messages.hpp"
#include "ddstage/error.hpp"
#include "error_record.hpp"

namespace ddstage::detail {

StageWorkers::StageWorkers(FindLazyRegion find, StageWorkersOptions options)
    : m_find(std::move(find)), m_options(options) {
  for (unsigned i = 0; i < std::max(options.threads, 1u); ++i)
    m_threads.emplace_back([this](const std::stop_token& stop) { run(stop); });
}

StageWorkers::~StageWorkers() {
  for (auto& t : m_threads) t.request_stop();
  m_threads.clear();  // joins: no worker touches the queue or a region after this
}

void StageWorkers::submit(ControlRequest request) {
  {
    std::lock_guard lock(m_mutex);
    if (m_queue.size() < m_options.max_queued) {
      m_queue.push_back(std::move(request));
      m_ready.notify_one();
      return;
    }
  }
  const ErrorRecord busy{.text = fmt::format("the owner has {} stage requests waiting; try again",
                                             m_options.max_queued)};
  request.connection.send_now(error_reply(busy));
}

void StageWorkers::run(const std::stop_token& stop) {
  for (;;) {
    std::unique_lock lock(m_mutex);
    if (!m_ready.wait(lock, stop, [this] { return !m_queue.empty(); })) return;
    ControlRequest request = std::move(m_queue.front());
    m_queue.pop_front();
    lock.unlock();
    const Message reply = answer_stage(request.message, m_find);
    try {
      request.connection.send(reply, m_options.send_timeout);
    } catch (const Error& e) {
      spdlog::warn("could not answer a stage request of {}: {}", request.connection.peer(),
                   e.what());
    }
  }
}

}  // namespace ddstage::detail
