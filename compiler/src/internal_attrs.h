// Private: the attributes graph passes put on nodes for later passes and the code generators
// (Cuvil's own, beside ONNX's). Their names and values are what the graph carries, and so what
// --print-after shows and the JIT cache key hashes: they must not change. Code names them through
// these constants, never by string literal, so a reader finds every writer and reader of one.
#ifndef CUVIL_COMPILER_SRC_INTERNAL_ATTRS_H_
#define CUVIL_COMPILER_SRC_INTERNAL_ATTRS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuvil/compiler/ir.h"

namespace cuvil::attr {

// --- Conv prepared for a microkernel (fuse_conv.cc; emitted by codegen/kernels_nn.cc) ---------
// The microkernel a Conv runs, its weights packed for it (int: UkernelKind).
inline constexpr char kUkernel[] = "ukernel";
enum class UkernelKind : int64_t {
  kNone = 0,            // no microkernel: the generated loop nest
  kPackedGemm = 1,      // packed GEMM (weights packed for it)
  kDepthwise = 2,       // depthwise (weights in ONNX's layout)
  kWinograd = 3,        // Winograd (weights transformed for it)
  kPackedLiveTaps = 4,  // packed GEMM per tap over the outputs it reads input for (tap-major)
};
inline UkernelKind UkernelOf(const ir::Node& n) {
  return static_cast<UkernelKind>(n.attr_int(kUkernel, 0));
}
inline void SetUkernel(ir::Node& n, UkernelKind kind) {
  n.attrs[kUkernel] = static_cast<int64_t>(kind);
}

// A Conv's fused activation (int: CUVIL_UK_ACT_*, runtime/include/cuvil/runtime/ukernels.h) and
// its two float parameters (Clip's bounds, HardSigmoid's alpha and beta; else 0).
inline constexpr char kFusedAct[] = "fused_act";
inline constexpr char kFusedAlpha[] = "fused_alpha";
inline constexpr char kFusedBeta[] = "fused_beta";
// A Conv adds a residual (its input 3) before the activation (int 1).
inline constexpr char kFusedResidual[] = "fused_residual";
// BatchNormalization applies Relu to its output (int 1).
inline constexpr char kFusedRelu[] = "fused_relu";

// --- MatMul/Gemm with a constant B packed in panels (ops/shape_linalg.cc) ----------------------
// B's N and K and the panel width the packing used (ints).
inline constexpr char kPackedN[] = "packed_n";
inline constexpr char kPackedK[] = "packed_k";
inline constexpr char kPackedPanel[] = "packed_panel";
// Epilogues of a packed product (fuse_patterns.cc): input 2 is a bias added per column (int 1);
// an activation applied before the store (string: kEpilogueRelu or kEpilogueGelu).
inline constexpr char kFusedBias[] = "fused_bias";
inline constexpr char kFusedActivation[] = "fused_activation";
inline constexpr char kEpilogueRelu[] = "Relu";
inline constexpr char kEpilogueGelu[] = "Gelu";

// --- Integer QDQ kernels (fuse_qdq.cc; codegen/kernels_quant.cc, kernels_nn.cc) ----------------
// CuvilQConv/CuvilQMatMul: what the output holds (int: CUVIL_UK_QOUT_*), a CuvilQConv's output
// channels and its input's zero point (ints).
inline constexpr char kOutType[] = "out_type";
inline constexpr char kOutChannels[] = "out_channels";
inline constexpr char kXZero[] = "x_zero";
// The float range the output is clamped to before quantization (floats).
inline constexpr char kQLo[] = "q_lo";
inline constexpr char kQHi[] = "q_hi";
// A CuvilQMatMul's output columns (int).
inline constexpr char kOutColumns[] = "out_columns";
// A depthwise Conv between 8-bit tensors: the input's and output's scale (float), zero point
// (int) and signedness (int: 1 int8, 0 uint8).
inline constexpr char kQXScale[] = "q_x_scale";
inline constexpr char kQXZero[] = "q_x_zero";
inline constexpr char kQXSigned[] = "q_x_signed";
inline constexpr char kQYScale[] = "q_y_scale";
inline constexpr char kQYZero[] = "q_y_zero";
inline constexpr char kQYSigned[] = "q_y_signed";
// MatMulNBits canonicalised by its shape function (int 1).
inline constexpr char kNbitsCanonical[] = "nbits_canonical";

// --- Canonical forms shape functions leave for their emitters ----------------------------------
// Softmax-like ops: the normalised axes are [axis, axis_end) (int).
inline constexpr char kAxisEnd[] = "axis_end";
// Slice: the axes whose bounds the kernel checks at run time (ints).
inline constexpr char kCheckedAxes[] = "checked_axes";
// Constant-mode Pad whose pads input covers these axes (ints).
inline constexpr char kPadAxes[] = "pad_axes";
// LSTM/GRU/RNN: W and R were transposed at compile time (int 1).
inline constexpr char kWTransposed[] = "w_transposed";
inline constexpr char kRTransposed[] = "r_transposed";

// ConstantOfShape: its value as a float and as an integer (float, int).
inline constexpr char kFill[] = "fill";
inline constexpr char kFillInt[] = "fill_int";
// RoiAlign: 1 for coordinate_transformation_mode half_pixel, 0 for output_half_pixel (int).
inline constexpr char kHalfPixel[] = "half_pixel";
// Slice: every axis's step (ints), and the (index, axis) pairs of the starts the kernel reads
// from input 1 at run time (ints).
inline constexpr char kSteps[] = "steps";
inline constexpr char kStartInputs[] = "start_inputs";
// Einsum: the labels of input i's axes (labels_<i>) and of the output's (labels_out) (ints).
inline constexpr char kEinsumLabels[] = "labels_";
inline std::string EinsumLabels(size_t input) { return kEinsumLabels + std::to_string(input); }
inline constexpr char kEinsumLabelsOut[] = "labels_out";

// --- Control flow (subgraph_import.cc, ops/shape_control_flow.cc) ------------------------------
// The number of ONNX inputs of a control-flow node; captured outer values follow (int).
inline constexpr char kExplicitInputs[] = "__explicit_inputs";
// An If's outputs whose dims differ between its branches: (output, dim, symbol id) triples of the
// data-dependent symbols the kernel sets from the branch that ran (ints).
inline constexpr char kIfDataDependentDims[] = "__if_data_dependent_dims";
// An opset-8 Scan whose inputs and outputs have a leading batch dim (int 1).
inline constexpr char kScanBatched[] = "__scan_batched";

// Every name above: what a graph may carry besides ONNX's attributes (VerifyGraph refuses any
// other after each pass, pass_pipeline.h). A new internal attribute goes here and in the list.
// clang-format off
inline constexpr const char* kAll[] = {
    kUkernel, kFusedAct, kFusedAlpha, kFusedBeta, kFusedResidual, kFusedRelu, kPackedN, kPackedK,
    kPackedPanel, kFusedBias, kFusedActivation, kQLo, kQHi, kOutColumns, kQXScale, kQXZero,
    kQXSigned, kQYScale, kQYZero, kQYSigned, kNbitsCanonical, kAxisEnd, kCheckedAxes, kPadAxes,
    kWTransposed, kRTransposed, kOutType, kOutChannels, kXZero, kFill, kFillInt, kHalfPixel, kSteps,
    kStartInputs, kEinsumLabelsOut, kExplicitInputs, kIfDataDependentDims, kScanBatched,
};
// clang-format on
// Prefixes of internal names with a number after them (labels_<i>).
inline constexpr const char* kAllPrefixes[] = {kEinsumLabels};

}  // namespace cuvil::attr

#endif  // CUVIL_COMPILER_SRC_INTERNAL_ATTRS_H_
