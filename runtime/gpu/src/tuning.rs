//! [`GpuTuning`]: the one home of the GPU engine's tuning knobs, and the crate's one reader of
//! the process environment.
//!
//! Each knob picks between kernels or layouts that compute the same results (bit for bit, or
//! within the documented NMSE); they exist for A/B measurements on devices. The defaults are
//! what measured best (the reasons are on each field). The knobs are parsed once, at the edge
//! (the CLI, the desktop app, the C ABI, the benchmarks: [`GpuTuning::from_env`]), into this
//! typed value, which travels with [`crate::GpuModelOptions`] into the model: the loader's
//! relayout choices, the graph recording and the sessions read its fields, and the kernel
//! launchers receive the decision they need as an argument. Nothing below the edge reads the
//! environment (a test in this module scans the sources for it).

use crate::error::{GpuError, Result};

/// Which linears' ternary GEMVs of a decode batch compute their input's RMSNorm + quantization
/// themselves (the decode GEMV's fused prologue, `ternary_gemv_dec_norm.wgsl`; same bits) and
/// whether the wide kernel may stand in where the decode kernel does not take the shape
/// (`TERN_GPU_FUSE_NORM`; the graph's `fuse_norm_for` maps a mode to each linear).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FuseNorm {
    /// `0`: no fusion, the separate `rmsnorm_quant` pass before every linear.
    Off,
    /// `qkv`: the q/k/v projections only.
    Qkv,
    /// `attn`: q/k/v and the attention output.
    Attn,
    /// `all` (the default): every ternary linear, A8 and a4.8 (decode kernel only).
    #[default]
    All,
    /// `notopk`: [`FuseNorm::All`] except a4.8's TopK inputs (those keep the separate pass).
    NoTopk,
    /// `1`: every linear, and the wide kernel (which has no TopK prologue) where the decode kernel
    /// does not take the shape.
    Wide,
}

/// How the loader keeps a layer's q/k/v projections (`TERN_GPU_QKV`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QkvLayout {
    /// `stacked` (the default): one matrix `[Wq; Wk; Wv]` where the three have the same storage
    /// and the rows fit the FFN scratch (one GEMV, RoPE fused with the KV store).
    #[default]
    Stacked,
    /// `split`: three matrices (three GEMVs, the separate RoPE and KV store).
    Split,
}

/// How the loader keeps a layer's gate and up projections (`TERN_GPU_GATE_UP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GateUpLayout {
    /// `paired` (the default): one weight of interleaved row pairs where both have the same
    /// storage (one GEMV with the GLU in its epilogue).
    #[default]
    Paired,
    /// `split`: the two weights as stored.
    Split,
}

/// The tile of the ternary GEMM (`TERN_GEMM_TILE`), resolved per weight and batch by
/// [`crate::kernels::GemmTile::choose`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GemmTileChoice {
    /// `auto` (the default): 4 × 8 micro-tiles (`Tall` / `TallHalf`) where they fit and give
    /// enough workgroups, else `Wide` (2bit) or `Narrow`.
    #[default]
    Auto,
    /// `old`: the automatic choice before the 4 × 8 micro-tiles (`Wide` from 256 workgroups on,
    /// else `Narrow`).
    Old,
    /// `32`: always `Narrow` (64 rows × 32 tokens).
    Narrow,
    /// `64`: `Wide` (64 × 64) on 2bit weights.
    Wide,
    /// `128`: `Tall` (64 × 128, 4 × 8 micro-tiles) where it fits, else `Wide`.
    Tall,
    /// `64j8`: `TallHalf` (64 × 64, 4 × 8 micro-tiles) where it fits, else `Wide`.
    TallHalf,
    /// `coop`: `Coop` (cooperative matrices) wherever the device has them and the weight fits
    /// ([`crate::kernels::GemmTile::coop_fits`]), from [`crate::kernels::GEMM_MIN_TOKENS`] tokens
    /// on; elsewhere `auto`'s choice.
    Coop,
    /// `classic`: `auto`'s choice without cooperative matrices (the kernels before issue 30).
    Classic,
}

/// Which kernel a ternary GEMV without a fused norm runs (`TERN_GPU_GEMV`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GemvKernel {
    /// `auto` (the default): the decode kernel (`ternary_gemv_dec.wgsl`, 64 codes per vec4
    /// load) where it takes the shape, else the general one.
    #[default]
    Auto,
    /// `plain`: every ternary GEMV on `ternary_gemv.wgsl` (and fused norms on the wide kernel).
    Plain,
}

/// The GPU engine's tuning knobs, typed. [`Default`] is what the engine runs without any
/// `TERN_GPU_*` / `TERN_GEMM_TILE` variable set; [`GpuTuning::from_env`] reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuTuning {
    /// `TERN_GPU_FUSE_NORM` = `0` | `qkv` | `attn` | `all` | `notopk` | `1` (default `all`):
    /// which ternary GEMVs of a decode batch fuse their input's norm + quantization. Measured
    /// (H100 tg128): `all` A8 +9 % over `0`; a4.8 within ±2 % of `0` and `notopk` (fewer
    /// dispatches, no faster on that GPU): docs/measurements.md, "Closing tables of session 5".
    pub fuse_norm: FuseNorm,
    /// `TERN_GPU_FUSE_FLOAT_NORM` = `1` | `0` (default `1`): whether the ggml GEMVs of a decode
    /// batch compute their input's RMSNorm themselves (`ggml_gemv.wgsl`'s prologue; NMSE ~1e-15
    /// from the separate pass). H100: speed-neutral, 60 dispatches fewer per SmolLM2 token.
    pub fuse_float_norm: bool,
    /// `TERN_GPU_ATTN_SHORT` = a number of positions (default unset:
    /// [`crate::SHORT_ATTENTION_KEYS`] = 128): up to it sessions run plans whose attention is
    /// not split (no combine dispatch per layer); `0` = always split. H100 2B4T tg128 (issue 15,
    /// h-rope): 156.1 / 157.1 / 155.7 tokens/s at 0 / 128 / 512, within noise; 128 saves one
    /// dispatch per layer at short contexts.
    pub attn_short: Option<u64>,
    /// `TERN_GPU_ATTN_PREFILL` = `0` | `1` (default `0`): batches of ≥ 16 tokens over f32/f16
    /// caches go to the query-tiled prefill kernel (`attention_prefill.wgsl`, RoPE fused with the
    /// KV store). Opt-in: on the H100 it measured 0.3–1.7 % slower per pp512 end to end
    /// (docs/bench/session6-2026-11-24); what it saves (a quarter of the K/V reads, 120 fewer
    /// dispatches per 30-layer prefill) is what a GPU without a large L2 pays for, unmeasured.
    pub attn_prefill: bool,
    /// `TERN_GPU_QKV` = `stacked` | `split` (default `stacked`): q/k/v as one matrix or three;
    /// same bits. H100 2B4T tg128 (issue 15, h-rope): 157.1 tokens/s stacked (one GEMV, RoPE
    /// fused with the KV store) against 132.3 split.
    pub qkv: QkvLayout,
    /// `TERN_GPU_GATE_UP` = `paired` | `split` (default `paired`): gate and up as one weight of
    /// row pairs with the GLU in the GEMV's epilogue, or two weights; same bits
    /// (tests/tests/gpu_gate_up.rs; h-cat measurements in docs/measurements.md).
    pub gate_up: GateUpLayout,
    /// `TERN_GEMM_TILE` = `auto` | `old` | `32` | `64` | `128` | `64j8` | `coop` | `classic`
    /// (default `auto`): the ternary GEMM's tile; `coop` / `classic` force the prefill path on or
    /// off the matrix units (`auto` takes them where the device has them). H100 pp512: the 4 × 8 micro-tiles +11 % on per-tensor-scale packs
    /// over `old` (docs/bench/h-gemm-2026-11-24).
    pub gemm_tile: GemmTileChoice,
    /// `TERN_GPU_GEMV` = `auto` | `plain` (default `auto`): the decode GEMV where it fits, or the
    /// general one everywhere. H100 2B4T tg128: 289 vs 221 tokens/s with `plain`.
    pub gemv: GemvKernel,
    /// `TERN_GPU_LOOKAHEAD` = `1` | `0` (default `1`): sessions run greedy steps ahead (the next
    /// step submitted before the host reads the argmax; `GpuSession::set_lookahead` per session).
    /// H100 tg128: 266.4 / 627.8 tokens/s (2B4T / SmolLM2) on against 176.0 / 396.5 off.
    pub lookahead: bool,
}

impl Default for GpuTuning {
    fn default() -> Self {
        GpuTuning {
            fuse_norm: FuseNorm::All,
            fuse_float_norm: true,
            attn_short: None,
            attn_prefill: false,
            qkv: QkvLayout::Stacked,
            gate_up: GateUpLayout::Paired,
            gemm_tile: GemmTileChoice::Auto,
            gemv: GemvKernel::Auto,
            lookahead: true,
        }
    }
}

/// The variables [`GpuTuning::from_env`] reads.
pub const TUNING_VARS: [&str; 9] = [
    "TERN_GPU_FUSE_NORM",
    "TERN_GPU_FUSE_FLOAT_NORM",
    "TERN_GPU_ATTN_SHORT",
    "TERN_GPU_ATTN_PREFILL",
    "TERN_GPU_QKV",
    "TERN_GPU_GATE_UP",
    "TERN_GEMM_TILE",
    "TERN_GPU_GEMV",
    "TERN_GPU_LOOKAHEAD",
];

/// `value` of `var` among `table` (an empty value = unset: the default).
fn pick<T: Copy>(
    var: &'static str,
    value: Option<String>,
    default: T,
    table: &[(&str, T)],
) -> Result<T> {
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return Ok(default);
    };
    table
        .iter()
        .find(|(name, _)| *name == v)
        .map(|&(_, t)| t)
        .ok_or_else(|| {
            let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
            GpuError::invalid(
                var,
                format!("`{v}` is not one of {} (or unset)", names.join(", ")),
            )
        })
}

impl GpuTuning {
    /// The knobs from the process environment (see each field for its variable and values; an
    /// unset or empty variable keeps the default). A value outside those is an
    /// [`GpuError::InvalidArgument`] whose `op` names the variable and whose detail lists the
    /// accepted values.
    pub fn from_env() -> Result<GpuTuning> {
        GpuTuning::from_lookup(|name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// [`GpuTuning::from_env`] over `lookup` (a variable's value, `None` when unset).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<GpuTuning> {
        use GemmTileChoice as G;
        let on_off = [("0", false), ("1", true)];
        let d = GpuTuning::default();
        let attn_short = match lookup("TERN_GPU_ATTN_SHORT").filter(|v| !v.is_empty()) {
            None => None,
            Some(v) => Some(v.parse::<u64>().map_err(|_| {
                GpuError::invalid(
                    "TERN_GPU_ATTN_SHORT",
                    format!(
                        "`{v}` is not a number of positions (0 ..= {}; or unset)",
                        u64::MAX
                    ),
                )
            })?),
        };
        Ok(GpuTuning {
            fuse_norm: pick(
                "TERN_GPU_FUSE_NORM",
                lookup("TERN_GPU_FUSE_NORM"),
                d.fuse_norm,
                &[
                    ("0", FuseNorm::Off),
                    ("qkv", FuseNorm::Qkv),
                    ("attn", FuseNorm::Attn),
                    ("all", FuseNorm::All),
                    ("notopk", FuseNorm::NoTopk),
                    ("1", FuseNorm::Wide),
                ],
            )?,
            fuse_float_norm: pick(
                "TERN_GPU_FUSE_FLOAT_NORM",
                lookup("TERN_GPU_FUSE_FLOAT_NORM"),
                d.fuse_float_norm,
                &on_off,
            )?,
            attn_short,
            attn_prefill: pick(
                "TERN_GPU_ATTN_PREFILL",
                lookup("TERN_GPU_ATTN_PREFILL"),
                d.attn_prefill,
                &on_off,
            )?,
            qkv: pick(
                "TERN_GPU_QKV",
                lookup("TERN_GPU_QKV"),
                d.qkv,
                &[("stacked", QkvLayout::Stacked), ("split", QkvLayout::Split)],
            )?,
            gate_up: pick(
                "TERN_GPU_GATE_UP",
                lookup("TERN_GPU_GATE_UP"),
                d.gate_up,
                &[
                    ("paired", GateUpLayout::Paired),
                    ("split", GateUpLayout::Split),
                ],
            )?,
            gemm_tile: pick(
                "TERN_GEMM_TILE",
                lookup("TERN_GEMM_TILE"),
                d.gemm_tile,
                &[
                    ("auto", G::Auto),
                    ("old", G::Old),
                    ("32", G::Narrow),
                    ("64", G::Wide),
                    ("128", G::Tall),
                    ("64j8", G::TallHalf),
                    ("coop", G::Coop),
                    ("classic", G::Classic),
                ],
            )?,
            gemv: pick(
                "TERN_GPU_GEMV",
                lookup("TERN_GPU_GEMV"),
                d.gemv,
                &[("auto", GemvKernel::Auto), ("plain", GemvKernel::Plain)],
            )?,
            lookahead: pick(
                "TERN_GPU_LOOKAHEAD",
                lookup("TERN_GPU_LOOKAHEAD"),
                d.lookahead,
                &on_off,
            )?,
        })
    }
}

/// Whether a test that needs a GPU adapter must fail without one (`TERN_REQUIRE_GPU=1`, set in
/// CI) rather than pass silently: the crate's unit tests read it here, the one module that
/// reads the environment.
#[cfg(test)]
pub(crate) fn gpu_required() -> bool {
    std::env::var("TERN_REQUIRE_GPU").as_deref() == Ok("1")
}

#[cfg(test)]
mod tests;
