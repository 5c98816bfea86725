// Private: decides whether a model treats every batch item independently, so that an execution
// may split the batch into parts that run one after another or on several threads.
#ifndef CUVIL_COMPILER_SRC_BATCH_SEPARABILITY_H_
#define CUVIL_COMPILER_SRC_BATCH_SEPARABILITY_H_

#include <string>

#include "cuvil/compiler/ir.h"

namespace cuvil {

struct BatchSeparability {
  // True when running the graph on batch items [0, b) and [b, n) separately and concatenating the
  // outputs gives exactly the outputs for [0, n).
  bool separable = false;
  // Why not, naming the first node or tensor that mixes batch items ("" when separable).
  std::string reason;
};

// Analyses `graph` (shapes inferred, canonical attribute forms, before fusion). Sound but not
// complete: a model is separable only when every graph input and output has the batch as its
// leading dimension (or, for inputs, no batch at all), and every node is a known op used in a
// way that never combines different batch items (no reduction, softmax, concat, slice or
// normalisation across the batch axis, no batch statistics, no data-dependent shapes). Unknown
// ops, control flow and shape values used as data make a model not separable. Thread-compatible.
BatchSeparability AnalyseBatchSeparability(const ir::Graph& graph);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_BATCH_SEPARABILITY_H_
