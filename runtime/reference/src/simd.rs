//! Run-time CPU feature dispatch for the hot loops.
//!
//! The kernels are written once, as plain Rust (`#[inline(always)]` `*_impl` functions using
//! `f32::mul_add` where the emulated code fuses). [`dispatch!`] calls them inside a function compiled
//! with AVX2 + FMA + F16C when the CPU has them, so `mul_add` becomes one instruction and LLVM may
//! vectorize; otherwise it calls the same code compiled for the baseline target (`mul_add` is then
//! libm's `fmaf`). Both give the same bits: every operation is exactly rounded IEEE arithmetic in a
//! fixed order — vectorization changes speed only, never the order of a reduction (the code has
//! none that LLVM may reassociate: Rust never reassociates or contracts float operations).
//!
//! This is the crate's only `unsafe`: calling a `#[target_feature]` function, after checking at run
//! time that the CPU supports the features.

/// Whether the CPU has AVX2, FMA and F16C (checked once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_fma() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    })
}

/// Define `fn name(args) -> R { body }` twice: once compiled with AVX2 + FMA + F16C and once for
/// the baseline target, plus a dispatcher (the public `name`) that picks by run-time detection.
/// Every helper the body calls must be `#[inline(always)]` (so it is compiled into both versions);
/// hot loops use plain `for` loops (iterator adapters like `for_each` may stay out of line and
/// would then run without the features).
macro_rules! multiversion {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn imp($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,f16c")]
            #[allow(clippy::too_many_arguments)]
            fn fast($($arg: $ty),*) $(-> $ret)? {
                imp($($arg),*)
            }

            #[cfg(target_arch = "x86_64")]
            if $crate::simd::avx2_fma() {
                // SAFETY: `avx2_fma()` just checked that this CPU supports every feature `fast`
                // is compiled for.
                return unsafe { fast($($arg),*) };
            }
            imp($($arg),*)
        }
    };
}
pub(crate) use multiversion;
