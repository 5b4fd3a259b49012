#include "fabric/fabric_provider.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

#include "fabric/fabric_options.hpp"
#include "signal_dispositions.hpp"

namespace ddstage::detail {
namespace {

// Hardware RDMA first, then IP, then shm: a server's endpoint must be reachable from other
// nodes, and shm only reaches its own.
constexpr std::array<std::string_view, 7> auto_order{"cxi",         "verbs;ofi_rxm", "efa", "psm3",
                                                     "tcp;ofi_rxm", "net",           "shm"};
// Measured here at 0.2-0.5 GB/s with millisecond jitter: usable when named, never by default.
constexpr std::array<std::string_view, 2> never_auto{"sockets", "udp;ofi_rxd"};

InfoPtr query_providers() {
  InfoPtr hints(fabric_api().allocinfo());
  if (!hints) throw std::bad_alloc();
  hints->caps = FI_RMA | FI_READ | FI_REMOTE_READ;
  // Every operation carries a slot that starts with an fi_context2 and holds its iovecs until it
  // completes, so these modes cost nothing.
  hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_ASYNC_IOV;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = handled_mr_modes;
  // Each reader owns its domain; the server serialises its progress thread and registrations.
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  fi_info* list = nullptr;
  // The first call initialises every provider, which may load their libraries.
  const SignalDispositions kept("fi_getinfo");
  const int rc = fabric_api().getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints.get(), &list);
  if (rc == -FI_ENODATA) return {};
  fabric_check(rc, "fi_getinfo", "");
  return InfoPtr(list);
}

std::string mr_mode_text(int mode) {
  static constexpr std::array<std::pair<int, std::string_view>, 9> names{
      {{FI_MR_LOCAL, "local"},
       {FI_MR_RAW, "raw"},
       {FI_MR_VIRT_ADDR, "virt_addr"},
       {FI_MR_ALLOCATED, "allocated"},
       {FI_MR_PROV_KEY, "prov_key"},
       {FI_MR_MMU_NOTIFY, "mmu_notify"},
       {FI_MR_RMA_EVENT, "rma_event"},
       {FI_MR_ENDPOINT, "endpoint"},
       {FI_MR_HMEM, "hmem"}}};
  std::string out;
  for (const auto& [bit, name] : names) {
    if (mode & bit) out += (out.empty() ? "" : "|") + std::string(name);
  }
  return out.empty() ? "none" : out;
}

std::string domain_name(const fi_info& i) {
  return i.domain_attr && i.domain_attr->name ? i.domain_attr->name : "";
}

FabricProviderInfo row_of(const fi_info& i) {
  FabricProviderInfo row;
  row.provider = provider_name(i);
  row.fabric = i.fabric_attr && i.fabric_attr->name ? i.fabric_attr->name : "";
  row.domain = domain_name(i);
  row.mr_mode = mr_mode_text(i.domain_attr->mr_mode);
  row.max_msg_size = i.ep_attr->max_msg_size;
  row.progress = i.domain_attr->data_progress == FI_PROGRESS_MANUAL ? "manual"
                 : i.domain_attr->data_progress == FI_PROGRESS_AUTO ? "auto"
                                                                    : "unspecified";
  return row;
}

/// The entries with their verdicts; `chosen` indexes the winner, empty when nothing fits.
struct Evaluation {
  std::vector<const fi_info*> infos;
  std::vector<FabricProviderInfo> rows;
  std::optional<std::size_t> chosen;
};

/// Lower is better; nullopt with `why` set when the entry cannot be picked at all.
std::optional<int> preference(const fi_info& i, const std::string& provider,
                              const std::string& domain, std::size_t address_bytes,
                              std::string& why) {
  const std::string name = provider_name(i);
  if (!domain.empty() && domain_name(i) != domain) {
    why = "domain " + domain_name(i) + ", not " + domain;
    return std::nullopt;
  }
  int rank = 0;
  if (provider == "auto") {
    const auto* it = std::find(auto_order.begin(), auto_order.end(), name);
    if (it == auto_order.end()) {
      why = std::find(never_auto.begin(), never_auto.end(), name) != never_auto.end()
                ? "never picked by auto (slow, jittery here); name it to use it"
                : "not in auto's list; name it to use it";
      return std::nullopt;
    }
    rank = static_cast<int>(it - auto_order.begin());
  } else if (name != provider) {
    // "tcp" names the tcp;ofi_rxm stack, "verbs" verbs;ofi_rxm: RDM over a core provider.
    if (name.substr(0, name.find(';')) != provider) {
      why = "not " + provider;
      return std::nullopt;
    }
    rank = 1;
  }
  // A reader must speak its server's address format (IPv4 and IPv6 entries share a domain).
  const bool address_fits = address_bytes == 0 || i.src_addrlen == address_bytes;
  return rank * 2 + (address_fits ? 0 : 1);
}

Evaluation evaluate(const fi_info* list, const std::string& provider, const std::string& domain,
                    std::size_t address_bytes) {
  Evaluation e;
  std::vector<std::optional<int>> prefs;
  for (const fi_info* i = list; i; i = i->next) {
    e.infos.push_back(i);
    e.rows.push_back(row_of(*i));
    prefs.push_back(preference(*i, provider, domain, address_bytes, e.rows.back().why));
  }
  for (std::size_t k = 0; k < prefs.size(); ++k) {
    if (prefs[k] && (!e.chosen || *prefs[k] < *prefs[*e.chosen])) e.chosen = k;
  }
  if (!e.chosen) return e;
  const FabricProviderInfo& winner = e.rows[*e.chosen];
  for (std::size_t k = 0; k < prefs.size(); ++k) {
    if (!prefs[k]) continue;
    FabricProviderInfo& row = e.rows[k];
    if (k == *e.chosen) {
      row.chosen = true;
      row.why = provider == "auto" ? "first present in auto's order" : "fabric.provider names it";
    } else if (row.provider == winner.provider && row.domain == winner.domain) {
      row.why = "an earlier entry of the same provider and domain is used";
    } else {
      row.why =
          (provider == "auto" ? "auto prefers " : "fabric.provider prefers ") + winner.provider;
    }
  }
  return e;
}

[[noreturn]] void throw_absent(const Evaluation& e, const std::string& provider,
                               const std::string& domain) {
  // Provider -> its domains, in libfabric's order, each once.
  std::vector<std::pair<std::string, std::vector<std::string>>> present;
  for (const auto& row : e.rows) {
    auto it = std::find_if(present.begin(), present.end(),
                           [&](const auto& p) { return p.first == row.provider; });
    if (it == present.end()) it = present.insert(present.end(), {row.provider, {}});
    if (std::find(it->second.begin(), it->second.end(), row.domain) == it->second.end())
      it->second.push_back(row.domain);
  }
  std::string list;
  for (const auto& [name, domains] : present) {
    std::string doms;
    for (const auto& d : domains) doms += (doms.empty() ? "" : ", ") + d;
    list += (list.empty() ? "" : "; ") + name + " (" + doms + ")";
  }
  throw UsageError(
      "libfabric provider '" + provider + "'" +
      (domain.empty() ? "" : " in domain '" + domain + "'") +
      " is not available here; present: " + (list.empty() ? "none with RMA reads" : list));
}

InfoPtr pick(const std::string& provider, const std::string& domain, std::size_t address_bytes) {
  InfoPtr list = query_providers();
  Evaluation e = evaluate(list.get(), provider, domain, address_bytes);
  if (!e.chosen) throw_absent(e, provider, domain);
  // fi_dupinfo copies one entry, without its successors.
  InfoPtr one(fabric_api().dupinfo(e.infos[*e.chosen]));
  if (!one) throw std::bad_alloc();
  return one;
}

}  // namespace

InfoPtr choose_provider(const std::string& provider, const std::string& domain) {
  return pick(provider, domain, 0);
}

InfoPtr find_provider(const std::string& provider, const std::string& domain,
                      std::size_t address_bytes) {
  return pick(provider, domain, address_bytes);
}

std::vector<FabricProviderInfo> describe_providers(const std::string& provider,
                                                   const std::string& domain) {
  InfoPtr list = query_providers();
  // libfabric lists a provider once per capability variant; the user wants each place once.
  std::vector<FabricProviderInfo> rows;
  for (auto& row : evaluate(list.get(), provider, domain, 0).rows) {
    const bool seen = std::any_of(rows.begin(), rows.end(), [&](const FabricProviderInfo& r) {
      return r.provider == row.provider && r.fabric == row.fabric && r.domain == row.domain;
    });
    if (!seen) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace ddstage::detail

namespace ddstage {

std::vector<FabricProviderInfo> describe_fabric_providers(const Settings& settings) {
  return detail::describe_providers(settings.get_string("fabric.provider"),
                                    settings.get_string("fabric.domain"));
}

}  // namespace ddstage
