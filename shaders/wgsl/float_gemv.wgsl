// Float GEMV/GEMM: y[t][row0 + r] = Σ_c W[r][c] · x[t][c] for a row-major f32 / f16 / bf16 matrix
// part (decoded NeuZip chunks, raw float heads). 8 rows per workgroup, 32 invocations per row
// striding over the columns (16-bit types: over u32 words of two elements), then a workgroup
// reduction. Element e of the part is at element
// `elem_offset + r · cols + c` of `w` (16-bit types two per u32 word, low half first).
// Bindings: params; w (u32 words); x [n_tokens][cols] f32; y [n_tokens][out_stride] f32.

// #import common

override DTYPE: u32 = 0u; // 0 = f32, 1 = f16, 2 = bf16

struct Params {
    rows: u32,
    cols: u32,
    elem_offset: u32,
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const TPR: u32 = 32u;
const RPW: u32 = 8u;
var<workgroup> partial: array<f32, 256>;

fn elem(i: u32) -> f32 {
    if (DTYPE == 0u) {
        return bitcast<f32>(w[i]);
    }
    let word = w[i >> 1u];
    let hw = select(word & 0xffffu, word >> 16u, (i & 1u) == 1u);
    if (DTYPE == 1u) {
        return f16_bits_to_f32(hw);
    }
    return bitcast<f32>(hw << 16u);
}

// The two 16-bit elements of `word` (low half first) dotted with x[xi], x[xi + 1].
fn word_dot(word: u32, xi: u32) -> f32 {
    var lo: f32;
    var hi: f32;
    if (DTYPE == 1u) {
        lo = f16_bits_to_f32(word & 0xffffu);
        hi = f16_bits_to_f32(word >> 16u);
    } else {
        lo = bitcast<f32>(word << 16u);
        hi = bitcast<f32>(word & 0xffff0000u);
    }
    return lo * x[xi] + hi * x[xi + 1u];
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r = wg.x * RPW + lid / TPR;
    let lane = lid % TPR;
    let t = wg.y;
    var acc = 0.0;
    if (r < p.rows) {
        let base = p.elem_offset + r * p.cols;
        let xb = t * p.cols;
        if (DTYPE == 0u) {
            // 4 loads in flight per step
            var c = lane;
            for (; c + 3u * TPR < p.cols; c = c + 4u * TPR) {
                let a0 = w[base + c];
                let a1 = w[base + c + TPR];
                let a2 = w[base + c + 2u * TPR];
                let a3 = w[base + c + 3u * TPR];
                acc = acc + bitcast<f32>(a0) * x[xb + c] + bitcast<f32>(a1) * x[xb + c + TPR]
                    + bitcast<f32>(a2) * x[xb + c + 2u * TPR]
                    + bitcast<f32>(a3) * x[xb + c + 3u * TPR];
            }
            for (; c < p.cols; c = c + TPR) {
                acc = acc + bitcast<f32>(w[base + c]) * x[xb + c];
            }
        } else {
            // 16-bit elements: whole u32 words (two elements) per load, consecutive lanes on
            // consecutive words. An odd row start takes its first element apart, an odd count
            // its last.
            let head = base & 1u;
            if (head == 1u && lane == 0u && p.cols > 0u) {
                acc = elem(base) * x[xb];
            }
            let m = p.cols - min(head, p.cols);
            let w0 = (base + head) >> 1u;
            let x0 = xb + head;
            let nw = m / 2u;
            var i = lane;
            for (; i + 3u * TPR < nw; i = i + 4u * TPR) {
                let a0 = w[w0 + i];
                let a1 = w[w0 + i + TPR];
                let a2 = w[w0 + i + 2u * TPR];
                let a3 = w[w0 + i + 3u * TPR];
                acc = acc + word_dot(a0, x0 + 2u * i) + word_dot(a1, x0 + 2u * (i + TPR))
                    + word_dot(a2, x0 + 2u * (i + 2u * TPR)) + word_dot(a3, x0 + 2u * (i + 3u * TPR));
            }
            for (; i < nw; i = i + TPR) {
                acc = acc + word_dot(w[w0 + i], x0 + 2u * i);
            }
            if ((m & 1u) == 1u && lane == TPR - 1u) {
                acc = acc + elem(base + head + m - 1u) * x[x0 + m - 1u];
            }
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = TPR / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            partial[lid] = partial[lid] + partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && r < p.rows) {
        y[t * p.out_stride + p.row0 + r] = partial[lid];
    }
}
