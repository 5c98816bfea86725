// cuvil-quantize: post-training quantization of a float ONNX model into a QDQ ONNX model.
//   cuvil-quantize IN.onnx OUT.onnx [--calibration DIR | --random N]
//                  [--method minmax|percentile|entropy] [--percentile P] [--per-channel]
//                  [--int8-activations] [--float-bias] [--exclude NODE]... [--report]
//                  [--eval-random N] [--weights-int4] [--int4-block N]
// Activation ranges come from running IN.onnx with Cuvil over the calibration inputs; --report
// then runs both models on those inputs and prints the output error and per-layer SQNR.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "accuracy_report.h"
#include "calibration_data.h"
#include "quantizer.h"

namespace cuvil::quantize {
namespace {

constexpr char kUsage[] =
    "usage: cuvil-quantize IN.onnx OUT.onnx [--calibration DIR | --random N]\n"
    "                      [--method minmax|percentile|entropy] [--percentile P] [--per-channel]\n"
    "                      [--int8-activations] [--float-bias] [--exclude NODE]... [--report]\n"
    "                      [--eval-random N] [--weights-int4] [--int4-block N]\n"
    "  --calibration DIR  inputs from DIR/test_data_set_*/input_K.pb (or DIR/input_K.pb)\n"
    "  --random N         N sets of random inputs (default: --random 8)\n"
    "  --method           activation range: min/max (default), percentile of |x| (99.99),\n"
    "                     or TensorRT's KL-entropy threshold\n"
    "  --per-channel      one int8 weight scale per output channel (opset >= 13)\n"
    "  --int8-activations int8 instead of uint8 activations (both asymmetric)\n"
    "  --float-bias       keep Conv/Gemm bias float instead of int32\n"
    "  --exclude NODE     keep NODE (name, or first output when unnamed) float\n"
    "  --report           print per-layer ranges and SQNR, and the outputs' error against float\n"
    "  --eval-random N    report on N random input sets (another seed than --random's) instead\n"
    "                     of the calibration sets; implies --report\n"
    "  --weights-int4     MatMul/Gemm with initializer weights become 4-bit MatMulNBits\n"
    "                     (com.microsoft, as ONNX Runtime runs it; activations stay float);\n"
    "                     --exclude keeps a node float, Conv is still quantized to int8 QDQ\n"
    "  --int4-block N     weights per int4 scale along K (a multiple of 16; default 32)\n";

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "cuvil-quantize: %s\n", std::string(s.message()).c_str());
  return 1;
}

int Usage(const std::string& why) {
  std::fprintf(stderr, "cuvil-quantize: %s\n%s", why.c_str(), kUsage);
  return 2;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

const char* MethodName(CalibrationMethod m) {
  switch (m) {
    case CalibrationMethod::kMinMax:
      return "minmax";
    case CalibrationMethod::kPercentile:
      return "percentile";
    case CalibrationMethod::kEntropy:
      return "entropy";
  }
  return "?";
}

int Main(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string calibration_dir;
  int random_sets = 0;
  int eval_random_sets = 0;
  bool report = false;
  QuantizeOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--calibration") {
      if (!value(&calibration_dir)) return Usage("--calibration needs a folder");
    } else if (a == "--random") {
      if (!value(&v) || !absl::SimpleAtoi(v, &random_sets) || random_sets < 1)
        return Usage("--random needs a positive count");
    } else if (a == "--method") {
      if (!value(&v)) return Usage("--method needs a name");
      auto m = ParseCalibrationMethod(v);
      if (!m.ok()) return Usage(std::string(m.status().message()));
      options.calibration.method = *m;
    } else if (a == "--percentile") {
      double p = 0;
      if (!value(&v) || !absl::SimpleAtod(v, &p) || !(p > 0 && p <= 100))
        return Usage("--percentile needs a value in (0, 100]");
      options.calibration.percentile = p;
    } else if (a == "--per-channel") {
      options.qdq.per_channel = true;
    } else if (a == "--int8-activations") {
      options.qdq.activation_type = ActivationType::kInt8;
    } else if (a == "--float-bias") {
      options.qdq.int32_bias = false;
    } else if (a == "--exclude") {
      if (!value(&v)) return Usage("--exclude needs a node name");
      options.qdq.exclude.insert(v);
    } else if (a == "--weights-int4") {
      options.weights_int4 = true;
    } else if (a == "--int4-block") {
      if (!value(&v) || !absl::SimpleAtoi(v, &options.int4_block) || options.int4_block < 16 ||
          options.int4_block % 16 != 0)
        return Usage("--int4-block needs a positive multiple of 16");
    } else if (a == "--report") {
      report = true;
    } else if (a == "--eval-random") {
      if (!value(&v) || !absl::SimpleAtoi(v, &eval_random_sets) || eval_random_sets < 1)
        return Usage("--eval-random needs a positive count");
      report = true;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      return Usage(absl::StrCat("unknown option ", a));
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) return Usage("expected IN.onnx and OUT.onnx");
  if (!calibration_dir.empty() && random_sets > 0)
    return Usage("--calibration and --random exclude each other");

  std::ifstream in(positional[0], std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::ModelProto model;
  if (!in || !model.ParseFromString(bytes.str())) {
    return Fail(
        absl::InvalidArgumentError(absl::StrCat(positional[0], ": cannot read an ONNX model")));
  }
  if (auto s = CheckModel(model); !s.ok()) return Fail(s);
  auto inputs = ModelInputs(model);
  if (!inputs.ok()) return Fail(inputs.status());
  std::vector<std::vector<HostTensor>> sets;
  if (!calibration_dir.empty()) {
    auto read = ReadCalibrationSets(calibration_dir, *inputs);
    if (!read.ok()) return Fail(read.status());
    sets = std::move(*read);
  } else {
    sets = RandomCalibrationSets(random_sets > 0 ? random_sets : 8, *inputs);
  }

  auto engine = JitEngine::Create();
  if (!engine.ok()) return Fail(engine.status());
  auto t0 = std::chrono::steady_clock::now();
  auto result = QuantizeModel(**engine, model, sets, options);
  if (!result.ok()) return Fail(result.status());
  double quantize_ms = MsSince(t0);
  std::string out_bytes;
  if (!result->model.SerializeToString(&out_bytes)) {
    return Fail(absl::InternalError("cannot serialize the QDQ model"));
  }
  std::ofstream out(positional[1], std::ios::binary | std::ios::trunc);
  out.write(out_bytes.data(), static_cast<std::streamsize>(out_bytes.size()));
  out.close();
  if (!out) return Fail(absl::InternalError(absl::StrCat("cannot write ", positional[1])));
  std::printf(
      "quantized %zu nodes (%zu kept float by --exclude, %zu skipped) calibration=%s sets=%zu "
      "activations=%s weights=int8 symmetric %s bias=%s ms=%.0f -> %s\n",
      result->rewrite.layers.size(), options.qdq.exclude.size(), result->rewrite.skipped.size(),
      MethodName(options.calibration.method), sets.size(),
      options.qdq.activation_type == ActivationType::kUInt8 ? "uint8" : "int8",
      options.qdq.per_channel ? "per-channel" : "per-tensor",
      options.qdq.int32_bias ? "int32" : "float", quantize_ms, positional[1].c_str());
  for (const Int4Layer& l : result->int4_layers) {
    std::printf("int4 %s (%s, K=%lld N=%lld, block %lld): weight sqnr %.1f dB\n", l.node.c_str(),
                l.op_type.c_str(), static_cast<long long>(l.k), static_cast<long long>(l.n),
                static_cast<long long>(options.int4_block), l.weight_sqnr_db);
  }
  for (const std::string& s : result->rewrite.skipped) {
    std::printf("skipped %s (an input that is not float32 or not inline)\n", s.c_str());
  }
  if (!report) return 0;

  // Seed 2: never the --random calibration sets (seed 1).
  auto accuracy = MeasureAccuracy(
      **engine, model, *result,
      eval_random_sets > 0 ? RandomCalibrationSets(eval_random_sets, *inputs, /*seed=*/2) : sets);
  if (!accuracy.ok()) return Fail(accuracy.status());
  std::printf("%-48s %-7s %-22s %9s %9s %9s %s\n", "layer", "op", "input range", "in_sqnr",
              "est_sqnr", "w_sqnr", "bias");
  for (const QuantizedLayer& l : result->rewrite.layers) {
    std::string range, measured = "-", estimate = "-";
    for (const std::string& a : l.activations) {
      const ActivationStats& s = result->activations.at(a);
      if (!range.empty()) range += " ";
      range += absl::StrCat("[", absl::StrFormat("%.3g", s.calibrated.lo), ",",
                            absl::StrFormat("%.3g", s.calibrated.hi), "]");
      if (measured == "-") {
        measured = absl::StrFormat("%.1f", accuracy->activation_sqnr_db.at(a));
        estimate = absl::StrFormat("%.1f", s.sqnr_estimate_db);
      }
    }
    std::printf("%-48s %-7s %-22s %9s %9s %9s %s\n", l.node.c_str(), l.op_type.c_str(),
                range.c_str(), measured.c_str(), estimate.c_str(),
                l.weight.empty() ? "-" : absl::StrFormat("%.1f", l.weight_sqnr_db).c_str(),
                l.int32_bias ? "int32" : "float");
  }
  for (size_t i = 0; i < accuracy->outputs.size(); ++i) {
    const OutputError& e = accuracy->outputs[i];
    std::printf("output %s: cosine=%.6f max_abs_error=%.4g top1=%lld/%lld\n",
                accuracy->output_names[i].c_str(), e.cosine(), e.max_abs_error(),
                static_cast<long long>(e.top1_matches()), static_cast<long long>(e.rows()));
  }
  return 0;
}

}  // namespace
}  // namespace cuvil::quantize

int main(int argc, char** argv) { return cuvil::quantize::Main(argc, argv); }
