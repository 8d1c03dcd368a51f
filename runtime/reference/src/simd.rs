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
//! The integer kernels — the packed ternary plane dots (`packed.rs`) and the Q8_0/Q4_0/Q4_1 block
//! dots (`ggml_cpu.rs`) — also have hand-written versions: AVX2 on x86-64; NEON on AArch64, with
//! the dot-product extension (`sdot`, Armv8.2 `dotprod`) when the CPU has it and NEON widening
//! multiplies (`smull` + pairwise adds) otherwise. Integer sums are exact (or wrap the same way as
//! the plain code's `wrapping_add`), and the float steps after them are the plain code's operations
//! in its order, so every path returns the same bits as the plain Rust definition (tests check each
//! path against it). [`path`] picks one per process; [`cpu_kernel_path`] names it.
//!
//! `TERN_CPU_SIMD=scalar` (read once, at the first kernel call) forces the plain-Rust path on any
//! CPU — for comparing paths, or ruling them out when debugging. Any other value (or none) means
//! "the best the CPU has".
//!
//! This is the crate's only `unsafe`: calling a `#[target_feature]` function, after checking at run
//! time that the CPU supports the features (plus the unaligned loads inside those functions).

/// The CPU kernel path this process runs (chosen once: CPU features and `TERN_CPU_SIMD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // each target constructs only its own variants
pub(crate) enum Path {
    /// x86-64 with AVX2 + FMA + F16C.
    Avx2,
    /// AArch64 NEON with the dot-product extension (`sdot`).
    NeonDotprod,
    /// AArch64 NEON without `dotprod` (widening multiplies).
    Neon,
    /// Plain Rust (any other CPU, or `TERN_CPU_SIMD=scalar`).
    Scalar,
}

impl Path {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Path::Avx2 => "avx2",
            Path::NeonDotprod => "neon-dotprod",
            Path::Neon => "neon",
            Path::Scalar => "scalar",
        }
    }
}

/// Whether `TERN_CPU_SIMD` asks for the plain-Rust path.
fn forced_scalar() -> bool {
    std::env::var("TERN_CPU_SIMD").is_ok_and(|v| v.trim().eq_ignore_ascii_case("scalar"))
}

/// The best path this CPU supports (ignoring `TERN_CPU_SIMD`).
fn detect() -> Path {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
    {
        return Path::Avx2;
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("neon") {
        return if std::arch::is_aarch64_feature_detected!("dotprod") {
            Path::NeonDotprod
        } else {
            Path::Neon
        };
    }
    Path::Scalar
}

/// The kernel path of this process (checked once).
#[inline]
pub(crate) fn path() -> Path {
    static PATH: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
    *PATH.get_or_init(|| {
        if forced_scalar() {
            Path::Scalar
        } else {
            detect()
        }
    })
}

/// The name of the CPU kernel path this process runs: `"avx2"` (x86-64 with AVX2 + FMA + F16C),
/// `"neon-dotprod"` (AArch64 with the dot-product extension), `"neon"` (AArch64 without it) or
/// `"scalar"` (plain Rust: any other CPU, or `TERN_CPU_SIMD=scalar`). Every path gives the same
/// bits; this is for logs and benchmarks.
pub fn cpu_kernel_path() -> &'static str {
    path().name()
}

/// Whether the CPU has AVX2, FMA and F16C (checked once) and `TERN_CPU_SIMD` does not ask for
/// the plain path.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn avx2_fma() -> bool {
    path() == Path::Avx2
}

/// Test builds count, per thread, the calls each kernel path serves, so a test can assert which
/// path a public call took (no-ops in other builds).
#[cfg(test)]
pub(crate) mod hits {
    use std::cell::Cell;

    use super::Path;

    thread_local! {
        static HITS: [Cell<usize>; 4] = const { [const { Cell::new(0) }; 4] };
    }

    fn slot(p: Path) -> usize {
        match p {
            Path::Avx2 => 0,
            Path::NeonDotprod => 1,
            Path::Neon => 2,
            Path::Scalar => 3,
        }
    }

    pub(crate) fn note(p: Path) {
        HITS.with(|h| h.get(slot(p)).map(|c| c.set(c.get() + 1)));
    }

    /// Calls served by path `p` on this thread so far.
    pub(crate) fn get(p: Path) -> usize {
        HITS.with(|h| h.get(slot(p)).map_or(0, Cell::get))
    }
}

/// Record that a kernel of path `p` ran (test builds only).
#[inline(always)]
pub(crate) fn note(_p: Path) {
    #[cfg(test)]
    hits::note(_p);
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

/// AArch64 integer dot-product building blocks shared by the NEON kernels.
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    use std::arch::aarch64::*;

    /// `acc + sdot(a, b)`: lane `l` gains `Σ_{j=4l}^{4l+3} a_j · b_j` (i8 × i8, exact in i32,
    /// wrapping). `core::arch`'s `vdotq_s32` is not stable yet (`stdarch_neon_dotprod`), so this
    /// is the instruction itself.
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    pub(crate) fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        // SAFETY: `sdot` reads and writes only the three vector registers named here; this
        // function is compiled with (and its callers check for) the dotprod feature.
        unsafe {
            std::arch::asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }

    /// The same four lane sums as [`sdot`] (without the accumulator) with base NEON:
    /// `smull`/`smull2` (i8 × i8 → i16, exact: |product| ≤ 2^14), then pairwise widening adds
    /// (`saddlp`) and a pairwise add (`addp`) to groups of four consecutive products.
    #[inline]
    #[target_feature(enable = "neon")]
    pub(crate) fn dot_i8_neon(a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        let hi = vmull_high_s8(a, b);
        vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi))
    }
}
