// Private: zero-copy import of initializer bytes. The protobuf parser copies every bytes field, so
// a model's weights would be copied out of the file into the parsed ModelProto and then once more
// into the graph's tensors. SplitInitializerData scans the serialized model once and returns a
// small copy of it in which every large raw_data field of a graph initializer holds a one-byte
// placeholder, plus where the real bytes lie in the original buffer: the importer parses the small
// copy and reads the weights straight from the original (for a model file, with pread straight
// into the tensors: the file is never mapped, so one truncated meanwhile cannot raise SIGBUS).
#ifndef CUVIL_COMPILER_SRC_INITIALIZER_DATA_H_
#define CUVIL_COMPILER_SRC_INITIALIZER_DATA_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cuvil/runtime/file_window.h"

namespace cuvil {

struct SplitModel {
  // The serialized ModelProto with the large initializer raw_data fields replaced.
  std::string skeleton;
  // One entry per graph initializer, in order: its raw_data bytes inside the original buffer when
  // the field was replaced, else empty with a null data() (the skeleton still holds the field).
  std::vector<std::string_view> raw_data;
};

// Where a graph initializer's raw_data lies in the split bytes (when it was moved).
struct RawDataRange {
  bool moved = false;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// A model file split the same way: the skeleton, and one range per graph initializer, in order.
struct SplitFile {
  std::string skeleton;
  std::vector<RawDataRange> raw_data;
};

// Raw_data fields below this size stay in the skeleton: moving them saves nothing.
inline constexpr size_t kMinSplitRawDataBytes = 4096;

// Splits the serialized ModelProto at `data`. nullopt when the bytes are not plainly well-formed
// wire format, repeat the graph field or an initializer's raw_data field, or hold nothing worth
// moving: the caller then parses the original bytes, whose parser reports any error as before.
// Thread-safe (pure function).
std::optional<SplitModel> SplitInitializerData(const uint8_t* data, size_t size);

// SplitInitializerData of a model file, read through `file` (only the skeleton's bytes are read;
// the moved raw_data stays in the file for the importer to read straight into its tensors).
// nullopt as above, or when the file cannot be read (it shrank meanwhile). Thread-compatible.
std::optional<SplitFile> SplitInitializerDataOfFile(FileWindow& file);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_INITIALIZER_DATA_H_
