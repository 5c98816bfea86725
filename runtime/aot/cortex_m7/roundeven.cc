// roundevenf for the Cortex-M7 AOT runtime. LLVM 19 lowers llvm.roundeven.f32 (QuantizeLinear's
// round half to even) to a call to roundevenf on Thumb-2, and newlib has no such function (C23).
// FPv5 rounds to nearest with ties to even in one instruction.
extern "C" {

// x rounded to the nearest integer, halfway cases to even (as C23's roundevenf). Thread-safe.
float roundevenf(float x) {
  float r;
  __asm__("vrintn.f32 %0, %1" : "=t"(r) : "t"(x));
  return r;
}

}  // extern "C"
