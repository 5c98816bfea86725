// The loader on its own: this binary links cuvil_jit_loader (whole archive, so every object of the
// library must resolve) with the runtime and LLVM, and never the compiler. It builds a
// CompiledModel from hand-written LLVM IR, runs it, sends it through the format library's
// encoder and decoder, and hot-patches it through the sandbox child (which links only the loader
// too). A loader source that starts calling the compiler fails to link here; one that includes a
// compiler header fails to compile (the loader's include path has no compiler/include).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/format/model_header.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/jitcache/patch_controller.h"
#include "cuvil/runtime/host_tensor.h"
#include "gtest/gtest.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/ExecutionEngine/Orc/CompileUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

namespace cuvil {
namespace {

constexpr int64_t kWidth = 5;

// y[b, i] = x[b, i] + w[i] over float32[batch, kWidth], w the model's weights: cuvil_entry_table
// calls its one kernel, k0_Add, through the table with args {x, w, y} (the kernel convention patch
// IR follows, i32 (ptr, i64)); cuvil_entry does the same through cuvil_fn_table_ptr.
constexpr char kModelIr[] = R"(
@cuvil_weights = external global i8
@cuvil_fn_table = global [1 x ptr] [ptr @k0_Add]
@cuvil_fn_table_ptr = global ptr @cuvil_fn_table

define i32 @k0_Add(ptr %args, i64 %batch) {
entry:
  %a = load ptr, ptr %args
  %bp = getelementptr ptr, ptr %args, i64 1
  %b = load ptr, ptr %bp
  %op = getelementptr ptr, ptr %args, i64 2
  %o = load ptr, ptr %op
  %n = mul i64 %batch, WIDTH
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %exit, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %j = urem i64 %i, WIDTH
  %aa = getelementptr float, ptr %a, i64 %i
  %av = load float, ptr %aa
  %ba = getelementptr float, ptr %b, i64 %j
  %bv = load float, ptr %ba
  %s = fOP float %av, %bv
  %oa = getelementptr float, ptr %o, i64 %i
  store float %s, ptr %oa
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}

define i32 @cuvil_entry_table(ptr %inputs, ptr %outputs, i64 %batch, ptr %arena, ptr %table,
                              ptr %syms) {
  %args = alloca [3 x ptr]
  %x = load ptr, ptr %inputs
  %y = load ptr, ptr %outputs
  store ptr %x, ptr %args
  %a1 = getelementptr ptr, ptr %args, i64 1
  store ptr @cuvil_weights, ptr %a1
  %a2 = getelementptr ptr, ptr %args, i64 2
  store ptr %y, ptr %a2
  %k = load ptr, ptr %table
  %r = call i32 %k(ptr %args, i64 %batch)
  ret i32 %r
}

define i32 @cuvil_entry(ptr %inputs, ptr %outputs, i64 %batch, ptr %arena, ptr %syms) {
  %t = load atomic ptr, ptr @cuvil_fn_table_ptr acquire, align 8
  %r = call i32 @cuvil_entry_table(ptr %inputs, ptr %outputs, i64 %batch, ptr %arena, ptr %t,
                                   ptr %syms)
  ret i32 %r
}
)";

// The kernel alone, computing `op` (fadd, fmul, ...) instead: an IR hot patch of k0_Add.
std::string KernelIr(const std::string& op) {
  std::string ir = kModelIr;
  const size_t begin = ir.find("define i32 @k0_Add");
  const size_t end = ir.find("define i32 @cuvil_entry_table");
  return absl::StrReplaceAll(ir.substr(begin, end - begin),
                             {{"WIDTH", absl::StrCat(kWidth)}, {"fOP", op}});
}

// Object code of `ir` for this host, with LLVM alone (what the compiler would hand the loader).
std::string ObjectCodeOf(const std::string& ir) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> module = llvm::parseAssemblyString(ir, diag, ctx);
  if (!module) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    diag.print("model", os, /*ShowColors=*/false);
    ADD_FAILURE() << os.str();
    return "";
  }
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) return "";
  auto tm = jtmb->createTargetMachine();
  if (!tm) return "";
  module->setDataLayout((*tm)->createDataLayout());
  module->setTargetTriple((*tm)->getTargetTriple().str());
  llvm::orc::SimpleCompiler compile(**tm);
  auto object = compile(*module);
  if (!object) return "";
  return std::string((*object)->getBufferStart(), (*object)->getBufferSize());
}

// The model kModelIr describes with weights w[i] = 0.5 * (i + 1).
CompiledModel AddModel() {
  CompiledModel m;
  m.name = "add";
  m.symbol = "batch";
  m.symbols = {"batch"};
  m.inputs = {{"x", DType::kFloat32, {SymDim::Batch(), SymDim::Const(kWidth)}}};
  m.outputs = {{"y", DType::kFloat32, {SymDim::Batch(), SymDim::Const(kWidth)}}};
  m.object_code = ObjectCodeOf(
      absl::StrReplaceAll(kModelIr, {{"WIDTH", absl::StrCat(kWidth)}, {"fOP", "fadd"}}));
  HostTensor w(DType::kUInt8, {kWidth * static_cast<int64_t>(sizeof(float))});
  for (int64_t i = 0; i < kWidth; ++i) w.data_as<float>()[i] = 0.5f * static_cast<float>(i + 1);
  m.weights = std::move(w);
  m.kernels = {
      {0, "k0_Add", "Add", "y_node", "(float32[batch,5], float32[5]) -> float32[batch,5]", -1}};
  m.batch_split_note = "not separable: hand-written";
  return m;
}

// A [batch, kWidth] input holding b * 10 + i.
HostTensor Input(int64_t batch) {
  HostTensor x(DType::kFloat32, {batch, kWidth});
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < kWidth; ++i) {
      x.data_as<float>()[b * kWidth + i] = static_cast<float>(b * 10 + i);
    }
  }
  return x;
}

// Checks that `y` is x (op) w elementwise for Input(batch), op given as a function.
template <typename Op>
void ExpectOutput(const std::vector<HostTensor>& y, int64_t batch, Op op) {
  ASSERT_EQ(y.size(), 1u);
  ASSERT_EQ(y[0].shape(), (std::vector<int64_t>{batch, kWidth}));
  const HostTensor x = Input(batch);
  for (int64_t k = 0; k < batch * kWidth; ++k) {
    const float w = 0.5f * static_cast<float>(k % kWidth + 1);
    EXPECT_EQ(y[0].data_as<float>()[k], op(x.data_as<float>()[k], w)) << "element " << k;
  }
}

TEST(JitLoaderTest, RunsAModelBuiltWithoutTheCompiler) {
  CompiledModel model = AddModel();
  ASSERT_FALSE(model.object_code.empty());
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto loaded = (*engine)->Load("add/1", std::move(model));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->source(), nullptr);  // Nobody compiled it: no source recorded.
  for (int64_t batch : {1, 3}) {
    auto y = (*loaded)->Run({Input(batch)});
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectOutput(*y, batch, [](float a, float b) { return a + b; });
  }
  // The signature is checked before the code runs.
  HostTensor wrong(DType::kFloat32, {2, kWidth + 1});
  EXPECT_EQ((*loaded)->Run({wrong}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JitLoaderTest, AModelThroughTheFormatLibraryRunsTheSame) {
  CompiledModel original = AddModel();
  const std::string object_code = original.object_code;
  const WeightsBlob weights = original.weights;
  auto header = EncodeModelHeader(original);
  std::string bytes;
  ASSERT_TRUE(header.SerializeToString(&bytes));
  ::cuvil::jitcache::v1::CompiledModelHeader parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  auto decoded = DecodeModelHeader(parsed, object_code, weights);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->kernels.size(), 1u);
  EXPECT_EQ(decoded->kernels[0].symbol, "k0_Add");
  EXPECT_EQ(decoded->inputs[0].name, "x");

  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto loaded = (*engine)->Load("add/2", *std::move(decoded));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto y = (*loaded)->Run({Input(4)});
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectOutput(*y, 4, [](float a, float b) { return a + b; });

  // A damaged header is refused, not misread.
  parsed.mutable_kernels(0)->set_index(7);
  EXPECT_FALSE(DecodeModelHeader(parsed, object_code, weights).ok());
}

TEST(JitLoaderTest, AnIrPatchCompilesInTheSandboxAndRollsBack) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto loaded = (*engine)->Load("add/3", AddModel());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  LoadedModel& m = **loaded;
  // The sandbox child (cuvil-patch-sandbox, linked against the loader alone) compiles the IR and
  // runs it once on the probe.
  auto prepared = m.patches().PrepareIrPatch(KernelIr("fmul"), {"k0_Add"}, {Input(2)});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  auto trial = m.RunWith(prepared->get(), {Input(2)});
  ASSERT_TRUE(trial.ok()) << trial.status();
  ExpectOutput(*trial, 2, [](float a, float b) { return a * b; });
  auto id = m.patches().CommitPatch(*std::move(prepared), "jit_loader_test");
  ASSERT_TRUE(id.ok()) << id.status();
  auto patched = m.Run({Input(3)});
  ASSERT_TRUE(patched.ok()) << patched.status();
  ExpectOutput(*patched, 3, [](float a, float b) { return a * b; });

  ASSERT_TRUE(m.patches().Rollback(*id).ok());
  auto restored = m.Run({Input(3)});
  ASSERT_TRUE(restored.ok()) << restored.status();
  ExpectOutput(*restored, 3, [](float a, float b) { return a + b; });
}

}  // namespace
}  // namespace cuvil
