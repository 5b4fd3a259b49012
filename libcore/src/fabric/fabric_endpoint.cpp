#include "fabric/fabric_endpoint.hpp"

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include "signal_dispositions.hpp"

namespace ddstage::detail {

FabricEndpoint::FabricEndpoint(const fi_info& info, Wait wait)
    : m_info(fabric_api().dupinfo(&info)), m_provider(provider_name(info)) {
  if (!m_info) throw std::bad_alloc();
  // A provider may start its hardware's libraries in any of these opens.
  const SignalDispositions kept("opening a " + m_provider + " endpoint");
  fid_fabric* fabric = nullptr;
  fabric_check(fabric_api().fabric(m_info->fabric_attr, &fabric, nullptr), "fi_fabric", m_provider);
  m_fabric.reset(fabric);
  fid_domain* domain = nullptr;
  fabric_check(fi_domain(fabric, m_info.get(), &domain, nullptr), "fi_domain", m_provider);
  m_domain.reset(domain);

  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  fid_av* av = nullptr;
  fabric_check(fi_av_open(domain, &av_attr, &av, nullptr), "fi_av_open", m_provider);
  m_av.reset(av);

  open_cq(wait);

  fid_ep* ep = nullptr;
  fabric_check(fi_endpoint(domain, m_info.get(), &ep, nullptr), "fi_endpoint", m_provider);
  m_ep.reset(ep);
  fabric_check(fi_ep_bind(ep, &av->fid, 0), "fi_ep_bind(av)", m_provider);
  fabric_check(fi_ep_bind(ep, &m_cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)", m_provider);
  fabric_check(fi_enable(ep), "fi_enable", m_provider);
}

void FabricEndpoint::open_cq(Wait wait) {
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.size = m_info->tx_attr->size;
  fid_cq* cq = nullptr;
  // Readers poll while they wait for a batch. A server's progress thread asks for a wait object
  // so that it can sleep while the network is quiet: a file descriptor first, since poll(2)
  // telling it that work arrived is its only sign of activity (reads aimed at it post nothing to
  // its queue, and fi_cq_sread swallows wake-ups that bring no completion); then any wait
  // object, slept on in fi_cq_sread.
  for (const fi_wait_obj obj : {FI_WAIT_FD, FI_WAIT_UNSPEC}) {
    if (wait == Wait::poll) break;
    cq_attr.wait_obj = obj;
    if (fi_cq_open(m_domain.get(), &cq_attr, &cq, nullptr) != 0) continue;
    m_cq.reset(cq);
    m_blocking = true;
    int fd = -1;
    if (obj == FI_WAIT_FD && fi_control(&cq->fid, FI_GETWAIT, &fd) == 0) m_wait_fd = fd;
    return;
  }
  cq_attr.wait_obj = FI_WAIT_NONE;
  fabric_check(fi_cq_open(m_domain.get(), &cq_attr, &cq, nullptr), "fi_cq_open", m_provider);
  m_cq.reset(cq);
}

bool FabricEndpoint::try_wait() noexcept {
  fid* fids[] = {&m_cq->fid};
  return fi_trywait(m_fabric.get(), fids, 1) == FI_SUCCESS;
}

bool FabricEndpoint::manual_progress() const noexcept {
  return m_info->domain_attr->data_progress == FI_PROGRESS_MANUAL ||
         m_info->domain_attr->control_progress == FI_PROGRESS_MANUAL;
}

std::string FabricEndpoint::address() const {
  std::string out(64, '\0');
  size_t len = out.size();
  int rc = fi_getname(&m_ep->fid, out.data(), &len);
  if (rc == -FI_ETOOSMALL) {
    out.resize(len);
    rc = fi_getname(&m_ep->fid, out.data(), &len);
  }
  fabric_check(rc, "fi_getname", m_provider);
  out.resize(len);
  return out;
}

fi_addr_t FabricEndpoint::insert_peer(std::string_view address) {
  fi_addr_t addr = FI_ADDR_UNSPEC;
  const int n = fi_av_insert(m_av.get(), address.data(), 1, &addr, 0, nullptr);
  // A malformed address inserts nothing: 0 with no error code.
  if (n != 1) throw FabricError("fi_av_insert", m_provider, n < 0 ? n : -FI_EINVAL);
  return addr;
}

MrPtr FabricEndpoint::register_memory(const void* buf, std::size_t len, uint64_t access,
                                      uint64_t requested_key) {
  fid_mr* raw = nullptr;
  fabric_check(fi_mr_reg(m_domain.get(), buf, len, access, 0, requested_key, 0, &raw, nullptr),
               "fi_mr_reg", m_provider);
  MrPtr mr(raw);
  if (mr_mode(FI_MR_ENDPOINT)) {
    fabric_check(fi_mr_bind(raw, &m_ep->fid, 0), "fi_mr_bind", m_provider);
    fabric_check(fi_mr_enable(raw), "fi_mr_enable", m_provider);
  }
  return mr;
}

}  // namespace ddstage::detail
