// BitNet b1.58 per-token INT8 absmax activation quantization, bit-exact with
// tern_reference::quant::quantize_act_int8:
//   s = 127 / max(max_j |x_j|, 1e-5)   (correctly rounded division: div_rn)
//   q_j = clamp(round_half_even(x_j · s), -128, 127)
// NaN inputs are ignored by the max and quantize to 0 (Rust's `f32::max` and `as i8`).
//
// One workgroup per token. Bindings:
//   x  : [n_tokens][cols] f32
//   q  : [n_tokens][q_stride] u32, 4 int8 per word little-endian; columns cols.. of a row are 0
//   s  : [n_tokens] f32 multipliers (x ≈ q / s)

// #import common
// #import nan_bits

struct Params {
    cols: u32,
    q_stride: u32,
    n_tokens: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> q: array<u32>;
@group(0) @binding(3) var<storage, read_write> s_out: array<f32>;

const WG: u32 = 256u;
var<workgroup> amax_bits: atomic<u32>;
var<workgroup> scale: f32;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let tok = wg.x;
    if (lid == 0u) {
        atomicStore(&amax_bits, 0u);
    }
    workgroupBarrier();
    let in_range = tok < p.n_tokens;
    let base = tok * p.cols;
    // |x| as bits: for non-NaN floats the order of the bit patterns is the order of the values,
    // so an integer max is exact and independent of the reduction order.
    var m = 0u;
    if (in_range) {
        for (var c = lid; c < p.cols; c = c + WG) {
            let b = bitcast<u32>(x[base + c]) & 0x7fffffffu;
            if (b <= 0x7f800000u) {
                m = max(m, b);
            }
        }
    }
    atomicMax(&amax_bits, m);
    workgroupBarrier();
    if (lid == 0u) {
        let amax = bitcast<f32>(atomicLoad(&amax_bits));
        scale = div_rn(127.0, max(amax, 1e-5));
        if (in_range) {
            s_out[tok] = scale;
        }
    }
    workgroupBarrier();
    let s = scale;
    if (in_range) {
        let qbase = tok * p.q_stride;
        for (var w = lid; w < p.q_stride; w = w + WG) {
            var packed = 0u;
            for (var k = 0u; k < 4u; k = k + 1u) {
                let c = w * 4u + k;
                var v = 0i;
                if (c < p.cols) {
                    let xv = x[base + c];
                    let prod = xv * s;
                    // NaN (x NaN, or ±inf · 0 when amax is inf) quantizes to 0, like `NaN as i8`.
                    if (!is_nan_bits(bitcast<u32>(prod))) {
                        v = i32(clamp(round(prod), -128.0, 127.0));
                    }
                }
                packed = packed | ((bitcast<u32>(v) & 0xffu) << (8u * k));
            }
            q[qbase + w] = packed;
        }
    }
}
