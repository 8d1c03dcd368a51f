// Fused NeuZip decode + GEMV: y[t][row] = Σ_c W[row][c] · x[t][c] for a NeuZip matrix kept
// compressed (layouts 1 and 2, blocks of whole rows: blocks_per_row = 1). The decoded matrix is
// never written: each invocation decodes its lane's symbols exactly as `neuzip_decode.wgsl` does
// (same Params, same table built in workgroup memory, same checks), turns each element into
// an f32 and multiplies it by x right away; per row, the lanes' partial sums are reduced in
// workgroup memory and lane 0 writes y. So the scratch is per workgroup (the 8 KiB table, 1 KiB
// of cdf and 1 KiB of partial sums), not per tensor. Up to 4 tokens per dispatch (the host loops for more).
//
// Shared with neuzip_embed.wgsl (neuzip_rows.wgsl, imported): Params, the decode table, the
// stream readers. Bindings: p (NeuZip chunk params); q (GEMV params); meta, data as in neuzip_decode.wgsl
// (meta read-write: its word `status_word` is this kernel's status, since WebGPU guarantees
// only 4 storage buffers per stage); x [tokens][x_stride] f32; y [tokens][out_stride] f32.

// #import common
// #import neuzip_rows

struct Gemv {
    rows_per_block: u32,
    n_tokens: u32,
    tok0: u32,
    x_stride: u32,
    out_stride: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> q: Gemv;
@group(0) @binding(2) var<storage, read_write> meta_: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read> data: array<u32>;
@group(0) @binding(4) var<storage, read> x: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

var<workgroup> part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    build_table(lid);

    let bl = lid / p.lanes;
    let l = lid % p.lanes;
    let b = p.b0 + wg.x * p.bpw + bl;
    let live = bl < p.bpw && b < p.b_end;
    let cols = p.row_len;
    var start = 0u;
    var len = 0u;
    var xs = 0u;
    var k = 0u;
    var kend = 0u;
    if (live) {
        start = b * p.block_len;
        len = min(p.n_elements - start, p.block_len);
        let base = atomicLoad(&meta_[p.block_words_word + b]);
        kend = atomicLoad(&meta_[p.block_words_word + b + 1u]);
        if (l + 1u < p.lanes) {
            kend = base + lane_start(b, l + 1u);
        }
        xs = atomicLoad(&meta_[p.states_word + b * p.lanes + l]);
        k = base + lane_start(b, l);
    }
    var bad = false;
    let g = p.group;
    var pos = l * g; // next position of this lane in its block
    var s = 0u; // index in the current group
    // Lane 0 of each block reduces; `red` is the first power of two ≥ lanes, halved.
    var red = 1u;
    while (red < p.lanes) {
        red = red * 2u;
    }
    for (var r = 0u; r < q.rows_per_block; r = r + 1u) {
        let row_end = min((r + 1u) * cols, len);
        var acc = vec4<f32>(0.0);
        while (live && !bad && pos < row_end) {
            let e = lut[xs & 0x7ffu];
            let sym = e & 0xffu;
            xs = ((e >> 8u) & 0xfffu) * (xs >> 11u) + (e >> 20u);
            if (xs < 0x8000u) {
                if (k >= kend) {
                    bad = true;
                    break;
                }
                xs = (xs << 16u) | word(k);
                k = k + 1u;
            }
            let w = value(sym, start + pos);
            let c = q.tok0 * q.x_stride + pos - r * cols;
            acc.x = acc.x + w * x[c];
            if (q.n_tokens > 1u) {
                acc.y = acc.y + w * x[c + q.x_stride];
            }
            if (q.n_tokens > 2u) {
                acc.z = acc.z + w * x[c + 2u * q.x_stride];
            }
            if (q.n_tokens > 3u) {
                acc.w = acc.w + w * x[c + 3u * q.x_stride];
            }
            s = s + 1u;
            pos = pos + 1u;
            if (s == g) {
                s = 0u;
                pos = pos + (p.lanes - 1u) * g;
            }
        }
        for (var t = 0u; t < q.n_tokens; t = t + 1u) {
            part[lid] = acc[t];
            workgroupBarrier();
            for (var h = red / 2u; h > 0u; h = h / 2u) {
                if (l < h && l + h < p.lanes && bl < p.bpw) {
                    part[lid] = part[lid] + part[lid + h];
                }
                workgroupBarrier();
            }
            if (live && l == 0u && r * cols < len) {
                let row = start / cols + r;
                y[(q.tok0 + t) * q.out_stride + row] = part[lid];
            }
            workgroupBarrier();
        }
    }
    if (live && (bad || xs != 0x8000u || k != kend)) {
        atomicStore(&meta_[p.status_word], 1u);
    }
}
