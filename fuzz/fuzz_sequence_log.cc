// Sequence checkpoint logs (server/src/sequence_log.h) as a restarted server reads them: any
// bytes decode without crashing or allocating beyond what they hold, and every record that
// decodes re-encodes to bytes that decode to the same record.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "sequence_log.h"

namespace {

constexpr char kIdentity[] = "states;state_in>state_out:TYPE_FP32[1,4]";

bool Same(const cuvil::SequenceRecord& a, const cuvil::SequenceRecord& b) {
  if (a.key != b.key || a.ended != b.ended || a.steps != b.steps ||
      a.state.size() != b.state.size()) {
    return false;
  }
  for (size_t i = 0; i < a.state.size(); ++i) {
    const cuvil::HostTensor& x = *a.state[i];
    const cuvil::HostTensor& y = *b.state[i];
    if (x.dtype() != y.dtype() || x.shape() != y.shape() || x.byte_size() != y.byte_size() ||
        std::memcmp(x.data(), y.data(), x.byte_size()) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // After a valid header: mode 0, the input's bytes as they are (torn and damaged records, the
  // resynchronisation); mode 1, chunks [u16 length][payload] framed with right checksums (the
  // payload decoder).
  std::string file = cuvil::SequenceLog::Encode(kIdentity, {});
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    file.append(in);
  } else {
    while (in.size() >= 2) {
      const size_t n = std::min<size_t>(
          static_cast<uint8_t>(in[0]) | (static_cast<uint8_t>(in[1]) << 8), in.size() - 2);
      file.append(cuvil::SequenceLog::Frame(in.substr(2, n)));
      in.remove_prefix(2 + n);
    }
  }
  std::vector<std::string> warnings;
  std::vector<cuvil::SequenceRecord> records =
      cuvil::SequenceLog::Decode(file, kIdentity, &warnings);
  std::vector<std::string> again_warnings;
  std::vector<cuvil::SequenceRecord> again = cuvil::SequenceLog::Decode(
      cuvil::SequenceLog::Encode(kIdentity, records), kIdentity, &again_warnings);
  if (again.size() != records.size() || !again_warnings.empty()) __builtin_trap();
  for (size_t i = 0; i < records.size(); ++i) {
    if (!Same(records[i], again[i])) __builtin_trap();
  }
  return 0;
}
