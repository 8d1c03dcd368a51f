//! The live panel: the adapter and backend in use, prefill/decode tokens/s over time, memory by
//! part as bars, KV-cache fill against capacity, and the last reply's numbers.

use eframe::egui;
use egui_plot::{Legend, Line, Plot, Points};

use crate::stats::{human_bytes, memory_parts, PartKind, Throughput};
use crate::worker::{Finished, LoadedInfo};

/// Everything the live panel reads.
pub struct Live<'a> {
    pub info: Option<&'a LoadedInfo>,
    pub last: Option<&'a Finished>,
    pub kv_len: usize,
    pub throughput: &'a Throughput,
}

pub fn live_ui(ui: &mut egui::Ui, live: &Live<'_>) {
    ui.heading("Live");
    let Some(info) = live.info else {
        ui.label("No model loaded.");
        return;
    };
    // The latest reports: after a reply the model's (GPU allocation now/peak) and the session's.
    let report = live.last.map(|f| &f.report).unwrap_or(&info.report);
    let session = live
        .last
        .and_then(|f| f.session.as_ref())
        .or(info.session.as_ref());

    egui::Grid::new("device").num_columns(2).show(ui, |ui| {
        ui.label("Model");
        ui.label(&info.model_name);
        ui.end_row();
        ui.label("Device");
        ui.label(&report.device);
        ui.end_row();
        ui.label("Backend");
        ui.label(format!("{:?}", report.backend));
        ui.end_row();
    });

    ui.separator();
    ui.strong("Tokens/s");
    Plot::new("throughput")
        .height(150.0)
        .legend(Legend::default())
        .x_axis_label("seconds since load")
        .include_y(0.0)
        .allow_scroll(false)
        .show(ui, |p| {
            // One line per reply: nothing is drawn across the idle time between replies.
            for run in live.throughput.decode_runs() {
                p.line(Line::new("decode", run.to_vec()).color(DECODE_COLOR));
            }
            p.points(
                Points::new("prefill", live.throughput.prefill.clone())
                    .radius(3.0)
                    .filled(true),
            );
        });
    if let Some(f) = live.last {
        let rate = |n: usize, s: f64| {
            if s > 0.0 {
                n as f64 / s
            } else {
                0.0
            }
        };
        ui.label(format!(
            "last reply{}: prefill {} tokens at {} t/s, decode {} tokens at {} t/s",
            if f.stop.is_none() { " (stopped)" } else { "" },
            f.prompt_tokens,
            human_rate(rate(f.prompt_tokens, f.prefill_secs)),
            f.generated_tokens,
            human_rate(rate(f.generated_tokens, f.decode_secs))
        ));
    }

    ui.separator();
    ui.strong("Memory by part");
    let parts = memory_parts(report, session, info.kv_f16_bytes_per_token);
    let largest = parts
        .iter()
        .filter_map(|p| p.bytes)
        .max()
        .unwrap_or(1)
        .max(1);
    let per = session.map(|s| s.kv_bytes_per_token).unwrap_or(0);
    egui::Grid::new("memory").num_columns(2).show(ui, |ui| {
        for p in &parts {
            ui.label(&p.label);
            match p.bytes {
                Some(b) => {
                    let text = if p.note.is_empty() {
                        human_bytes(b)
                    } else {
                        format!("{} · {}", human_bytes(b), p.note)
                    };
                    // The KV cache is allocated for the whole context up front: its bar fills
                    // with the positions in use (empty at 0), the text gives the allocation.
                    let filled = if p.kind == PartKind::KvCache {
                        (per * live.kv_len as u64).min(b)
                    } else {
                        b
                    };
                    let text = if p.kind == PartKind::KvCache {
                        format!("{} used of {text}", human_bytes(filled))
                    } else {
                        text
                    };
                    ui.add(
                        egui::ProgressBar::new(filled as f32 / largest as f32)
                            .desired_width(240.0)
                            .fill(part_color(p.kind))
                            .text(text),
                    );
                }
                None => {
                    ui.weak("not reported by this backend");
                }
            }
            ui.end_row();
        }
    });
    let m = &report.memory;
    if let (Some(now), Some(peak)) = (m.gpu_allocated_now, m.gpu_allocated_peak) {
        let how = if m.gpu_allocation_measured == Some(true) {
            "measured by the driver"
        } else {
            "counted by tern"
        };
        ui.label(format!(
            "GPU allocated: {} now, {} peak ({how})",
            human_bytes(now),
            human_bytes(peak)
        ));
    }
    if let Some(b) = m.budget {
        let min = m
            .gpu_min_budget
            .map(|x| format!(", smallest that works {}", human_bytes(x)))
            .unwrap_or_default();
        ui.label(format!("budget {}{min}", human_bytes(b)));
    }
    if let Some(h) = m.host_resident_bytes {
        ui.label(format!("weights in host memory: {}", human_bytes(h)));
    }

    ui.separator();
    ui.strong("KV cache fill");
    let n_ctx = info.n_ctx.max(1);
    ui.add(
        egui::ProgressBar::new(live.kv_len as f32 / n_ctx as f32)
            .desired_width(300.0)
            .text(format!(
                "{} / {} positions ({} of {})",
                live.kv_len,
                info.n_ctx,
                human_bytes(per * live.kv_len as u64),
                human_bytes(per * info.n_ctx as u64)
            )),
    );
    if per > 0 {
        ui.label(format!(
            "{per} B per position; an f16 cache would take {} B",
            info.kv_f16_bytes_per_token
        ));
    }
}

const DECODE_COLOR: egui::Color32 = egui::Color32::from_rgb(60, 120, 200);

/// A rate as a person reads it: 3 significant digits (`61.8`, `1234`, `0.512`).
pub fn human_rate(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn part_color(k: PartKind) -> egui::Color32 {
    match k {
        PartKind::Weights => egui::Color32::from_rgb(70, 110, 190),
        PartKind::JitScratch => egui::Color32::from_rgb(150, 100, 190),
        PartKind::KvCache => egui::Color32::from_rgb(60, 150, 110),
        PartKind::Activations => egui::Color32::from_rgb(190, 130, 60),
    }
}
