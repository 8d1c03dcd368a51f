//! Shape and size checks shared by every launcher: values that must fit a `u32` uniform field,
//! buffers that must hold an operand, operands that must fit one binding, row splits of weights
//! larger than a binding, and 1-D dispatch grids over the per-dimension limit.

use crate::device::context::GpuContext;
use crate::error::{GpuError, Result};

/// `v` as a `u32` uniform field, or a typed error naming it.
pub(crate) fn u32_of(op: &'static str, what: &str, v: u64) -> Result<u32> {
    u32::try_from(v).map_err(|_| GpuError::shape(op, format!("{what} = {v} does not fit in u32")))
}

/// `bytes` must fit one storage binding of this adapter.
pub(crate) fn check_binding(ctx: &GpuContext, what: &str, bytes: u64) -> Result<()> {
    if bytes > ctx.binding_limit() {
        return Err(GpuError::TooLarge {
            what: what.into(),
            detail: format!(
                "{bytes} bytes in one binding, the limit is {}",
                ctx.binding_limit()
            ),
        });
    }
    Ok(())
}

/// `buf` must hold at least `need` bytes.
pub(crate) fn check_buffer(
    op: &'static str,
    what: &str,
    buf: &wgpu::Buffer,
    need: u64,
) -> Result<()> {
    if buf.size() < need {
        return Err(GpuError::shape(
            op,
            format!("{what} holds {} bytes, needs {need}", buf.size()),
        ));
    }
    Ok(())
}

/// A 1-D grid of `n` workgroups, spread over y when x would exceed the per-dimension limit.
pub(crate) fn groups_1d(ctx: &GpuContext, n: u64) -> (u32, u32, u32) {
    // Spread over y when x would exceed the per-dimension limit.
    let max = u64::from(ctx.limits.max_compute_workgroups_per_dimension.max(1));
    let x = n.min(max);
    let y = n.div_ceil(max.max(1));
    (x as u32, y.max(1) as u32, 1) // ok: x ≤ max ≤ u32::MAX; y is checked by dispatch
}

/// Split `n_rows` rows of `row_bytes` bytes each into consecutive row ranges whose bytes (plus
/// `extra(rows)` bytes of per-part data, e.g. scales) fit in `limit`. Errors when one row alone
/// does not fit.
pub fn split_rows(
    what: &str,
    n_rows: u64,
    row_bytes: u64,
    limit: u64,
    extra: impl Fn(u64) -> u64,
) -> Result<Vec<std::ops::Range<u64>>> {
    let fits = |rows: u64| rows.saturating_mul(row_bytes).saturating_add(extra(rows)) <= limit;
    if n_rows > 0 && !fits(1) {
        return Err(GpuError::TooLarge {
            what: what.into(),
            detail: format!("one row is {row_bytes} bytes, a binding holds at most {limit}"),
        });
    }
    let mut per = if row_bytes == 0 {
        n_rows.max(1)
    } else {
        (limit / row_bytes).max(1)
    };
    while per > 1 && !fits(per) {
        per -= 1.max(per / 16);
    }
    let per = per.max(1);
    let mut out = Vec::new();
    let mut r = 0;
    while r < n_rows {
        let e = (r + per).min(n_rows);
        out.push(r..e);
        r = e;
    }
    Ok(out)
}
