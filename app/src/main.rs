//! `tern-app`: the desktop demo. `tern-app [MODEL] [--device auto|gpu|cpu] [--ctx N]
//! [--max-tokens N] [--script PROMPT --screenshot OUT.png]`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eframe::egui;
use tern_app::script::{Script, Scripted};
use tern_app::{LoadSettings, TernApp};
use tern_engine::Device;

const USAGE: &str =
    "usage: tern-app [MODEL.tern|MODEL.gguf] [--device auto|gpu|cpu] [--ctx N] [--max-tokens N]
                [--script PROMPT --screenshot OUT.png [--timeout SECS]]
  MODEL         default: SmolLM2-135M-Instruct (fetched and packed on first use)
  --script      load, send PROMPT, wait for the reply, save a screenshot of the window, exit";

struct Args {
    load: LoadSettings,
    max_tokens: Option<usize>,
    script: Option<Script>,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut load = LoadSettings::default();
    let (mut prompt, mut shot, mut timeout, mut max_tokens) = (None, None, 600u64, None);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--device" => {
                load.device = match val("--device")?.as_str() {
                    "cpu" => Device::Cpu,
                    "gpu" => Device::Gpu,
                    "auto" => Device::Auto,
                    o => return Err(format!("--device `{o}`: expected cpu, gpu or auto")),
                }
            }
            "--ctx" => {
                load.n_ctx = val("--ctx")?
                    .parse()
                    .map_err(|_| "--ctx: not a number".to_string())?
            }
            "--max-tokens" => {
                max_tokens = Some(
                    val("--max-tokens")?
                        .parse()
                        .map_err(|_| "--max-tokens: not a number".to_string())?,
                )
            }
            "--script" => prompt = Some(val("--script")?),
            "--screenshot" => shot = Some(PathBuf::from(val("--screenshot")?)),
            "--timeout" => {
                timeout = val("--timeout")?
                    .parse()
                    .map_err(|_| "--timeout: not a number".to_string())?
            }
            s if s.starts_with('-') => return Err(format!("unknown flag {s}")),
            s => load.path = s.to_string(),
        }
    }
    let script = match (prompt, shot) {
        (Some(prompt), Some(screenshot)) => Some(Script {
            prompt,
            screenshot,
            timeout: Duration::from_secs(timeout),
        }),
        (None, None) => None,
        _ => return Err("--script and --screenshot go together".into()),
    };
    Ok(Args {
        load,
        max_tokens,
        script,
    })
}

fn main() -> ExitCode {
    // As the `tern` CLI does (see cli/src/main.rs): Mesa's device-select layer makes libwayland
    // print "XDG_RUNTIME_DIR is invalid" on machines without a desktop session whenever GPUs are
    // listed; tern picks its adapter itself. Set before any thread exists; a user's value wins.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        std::env::set_var("NODEVICE_SELECT", "1");
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("tern-app: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("tern")
            .with_inner_size([1280.0, 800.0]),
        ..Default::default()
    };
    let outcome = Arc::new(Mutex::new(None));
    let scripted = args.script.is_some();
    let out = outcome.clone();
    let r = eframe::run_native(
        "tern",
        options,
        Box::new(move |cc| {
            let mut app = TernApp::new(&cc.egui_ctx, args.load)?;
            if let Some(n) = args.max_tokens {
                app.sample.max_tokens = n;
            }
            Ok(match args.script {
                Some(s) => Box::new(Scripted::new(app, s, out)) as Box<dyn eframe::App>,
                None => Box::new(app),
            })
        }),
    );
    if let Err(e) = r {
        eprintln!("tern-app: {e}");
        return ExitCode::FAILURE;
    }
    if !scripted {
        return ExitCode::SUCCESS;
    }
    let result = outcome.lock().ok().and_then(|mut o| o.take());
    match result {
        Some(Ok(reply)) => {
            println!("{reply}");
            ExitCode::SUCCESS
        }
        Some(Err(e)) => {
            eprintln!("tern-app --script: {e}");
            ExitCode::FAILURE
        }
        None => {
            eprintln!("tern-app --script: the window closed before the script ended");
            ExitCode::FAILURE
        }
    }
}
