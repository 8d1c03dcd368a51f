//! `--script`: drive the real window without a person — wait for the model, send one prompt,
//! wait for the whole reply, take a screenshot of the window (egui's
//! `ViewportCommand::Screenshot`: the pixels the GPU rendered), write it as PNG and close.
//! CI runs this under Xvfb on lavapipe; the README's screenshot comes from it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eframe::egui;

use crate::app::{Status, TernApp};

/// What the script does.
#[derive(Debug, Clone)]
pub struct Script {
    pub prompt: String,
    pub screenshot: PathBuf,
    /// Give up (and fail) after this long.
    pub timeout: Duration,
}

/// How the script ended: `Ok(reply)` or what went wrong.
pub type Outcome = Arc<Mutex<Option<Result<String, String>>>>;

enum Step {
    WaitLoad,
    WaitReply,
    /// Frames to draw after the reply before the screenshot (the final layout settles).
    Settle(u32),
    Shooting,
    Done,
}

/// The app with a script driving it.
pub struct Scripted {
    pub app: TernApp,
    script: Script,
    step: Step,
    start: Instant,
    shot: Arc<Mutex<Option<Arc<egui::ColorImage>>>>,
    pub outcome: Outcome,
}

impl Scripted {
    pub fn new(app: TernApp, script: Script, outcome: Outcome) -> Self {
        Self {
            app,
            script,
            step: Step::WaitLoad,
            start: Instant::now(),
            shot: Arc::new(Mutex::new(None)),
            outcome,
        }
    }

    fn finish(&mut self, ctx: &egui::Context, r: Result<String, String>) {
        if let Ok(mut o) = self.outcome.lock() {
            *o = Some(r);
        }
        self.step = Step::Done;
        self.app.shutdown();
        ctx.send_viewport_cmd(egui::ViewportCommand::Close);
    }

    fn advance(&mut self, ctx: &egui::Context) {
        if !matches!(self.step, Step::Done) && self.start.elapsed() > self.script.timeout {
            let why = format!(
                "script timed out after {:?} (status {:?})",
                self.script.timeout, self.app.status
            );
            return self.finish(ctx, Err(why));
        }
        match self.step {
            Step::WaitLoad => match &self.app.status {
                Status::Ready => {
                    self.app.input = self.script.prompt.clone();
                    self.app.send();
                    self.step = Step::WaitReply;
                }
                Status::NoModel => {
                    if let Some(e) = &self.app.error {
                        let why = format!("load failed: {}: {}", e.kind, e.message);
                        self.finish(ctx, Err(why));
                    }
                }
                _ => {}
            },
            Step::WaitReply => {
                if let Some(e) = &self.app.error {
                    let why = format!("reply failed: {}: {}", e.kind, e.message);
                    return self.finish(ctx, Err(why));
                }
                if self.app.replies_done > 0 && self.app.status == Status::Ready {
                    self.step = Step::Settle(5);
                }
            }
            Step::Settle(0) => {
                let shot = self.shot.clone();
                let wake = ctx.clone();
                ctx.request_screenshot(move |img| {
                    if let Ok(mut s) = shot.lock() {
                        *s = Some(img);
                    }
                    wake.request_repaint();
                });
                self.step = Step::Shooting;
            }
            Step::Settle(n) => self.step = Step::Settle(n - 1),
            Step::Shooting => {
                let img = self.shot.lock().ok().and_then(|mut s| s.take());
                if let Some(img) = img {
                    let reply = self
                        .app
                        .messages
                        .last()
                        .map(|m| m.content.clone())
                        .unwrap_or_default();
                    let r = write_png(&self.script.screenshot, &img)
                        .map(|()| reply)
                        .map_err(|e| format!("writing {}: {e}", self.script.screenshot.display()));
                    self.finish(ctx, r);
                }
            }
            Step::Done => {}
        }
        if !matches!(self.step, Step::Done) {
            // Engine events wake the window; this only keeps the timeout and the settle
            // frames going (slowly: under lavapipe a frame costs the engine CPU time).
            let next = if matches!(self.step, Step::Settle(_) | Step::Shooting) {
                50
            } else {
                500
            };
            ctx.request_repaint_after(Duration::from_millis(next));
        }
    }
}

impl eframe::App for Scripted {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.show(ui);
        let ctx = ui.ctx().clone();
        self.advance(&ctx);
    }

    fn on_exit(&mut self) {
        self.app.shutdown();
    }
}

/// Write an egui image as an 8-bit RGBA PNG.
/// A blank or one-colour capture (nothing rendered) is an error, not a screenshot.
pub fn write_png(path: &std::path::Path, img: &egui::ColorImage) -> Result<(), String> {
    let [w, h] = img.size;
    let colours: std::collections::HashSet<_> = img.pixels.iter().step_by(7).collect();
    if w < 100 || h < 100 || colours.len() < 16 {
        return Err(format!(
            "the capture looks blank ({w}x{h} pixels, {} colours)",
            colours.len()
        ));
    }
    let mut data = Vec::with_capacity(w * h * 4);
    for c in &img.pixels {
        data.extend_from_slice(&c.to_srgba_unmultiplied());
    }
    let f = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(f), w as u32, h as u32);
    enc.set_color(png::ColorType::Rgba);
    enc.set_depth(png::BitDepth::Eight);
    let mut wr = enc.write_header().map_err(|e| e.to_string())?;
    wr.write_image_data(&data).map_err(|e| e.to_string())?;
    wr.finish().map_err(|e| e.to_string())
}
