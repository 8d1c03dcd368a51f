// The epilogue of the ternary GEMVs (plain, wide, decode, decode + norm), imported by each;
// it uses their `p` (row0, out_stride, mode) and `y` bindings and `pres`.

// The per-tensor scale of the part's row `row`: 0, or the pair's half (mode bit 5).
fn pair_scale(row: u32) -> u32 {
    return select(0u, (p.row0 + row) & 1u, ((p.mode >> 5u) & 1u) == 1u);
}

// The result `res` of the part's row `row` for token `tok`, stored by the epilogue `epi` (pairs:
// the odd row of a pair writes the pair's GLU, reading the even row's result from `pres`).
fn epilogue(epi: u32, row: u32, tok: u32, res: f32, lrow: u32) {
    if (((p.mode >> 5u) & 1u) == 1u && epi >= 2u) {
        if ((row & 1u) == 1u) {
            let gate = pres[lrow - 1u];
            let o = tok * (p.out_stride / 2u) + (p.row0 + row) / 2u;
            if (epi == 2u) {
                let g = max(gate, 0.0);
                y[o] = g * g * res;
            } else {
                y[o] = gate / (1.0 + exp(-gate)) * res;
            }
        }
        return;
    }
    let o = tok * p.out_stride + p.row0 + row;
    if (epi == 0u) {
        y[o] = res;
    } else if (epi == 1u) {
        y[o] = y[o] + res;
    } else if (epi == 2u) {
        let g = max(y[o], 0.0);
        y[o] = g * g * res;
    } else {
        let g = y[o];
        y[o] = g / (1.0 + exp(-g)) * res;
    }
}
