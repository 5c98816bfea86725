// Private: zero-copy import of initializer bytes. The protobuf parser copies every bytes field, so
// a model's weights would be copied out of the file into the parsed ModelProto and then once more
// into the graph's tensors. SplitInitializerData scans the serialized model once and returns a
// small copy of it in which every large raw_data field of a graph initializer holds a one-byte
// placeholder, plus where the real bytes lie in the original buffer: the importer parses the small
// copy and reads the weights straight from the original (for a model file, its mapping).
#ifndef CUVIL_COMPILER_SRC_INITIALIZER_DATA_H_
#define CUVIL_COMPILER_SRC_INITIALIZER_DATA_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cuvil {

struct SplitModel {
  // The serialized ModelProto with the large initializer raw_data fields replaced.
  std::string skeleton;
  // One entry per graph initializer, in order: its raw_data bytes inside the original buffer when
  // the field was replaced, else empty with a null data() (the skeleton still holds the field).
  std::vector<std::string_view> raw_data;
};

// Raw_data fields below this size stay in the skeleton: moving them saves nothing.
inline constexpr size_t kMinSplitRawDataBytes = 4096;

// Splits the serialized ModelProto at `data`. nullopt when the bytes are not plainly well-formed
// wire format, repeat the graph field or an initializer's raw_data field, or hold nothing worth
// moving: the caller then parses the original bytes, whose parser reports any error as before.
// Thread-safe (pure function).
std::optional<SplitModel> SplitInitializerData(const uint8_t* data, size_t size);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_INITIALIZER_DATA_H_
