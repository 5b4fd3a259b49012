#include "fabric/fabric_endpoint.hpp"

#include <rdma/fi_domain.h>

namespace ddstage::detail {

FabricEndpoint::FabricEndpoint(const fi_info& info, Wait wait)
    : m_info(fabric_api().dupinfo(&info)), m_provider(provider_name(info)) {
  if (!m_info) throw std::bad_alloc();
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

  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  // Readers poll while they wait for a batch; a server's progress thread would burn a core
  // polling, so it asks for a wait object and sleeps in fi_cq_sread.
  cq_attr.wait_obj = wait == Wait::block ? FI_WAIT_UNSPEC : FI_WAIT_NONE;
  cq_attr.size = m_info->tx_attr->size;
  fid_cq* cq = nullptr;
  int rc = fi_cq_open(domain, &cq_attr, &cq, nullptr);
  m_blocking = rc == 0 && wait == Wait::block;
  if (rc != 0 && wait == Wait::block) {
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(domain, &cq_attr, &cq, nullptr);
  }
  fabric_check(rc, "fi_cq_open", m_provider);
  m_cq.reset(cq);

  fid_ep* ep = nullptr;
  fabric_check(fi_endpoint(domain, m_info.get(), &ep, nullptr), "fi_endpoint", m_provider);
  m_ep.reset(ep);
  fabric_check(fi_ep_bind(ep, &av->fid, 0), "fi_ep_bind(av)", m_provider);
  fabric_check(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)", m_provider);
  fabric_check(fi_enable(ep), "fi_enable", m_provider);
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
