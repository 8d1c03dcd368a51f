//! The window: model bar (top), settings (left), live panel (right), chat (centre), message
//! box with Send / Stop / New chat (bottom). All engine work goes through the [`Worker`].

use std::time::Instant;

use eframe::egui;
use tern_engine::chat::ChatMessage;

use crate::error::AppError;
use crate::panels::{live_ui, Live};
use crate::settings::{load_ui, sample_ui, LoadSettings, SampleSettings};
use crate::stats::Throughput;
use crate::worker::{Command, Event, Finished, LoadedInfo, SendRequest, Worker};

/// What the app is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// No model (none asked for yet, or the last load failed).
    NoModel,
    /// A load is running; `stage` says which step, `pack` the packing progress (tensors).
    Loading {
        stage: String,
        pack: Option<(usize, usize)>,
    },
    Ready,
    /// A reply is being made; `prefill` is (done, total) prompt tokens until decoding starts.
    Generating {
        prefill: Option<(usize, usize)>,
    },
}

/// An error as the window shows it: its kind in words, the message, and tern's typed error
/// name for a bug report (`detail`, shown on hover).
#[derive(Debug, Clone, PartialEq)]
pub struct ShownError {
    pub kind: String,
    pub message: String,
    pub detail: String,
}

impl From<&AppError> for ShownError {
    fn from(e: &AppError) -> Self {
        let mut message = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            let s_text = s.to_string();
            if !message.contains(&s_text) {
                message.push_str(&format!("\ncaused by: {s_text}"));
            }
            src = s.source();
        }
        Self {
            kind: e.kind(),
            message,
            detail: e.type_path(),
        }
    }
}

/// The app's state (public so the UI tests can read it).
pub struct TernApp {
    worker: Option<Worker>,
    pub load: LoadSettings,
    /// What the loaded (or loading) model was loaded with.
    pub loaded_with: Option<LoadSettings>,
    pub sample: SampleSettings,
    pub status: Status,
    /// The conversation; a reply being made is in `reply`.
    pub messages: Vec<ChatMessage>,
    pub reply: String,
    /// The message box.
    pub input: String,
    pub error: Option<ShownError>,
    pub info: Option<LoadedInfo>,
    pub last: Option<Finished>,
    /// Replies finished (stopped ones included), for tests and the script.
    pub replies_done: usize,
    /// Whether the last reply was stopped by the user.
    pub last_stopped: bool,
    pub kv_len: usize,
    pub throughput: Throughput,
    since: Instant,
    /// The memory plan of the settings, before loading (`plan.rs`).
    plan: crate::plan::PlanView,
    /// The settings of the model loaded before the load in progress (restored if it fails).
    previous: Option<LoadSettings>,
}

impl TernApp {
    /// An app with its engine thread; `ctx` is woken by every engine event. Starts loading
    /// `load` at once.
    pub fn new(ctx: &egui::Context, load: LoadSettings) -> Result<Self, AppError> {
        let c = ctx.clone();
        let worker = Worker::spawn(move || c.request_repaint())?;
        let mut app = Self {
            worker: Some(worker),
            load,
            loaded_with: None,
            sample: SampleSettings::default(),
            status: Status::NoModel,
            messages: Vec::new(),
            reply: String::new(),
            input: String::new(),
            error: None,
            info: None,
            last: None,
            replies_done: 0,
            last_stopped: false,
            kv_len: 0,
            throughput: Throughput::default(),
            since: Instant::now(),
            plan: crate::plan::PlanView::default(),
            previous: None,
        };
        app.start_load();
        Ok(app)
    }

    fn command(&mut self, c: Command) {
        let alive = self.worker.as_ref().is_some_and(|w| w.send(c));
        if !alive {
            self.error = Some(ShownError {
                kind: "The engine stopped".into(),
                message: "the engine thread has ended".into(),
                detail: "engine thread".into(),
            });
        }
    }

    /// (Re)load the model with the current load settings. A new model starts a new
    /// conversation; a load that fails keeps the model (and the conversation) there was.
    pub fn start_load(&mut self) {
        if matches!(self.status, Status::Generating { .. }) {
            self.stop();
        }
        self.error = None;
        self.reply.clear();
        self.previous = self.loaded_with.replace(self.load.clone());
        self.status = Status::Loading {
            stage: "starting".into(),
            pack: None,
        };
        self.since = Instant::now();
        let req = self.load.request();
        self.command(Command::Load(req));
    }

    /// The native file dialog's answer (`Browse…`): a file picked loads it; a cancelled dialog
    /// (or a desktop without a file-dialog service) changes nothing.
    pub fn open_picked(&mut self, picked: Option<std::path::PathBuf>) {
        if let Some(p) = picked {
            self.load.path = p.display().to_string();
            self.start_load();
        }
    }

    /// Send the message box as the user's next message.
    pub fn send(&mut self) {
        let text = self.input.trim().to_string();
        if text.is_empty() || self.status != Status::Ready {
            return;
        }
        self.input.clear();
        self.error = None;
        self.messages.push(ChatMessage::new("user", text));
        self.reply.clear();
        self.status = Status::Generating { prefill: None };
        self.since = Instant::now();
        self.throughput.begin_run();
        let req = SendRequest {
            messages: self.messages.clone(),
            sampling: self.sample.params(),
            max_tokens: self.sample.max_tokens,
        };
        self.command(Command::Send(req));
    }

    /// Stop the reply being made.
    pub fn stop(&mut self) {
        if let Some(w) = &self.worker {
            w.stop();
        }
    }

    /// Forget the conversation (the model stays loaded).
    pub fn new_chat(&mut self) {
        if self.status != Status::Ready {
            return;
        }
        self.messages.clear();
        self.reply.clear();
        self.kv_len = 0;
        self.command(Command::Reset);
    }

    /// Stop what runs and join the engine thread (also done on drop).
    pub fn shutdown(&mut self) {
        self.worker = None;
    }

    /// Apply the engine's events.
    pub fn poll(&mut self) {
        let (events, alive) = match &self.worker {
            Some(w) => (w.poll(), w.is_alive()),
            None => return,
        };
        for e in events {
            self.apply(e);
        }
        if !alive && self.status != Status::NoModel {
            self.status = Status::NoModel;
            self.error = Some(ShownError {
                kind: "The engine stopped".into(),
                message: "the engine thread stopped unexpectedly (a bug in tern): restart the app"
                    .into(),
                detail: "engine thread".into(),
            });
        }
    }

    fn apply(&mut self, e: Event) {
        match e {
            Event::Stage(s) => {
                if let Status::Loading { stage, .. } = &mut self.status {
                    *stage = s;
                }
            }
            Event::PackProgress { done, total } => {
                if let Status::Loading { pack, .. } = &mut self.status {
                    *pack = Some((done, total));
                }
            }
            Event::Loaded(info) => {
                // A new model: a new conversation, its recommended sampling.
                self.status = Status::Ready;
                self.kv_len = 0;
                self.last = None;
                self.messages.clear();
                self.reply.clear();
                self.throughput = Throughput::default();
                self.sample.set_recommended(&info.sampling);
                self.info = Some(*info);
            }
            Event::LoadFailed { error, kept } => {
                self.error = Some((&error).into());
                if kept && self.info.is_some() {
                    // The model loaded before stays, with a fresh session (the conversation is
                    // run again on the next message).
                    self.status = Status::Ready;
                    self.kv_len = 0;
                    self.loaded_with = self.previous.take();
                    if let Some(e) = &mut self.error {
                        if let Some(i) = &self.info {
                            e.message.push_str(&format!(
                                "\n{} is still loaded; the conversation is kept.",
                                i.model_name
                            ));
                        }
                    }
                } else {
                    self.status = Status::NoModel;
                    self.info = None;
                }
            }
            Event::Prefill { done, total } => {
                if let Status::Generating { prefill } = &mut self.status {
                    *prefill = (done < total).then_some((done, total));
                }
            }
            Event::Throughput {
                phase,
                tokens_per_sec,
            } => self.throughput.push(phase, tokens_per_sec),
            // A reply that ends after a reload was asked for belongs to the old model.
            Event::Piece(_) | Event::Finished(_)
                if !matches!(self.status, Status::Generating { .. }) => {}
            Event::Piece(p) => self.reply.push_str(&p),
            Event::Finished(f) => {
                self.last_stopped = f.stop.is_none();
                let reply = std::mem::take(&mut self.reply);
                if self.last_stopped && reply.is_empty() {
                    // Stopped before any text: the message goes back to the box.
                    if let Some(m) = self.messages.pop() {
                        self.input = m.content;
                    }
                } else {
                    self.messages.push(ChatMessage::new("assistant", reply));
                }
                self.kv_len = f.kv_len;
                self.last = Some(*f);
                self.replies_done += 1;
                self.status = Status::Ready;
            }
            Event::Failed(e) => {
                self.error = Some((&e).into());
                self.reply.clear();
                if let Some(m) = self.messages.pop() {
                    self.input = m.content;
                }
                if matches!(self.status, Status::Generating { .. }) {
                    self.status = Status::Ready;
                }
            }
        }
    }

    /// The whole window (also what the headless UI test drives).
    pub fn show(&mut self, ui: &mut egui::Ui) {
        self.poll();
        egui::Panel::top("model_bar").show(ui, |ui| self.model_bar(ui));
        egui::Panel::left("settings")
            .default_size(250.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| self.settings_ui(ui));
            });
        egui::Panel::right("live")
            .default_size(420.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| {
                    live_ui(
                        ui,
                        &Live {
                            info: self.info.as_ref(),
                            last: self.last.as_ref(),
                            kv_len: self.kv_len,
                            throughput: &self.throughput,
                        },
                    )
                });
            });
        egui::Panel::bottom("input").show(ui, |ui| self.input_bar(ui));
        egui::CentralPanel::default().show(ui, |ui| self.chat_ui(ui));
        if matches!(self.status, Status::Loading { .. }) {
            // The elapsed time moves between engine events. (A reply repaints on its events
            // only: on a software renderer every frame takes CPU from the engine.)
            ui.ctx()
                .request_repaint_after(std::time::Duration::from_millis(250));
        }
    }

    fn model_bar(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            let label = ui.label("Model file");
            ui.add(
                egui::TextEdit::singleline(&mut self.load.path)
                    .hint_text("default: SmolLM2-135M-Instruct (.tern or .gguf)")
                    .desired_width(420.0),
            )
            .labelled_by(label.id);
            let busy = matches!(self.status, Status::Loading { .. });
            if ui.add_enabled(!busy, egui::Button::new("Open")).clicked() {
                self.start_load();
            }
            if ui
                .add_enabled(!busy, egui::Button::new("Browse…"))
                .on_hover_text("choose a .tern or .gguf file in the system's file dialog")
                .clicked()
            {
                // The system dialog (XDG desktop portal on Linux, the native one on macOS and
                // Windows); modal: the window waits for it.
                let picked = rfd::FileDialog::new()
                    .set_title("Open a model")
                    .add_filter("models (.tern, .gguf)", &["tern", "gguf"])
                    .pick_file();
                if picked.is_none() {
                    log::info!("file dialog: nothing picked (cancelled, or no dialog service)");
                }
                self.open_picked(picked);
            }
            ui.separator();
            match &self.status {
                Status::NoModel => {
                    ui.label("no model");
                }
                Status::Loading { stage, pack } => {
                    ui.spinner();
                    ui.label(format!(
                        "{stage} … {:.1} s",
                        self.since.elapsed().as_secs_f64()
                    ));
                    if let Some((d, t)) = pack {
                        ui.add(
                            egui::ProgressBar::new(*d as f32 / (*t).max(1) as f32)
                                .desired_width(160.0)
                                .text(format!("{d}/{t} tensors")),
                        );
                    }
                }
                Status::Ready | Status::Generating { .. } => {
                    if let Some(i) = &self.info {
                        ui.label(format!(
                            "{} on {} (loaded in {:.2} s)",
                            i.model_name, i.report.device, i.load_secs
                        ));
                    }
                }
            }
        });
    }

    fn settings_ui(&mut self, ui: &mut egui::Ui) {
        ui.heading("Settings");
        egui::CollapsingHeader::new("Model (applied on reload)")
            .default_open(true)
            .show(ui, |ui| {
                let changed = self.loaded_with.as_ref() != Some(&self.load)
                    && !matches!(self.status, Status::Loading { .. });
                if load_ui(ui, &mut self.load, changed) {
                    self.start_load();
                }
            });
        crate::plan::plan_ui(ui, &mut self.plan, &self.load);
        egui::CollapsingHeader::new("Sampling (next reply)")
            .default_open(true)
            .show(ui, |ui| sample_ui(ui, &mut self.sample));
    }

    fn input_bar(&mut self, ui: &mut egui::Ui) {
        ui.add_space(4.0);
        ui.horizontal(|ui| {
            let label = ui.label("Message");
            let width = ui.available_width() - 230.0;
            // A long message scrolls inside the box instead of pushing the buttons away.
            let edit = egui::ScrollArea::vertical()
                .max_height(90.0)
                .show(ui, |ui| {
                    ui.add(
                        egui::TextEdit::multiline(&mut self.input)
                            .desired_rows(2)
                            .desired_width(width)
                            .hint_text("Ask something (Ctrl+Enter sends)"),
                    )
                    .labelled_by(label.id)
                })
                .inner;
            let ready = self.status == Status::Ready;
            let generating = matches!(self.status, Status::Generating { .. });
            let send_key = edit.has_focus()
                && ui.input(|i| i.key_pressed(egui::Key::Enter) && i.modifiers.command);
            if ui.add_enabled(ready, egui::Button::new("Send")).clicked() || send_key {
                self.send();
            }
            if ui
                .add_enabled(generating, egui::Button::new("Stop"))
                .clicked()
            {
                self.stop();
            }
            if ui
                .add_enabled(ready, egui::Button::new("New chat"))
                .clicked()
            {
                self.new_chat();
            }
        });
        ui.add_space(4.0);
    }

    fn chat_ui(&mut self, ui: &mut egui::Ui) {
        if let Some(e) = &self.error {
            egui::Frame::group(ui.style())
                .stroke(egui::Stroke::new(1.5, ui.visuals().error_fg_color))
                .show(ui, |ui| {
                    ui.colored_label(ui.visuals().error_fg_color, format!("Error: {}", e.kind))
                        .on_hover_text(&e.detail);
                    ui.label(&e.message);
                });
            ui.add_space(6.0);
        }
        if let Status::Generating {
            prefill: Some((d, t)),
        } = self.status
        {
            ui.add(
                egui::ProgressBar::new(d as f32 / t.max(1) as f32)
                    .text(format!("prefill {d}/{t} tokens")),
            );
        }
        egui::ScrollArea::vertical()
            .stick_to_bottom(true)
            .auto_shrink([false, false])
            .show(ui, |ui| {
                for m in &self.messages {
                    message_ui(ui, &m.role, &m.content);
                }
                if let Status::Generating { .. } = self.status {
                    let text = if self.reply.is_empty() {
                        "…".to_string()
                    } else {
                        self.reply.clone()
                    };
                    message_ui(ui, "assistant", &text);
                } else if self.last_stopped && !self.messages.is_empty() {
                    ui.weak("(stopped)");
                }
            });
    }
}

fn message_ui(ui: &mut egui::Ui, role: &str, text: &str) {
    let (who, fill) = if role == "user" {
        ("You", ui.visuals().faint_bg_color)
    } else {
        ("Model", ui.visuals().extreme_bg_color)
    };
    egui::Frame::new()
        .fill(fill)
        .inner_margin(6.0)
        .corner_radius(4.0)
        .show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.strong(who);
            ui.label(text);
        });
    ui.add_space(4.0);
}

impl eframe::App for TernApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }

    fn on_exit(&mut self) {
        self.shutdown();
    }
}
