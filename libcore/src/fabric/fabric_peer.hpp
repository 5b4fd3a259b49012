// What a reader must know about a server rank to read from it over libfabric. No libfabric
// types: these travel through store.yaml (served) or an allgather (embedded).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ddstage::detail {

/// One server rank's endpoint.
struct FabricPeer {
  std::string
      provider;  ///< exact provider name the server runs ("tcp;ofi_rxm"); readers use the same
  std::string address_hex;  ///< fi_getname bytes as lower-case hex

  /// Its fields for mpi/wire_bytes.hpp, when ranks exchange it.
  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.provider, self.address_hex);
  }
};

/// One registered region of a server rank.
struct FabricRegionInfo {
  uint64_t key = 0;    ///< fi_mr_key of the registration
  uint64_t base = 0;   ///< address of the region's first byte as readers name it: its virtual
                       ///< address under FI_MR_VIRT_ADDR, else 0 (offsets into the registration)
  uint64_t bytes = 0;  ///< length of the region

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.key, self.base, self.bytes);
  }
};

/// Everything a FabricTransport needs about one region it reads from.
struct FabricRemote {
  FabricPeer peer;
  FabricRegionInfo region;
  std::string host;  ///< for error messages only
  /// The rank holding the region, for messages and error context; -1: the region's position
  /// (an embedded store's regions are its ranks).
  int rank = -1;
};

/// Bytes as lower-case hex, and back; from_hex throws UsageError on odd length or a non-hex digit.
std::string to_hex(std::string_view bytes);
std::string from_hex(std::string_view hex);

}  // namespace ddstage::detail
