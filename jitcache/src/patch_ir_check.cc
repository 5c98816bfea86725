// CheckPatchIr: what patch IR may reference, checked on the parsed module before any code
// generation (declared in jit_engine.h).
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/runtime_symbols.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/InstrTypes.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace cuvil {
namespace {

// The C library functions generated kernels may call besides the runtime ABI: math and memory.
const std::set<std::string>& LibmAllowList() {
  static const auto* names = new std::set<std::string>{
      "memcpy",  "memmove", "memset",  "memcmp",    "exp",        "expf",     "exp2",
      "exp2f",   "expm1",   "expm1f",  "log",       "logf",       "log2",     "log2f",
      "log10",   "log10f",  "log1p",   "log1pf",    "pow",        "powf",     "sqrt",
      "sqrtf",   "cbrt",    "cbrtf",   "sin",       "sinf",       "cos",      "cosf",
      "tan",     "tanf",    "asin",    "asinf",     "acos",       "acosf",    "atan",
      "atanf",   "atan2",   "atan2f",  "sinh",      "sinhf",      "cosh",     "coshf",
      "tanh",    "tanhf",   "asinh",   "asinhf",    "acosh",      "acoshf",   "atanh",
      "atanhf",  "erf",     "erff",    "erfc",      "erfcf",      "fabs",     "fabsf",
      "floor",   "floorf",  "ceil",    "ceilf",     "round",      "roundf",   "trunc",
      "truncf",  "rint",    "rintf",   "nearbyint", "nearbyintf", "fmod",     "fmodf",
      "fmin",    "fminf",   "fmax",    "fmaxf",     "fma",        "fmaf",     "lgamma",
      "lgammaf", "tgamma",  "tgammaf", "remainder", "remainderf", "copysign", "copysignf",
      "hypot",   "hypotf",  "ldexp",   "ldexpf",    "frexp",      "frexpf",   "modf",
      "modff",   "lround",  "lroundf", "llround",   "llroundf"};
  return *names;
}

bool RuntimeAbiSymbol(const std::string& name) {
  for (const RuntimeSymbol& s : RuntimeSymbols()) {
    if (name == s.name) return true;
  }
  return false;
}

}  // namespace

absl::Status CheckPatchIr(const std::string& ir_text) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> module = llvm::parseAssemblyString(ir_text, diag, ctx);
  if (!module) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    diag.print("patch", os, /*ShowColors=*/false);
    return absl::InvalidArgumentError(absl::StrCat("patch IR does not parse: ", os.str()));
  }
  if (!module->getModuleInlineAsm().empty()) {
    return absl::InvalidArgumentError("patch IR has module-level asm; patches may not use asm");
  }
  for (const llvm::GlobalVariable& g : module->globals()) {
    if (g.isDeclaration() && g.getName() != kWeightsSymbol) {
      return absl::InvalidArgumentError(absl::StrCat("patch IR declares the external variable '",
                                                     g.getName().str(), "'; patches may only read ",
                                                     kWeightsSymbol, " and their own globals"));
    }
  }
  for (const llvm::GlobalAlias& a : module->aliases()) {
    return absl::InvalidArgumentError(
        absl::StrCat("patch IR defines the alias '", a.getName().str(), "'; aliases are refused"));
  }
  for (const llvm::GlobalIFunc& f : module->ifuncs()) {
    return absl::InvalidArgumentError(
        absl::StrCat("patch IR defines the ifunc '", f.getName().str(), "'; ifuncs are refused"));
  }
  for (const llvm::Function& fn : *module) {
    if (fn.isDeclaration()) {
      if (fn.isIntrinsic()) continue;
      const std::string name = fn.getName().str();
      if (!RuntimeAbiSymbol(name) && !LibmAllowList().count(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "patch IR declares '", name,
            "', which is neither the Cuvil runtime ABI (cuvil_rt_*), an allowed libm/memory "
            "function nor an LLVM intrinsic; patches may not call other code of the process"));
      }
      continue;
    }
    for (const llvm::BasicBlock& bb : fn) {
      for (const llvm::Instruction& inst : bb) {
        const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst);
        if (call == nullptr) continue;
        if (call->isInlineAsm()) {
          return absl::InvalidArgumentError(
              absl::StrCat("patch function '", fn.getName().str(),
                           "' uses inline asm; patches may not use asm"));
        }
        const llvm::Value* callee = call->getCalledOperand()->stripPointerCasts();
        if (llvm::isa<llvm::ConstantExpr>(callee) || llvm::isa<llvm::ConstantInt>(callee)) {
          return absl::InvalidArgumentError(
              absl::StrCat("patch function '", fn.getName().str(),
                           "' calls a constant address; patches may call only functions they "
                           "define or declare"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cuvil
