//! Weight re-layouts done once at load (issue 15), in the same bytes as the tensors they
//! replace: q/k/v stacked into one matrix ([`concat_rows`]) and gate/up interleaved by row pairs
//! ([`ternary_gate_up`], [`ggml_gate_up`]), so one GEMV computes what took two or three.

use tern_format::{ternary, Encoding, FloatType, TensorView, TernaryLayout};

use crate::device::context::GpuContext;
use crate::device::pipeline::GgmlType;
use crate::error::{GpuError, Result};
use crate::weights::{GgmlWeight, TernaryWeight};

pub(crate) fn ggml_type(e: &Encoding) -> Option<GgmlType> {
    e.ggml_block().filter(|t| t.gpu_qtype().is_some())
}

/// Several tensors' rows stacked into the bytes of one tensor ([`concat_rows`]).
pub(crate) struct Stacked {
    pub(crate) encoding: Encoding,
    pub(crate) rows: u64,
    pub(crate) bytes: Vec<u8>,
    /// Bytes of each input as stored here (its rows' share of the stacked bytes).
    pub(crate) shares: Vec<u64>,
}

/// The rows of `views` (each `[rows_i, cols]`, the same `cols`) stacked in order into the bytes
/// of one `[Σ rows_i, cols]` tensor of the same storage, when their encodings allow it: ggml
/// blocks of one type (the rows one after the other), or ternary codes of one layout and scale
/// type with the same scale group (the codes one after the other, then the scales). Per-tensor
/// scales (group 0) become one scale per row (group = cols: the GEMVs then do the same f32
/// operations, `0.0 + f32(acc) · scale`, then the division), costing `rows − 1` scales per tensor.
/// `None` when they cannot be stacked (the caller keeps them apart).
pub(crate) fn concat_rows(views: &[TensorView<'_>]) -> Result<Option<Stacked>> {
    let Some(first) = views.first() else {
        return Ok(None);
    };
    let cols = match first.info.shape.as_slice() {
        [_, c] => *c,
        _ => return Ok(None),
    };
    let mut rows = Vec::with_capacity(views.len());
    for v in views {
        match v.info.shape.as_slice() {
            [r, c] if *c == cols && v.info.encoding == first.info.encoding => rows.push(*r),
            _ => return Ok(None),
        }
    }
    let total: u64 = rows.iter().sum();
    let enc = &first.info.encoding;
    if ggml_type(enc).is_some() {
        let mut bytes = Vec::with_capacity(views.iter().map(|v| v.bytes.len()).sum());
        for v in views {
            bytes.extend_from_slice(v.bytes);
        }
        let shares = views.iter().map(|v| v.bytes.len() as u64).collect();
        return Ok(Some(Stacked {
            encoding: enc.clone(),
            rows: total,
            bytes,
            shares,
        }));
    }
    let Encoding::Ternary {
        layout,
        group,
        scale_type,
    } = *enc
    else {
        return Ok(None);
    };
    let Ok(row_group) = u32::try_from(cols) else {
        return Ok(None);
    };
    let mut parsed = Vec::with_capacity(views.len());
    for (v, &r) in views.iter().zip(&rows) {
        parsed.push(ternary::TernaryRef::new(
            layout, r, cols, group, scale_type, v.bytes,
        )?);
    }
    let mut bytes = Vec::new();
    for t in &parsed {
        bytes.extend_from_slice(t.codes());
    }
    let mut shares: Vec<u64> = parsed.iter().map(|t| t.codes().len() as u64).collect();
    for ((t, &r), share) in parsed.iter().zip(&rows).zip(&mut shares) {
        let before = bytes.len();
        if group == 0 {
            for _ in 0..r {
                bytes.extend_from_slice(t.scales());
            }
        } else {
            bytes.extend_from_slice(t.scales());
        }
        *share += (bytes.len() - before) as u64;
    }
    Ok(Some(Stacked {
        encoding: Encoding::Ternary {
            layout,
            group: if group == 0 { row_group } else { group },
            scale_type,
        },
        rows: total,
        bytes,
        shares,
    }))
}

/// Two equal-shaped row-major byte matrices of `row_bytes` per row, interleaved by rows: gate row
/// j then up row j (the gate/up pairs of [`TernaryWeight::pairs`] / [`GgmlWeight::pairs`]).
fn interleave_rows(gate: &[u8], up: &[u8], row_bytes: usize) -> Result<Vec<u8>> {
    if row_bytes == 0 || gate.len() != up.len() || gate.len() % row_bytes != 0 {
        return Err(GpuError::invalid(
            "gate/up interleave",
            format!(
                "{} and {} bytes are not rows of {row_bytes}",
                gate.len(),
                up.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(gate.len() * 2);
    for (g, u) in gate.chunks(row_bytes).zip(up.chunks(row_bytes)) {
        out.extend_from_slice(g);
        out.extend_from_slice(u);
    }
    Ok(out)
}

/// Gate and up projections (`rows × cols` each, `Encoding::Ternary` bytes of the same layout,
/// group and scale type) as ONE weight of `2 · rows` rows interleaved by pairs (issue 15): row 2j
/// is the gate's row j, row 2j + 1 the up projection's, so one decode GEMV computes both and its
/// GLU epilogue writes `h[j]` (`ternary_gemv.wgsl`, mode bit 5); a GEMM over it gives the pairs
/// side by side for `kernels::glu_pairs`. The same bytes as the two tensors (a per-tensor scale
/// stays one scale each: two per part), so GPU memory does not grow.
#[allow(clippy::too_many_arguments)]
pub fn ternary_gate_up(
    ctx: &GpuContext,
    layout: TernaryLayout,
    rows: u64,
    cols: u64,
    group: u32,
    scale_type: FloatType,
    gate: &[u8],
    up: &[u8],
) -> Result<TernaryWeight> {
    let g = ternary::TernaryRef::new(layout, rows, cols, group, scale_type, gate)?;
    let u = ternary::TernaryRef::new(layout, rows, cols, group, scale_type, up)?;
    let row_bytes = ternary::words_per_row(layout, cols) * 4;
    let codes = interleave_rows(g.codes(), u.codes(), row_bytes as usize)?;
    let ss = scale_type.size();
    let scales = if group == 0 {
        // the gate's scale, then the up projection's
        let (gs, us) = (g.scales().get(..ss), u.scales().get(..ss));
        let (gs, us) = gs
            .zip(us)
            .ok_or_else(|| GpuError::bad_model("ternary gate/up without a scale"))?;
        [gs, us].concat()
    } else {
        let gpr = (cols / u64::from(group)) as usize;
        interleave_rows(g.scales(), u.scales(), gpr * ss)?
    };
    let shape = (layout, rows * 2, cols, group, scale_type);
    TernaryWeight::upload_pairs(ctx, shape, &codes, &scales)
}

/// [`ternary_gate_up`] for ggml-block weights (`qtype` blocks, rows interleaved by pairs;
/// `ggml_gemv.wgsl` mode bit 2).
pub fn ggml_gate_up(
    ctx: &GpuContext,
    qtype: GgmlType,
    rows: u64,
    cols: u64,
    gate: &[u8],
    up: &[u8],
) -> Result<GgmlWeight> {
    let be = qtype.block_elems() as u64;
    if cols == 0 || cols % be != 0 {
        return Err(GpuError::bad_model(format!(
            "ggml gate/up of {cols} columns (a positive multiple of {be})"
        )));
    }
    let row_bytes = cols / be * qtype.block_bytes() as u64;
    if rows.checked_mul(row_bytes) != Some(gate.len() as u64) {
        return Err(GpuError::bad_model(format!(
            "{} bytes for {rows} × {cols} {qtype:?}",
            gate.len()
        )));
    }
    let bytes = interleave_rows(gate, up, row_bytes as usize)?;
    GgmlWeight::upload_pairs(ctx, qtype, rows * 2, cols, &bytes)
}
