// Token-embedding lookup in a NeuZip matrix kept compressed (issue 15): out[t] = row ids[t] of
// the decoded matrix as f32, for one chunk of a tensor whose blocks hold whole rows (the fused
// GEMV's layouts: blocks_per_row = 1, `rows_per_block` rows each). One workgroup per token: it
// builds the decode table (neuzip_rows.wgsl, as every NeuZip kernel does), then the block's
// `lanes` invocations run their rANS states from the block's start up to the end of the wanted
// row, writing only that row's elements: the same symbols and bits as `neuzip_decode.wgsl`, so
// the lookup is bit-exact with `tern_format::neuzip::decode` and the decoded table is never
// written. Streams are verified whole at load (`GpuModel::verify_jit`); a lane that runs past its
// words here sets the status (sticky) and stops.
// A token whose row is not in this chunk writes nothing; an id ≥ total_rows (the host validates
// ids first) writes zeros (`first_part` = 1 on the first chunk only), as embed.wgsl does.
// Bindings: p (the chunk's NeuZip params); q (below); meta (read-write: the status word); data
// (the chunk's words); ids [n] u32; out [n][out_stride] f32.

// #import common
// #import neuzip_rows

struct Embed {
    rows_per_block: u32,
    n_tokens: u32,
    total_rows: u32,
    out_stride: u32,
    first_part: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> q: Embed;
@group(0) @binding(2) var<storage, read_write> meta_: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read> data: array<u32>;
@group(0) @binding(4) var<storage, read> ids: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    build_table(lid);

    let t = wg.x;
    if (t >= q.n_tokens) {
        return;
    }
    let cols = p.row_len;
    let id = ids[t];
    let o = t * q.out_stride;
    if (id >= q.total_rows) {
        if (q.first_part == 1u) {
            for (var c = lid; c < cols; c = c + 256u) {
                out[o + c] = 0.0;
            }
        }
        return;
    }
    let b = id / q.rows_per_block;
    let l = lid;
    if (b < p.b0 || b >= p.b_end || l >= p.lanes) {
        return;
    }
    let start = b * p.block_len;
    let row_lo = (id - b * q.rows_per_block) * cols;
    let row_end = row_lo + cols;
    let base = atomicLoad(&meta_[p.block_words_word + b]);
    var kend = atomicLoad(&meta_[p.block_words_word + b + 1u]);
    if (l + 1u < p.lanes) {
        kend = base + lane_start(b, l + 1u);
    }
    var xs = atomicLoad(&meta_[p.states_word + b * p.lanes + l]);
    var k = base + lane_start(b, l);
    let g = p.group;
    var pos = l * g; // next position of this lane in its block
    var s = 0u; // index in the current group
    while (pos < row_end) {
        let e = lut[xs & 0x7ffu];
        let sym = e & 0xffu;
        xs = ((e >> 8u) & 0xfffu) * (xs >> 11u) + (e >> 20u);
        if (xs < 0x8000u) {
            if (k >= kend) {
                atomicStore(&meta_[p.status_word], 1u);
                return;
            }
            xs = (xs << 16u) | word(k);
            k = k + 1u;
        }
        if (pos >= row_lo) {
            out[o + pos - row_lo] = value(sym, start + pos);
        }
        s = s + 1u;
        pos = pos + 1u;
        if (s == g) {
            s = 0u;
            pos = pos + (p.lanes - 1u) * g;
        }
    }
}
