// The control loops: rank 0 takes requests from clients and executes each with the live ranks;
// every other rank takes rank 0's parts from its own socket and executes them in turn.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/server_rank.hpp"

namespace ddstage::detail {
namespace {

constexpr auto accept_poll = std::chrono::milliseconds(200);

/// A request's reply, a usage error for a malformed one.
Message guarded(const std::function<Message()>& run) {
  try {
    return run();
  } catch (const Error& e) {
    return error_reply(ErrorRecord::of(e));
  } catch (const YAML::Exception& e) {
    return error_reply({.type = ErrorClass::usage,
                        .kind = ErrorKind::usage,
                        .text = "malformed control request: " + e.msg});
  } catch (const std::exception& e) {
    // Out of memory, threads or descriptors: the request fails, the store serves on.
    return error_reply({.text = e.what()});
  }
}

}  // namespace

Message ServerRank::execute(const ControlCommand& command) {
  if (command.op == "load") return load(command.load);
  if (command.op == "repair") return repair(command);
  if (command.op == "unload") return unload(command.dataset);
  if (command.op == "stop") return stop_request();
  return status_reply(status());
}

Message ServerRank::answer(const Message& request, ControlConnection& client) {
  return guarded([&] {
    const ControlCommand command = command_of(request);
    {
      std::lock_guard lock(m_record_mutex);
      m_running = command.op;
    }
    m_client = &client;
    return execute(command);
  });
}

void ServerRank::serve_rank0() {
  while (!m_stopping) {
    // The front desk checked the token; what comes here is from a holder of it.
    auto request = m_control->next(accept_poll);
    if (!request) continue;
    const Message reply = answer(request->message, request->connection);
    m_client = nullptr;
    {
      std::lock_guard lock(m_record_mutex);
      m_running.clear();
    }
    m_control->done();
    try {
      request->connection.send(reply);
    } catch (const Error& e) {
      spdlog::warn("could not answer {}: {}", request->connection.peer(), e.what());
    }
    // Stopped without ranks it could not reach: under a launcher that ends the job on a rank's
    // failure, this ends them too.
    if (m_stopped_alone) m_exit.leave(1);
  }
}

void ServerRank::serve_others() {
  // A rank's interim messages must come well within rank 0's wait for each (peer_timeout).
  const auto keepalive = std::min<std::chrono::milliseconds>(std::chrono::seconds(5),
                                                             heartbeat_interval(m_peer_timeout));
  while (!m_stopping) {
    auto request = m_control->next(accept_poll);
    if (!request) continue;
    const Message reply = guarded([&] {
      const PartCommand command = part_command_of(request->message);
      // Checks and fills can take long: the reporter's interim messages tell rank 0 this rank
      // is at work, and how far.
      std::optional<LoadReporter> reporter;
      if (command.op == "check" || command.op == "fill")
        reporter.emplace(&request->connection, keepalive);
      return part_reply(part(command, [&](uint64_t done, uint64_t total) {
        if (!reporter) return;
        reporter->describe(command.dataset, total, 0);
        reporter->update(done, total);
      }));
    });
    m_control->done();
    try {
      request->connection.send(reply);
    } catch (const Error& e) {
      spdlog::warn("could not answer rank 0 ({}): {}", request->connection.peer(), e.what());
    }
  }
}

ControlServer::Divert ServerRank::stage_divert() {
  m_stage_workers.emplace([this](const std::string& dataset, const std::string& segment) {
    return m_lazy.find(dataset, segment);
  });
  // Stage requests come from readers, on any rank's socket, and may read origin for a while:
  // they never wait behind a command nor hold up heartbeats and status.
  return [this](ControlRequest& request) {
    if (op_of(request.message) != "stage") return false;
    m_stage_workers->submit(std::move(request));
    return true;
  };
}

std::optional<Message> ServerRank::front_desk(const Message& request, bool busy) {
  // Unchecked YAML from the peer: a missing key must not throw on the front desk's thread.
  const auto op = op_of(request);
  if (op == "heartbeat") {
    if (!m_peers || !m_peers->heard(heartbeat_rank(request))) {
      return error_reply({.type = ErrorClass::usage,
                          .kind = ErrorKind::usage,
                          .text = "heartbeat from no live rank of this store"});
    }
    return ok_reply();
  }
  if (op != "status") return std::nullopt;
  StatusReply reply = status();
  std::lock_guard lock(m_record_mutex);
  // A status must not wait for a load to end; what it reports is as of the command before.
  if (busy && !m_running.empty()) reply.busy = m_running;
  return status_reply(reply);
}

}  // namespace ddstage::detail
