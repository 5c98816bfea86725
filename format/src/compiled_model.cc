#include "cuvil/format/compiled_model.h"

#include "absl/strings/str_cat.h"

namespace cuvil {

absl::Status EntryStatus(int32_t rc) {
  switch (rc) {
    case kEntryOk:
      return absl::OkStatus();
    case kEntryIndexOutOfBounds:
      return absl::InvalidArgumentError("indices element out of data bounds");
    case kEntrySliceOutOfBounds:
      return absl::InvalidArgumentError(
          "a slice whose bounds depend on the input shapes (the batch size or another free "
          "dimension) reaches past its input for these shapes");
    case kEntryTopKTooLarge:
      return absl::InvalidArgumentError("TopK's K is larger than its axis at this batch size");
    case kEntryStringNotANumber:
      return absl::InvalidArgumentError(
          "Cast from STRING: a string is not a number of the requested type");
    case kEntryNoStringHeap:
      return absl::FailedPreconditionError(
          "this model makes strings, and the caller gave no storage for them");
    case kEntryResizeEmptyAxis:
      return absl::InvalidArgumentError(
          "a Resize whose sizes depend on the input shapes would fill a non-empty axis from an "
          "empty one for these shapes");
    default:
      return absl::InternalError(absl::StrCat("compiled model returned error code ", rc));
  }
}

}  // namespace cuvil
