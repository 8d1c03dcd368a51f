//! (tern patch) Memory, step and wall-clock limits for one rendering.
//!
//! Fuel bounds the instructions a template executes, not what one instruction costs: string
//! doubling (`s ~ s`), repetition, `indent(10**12)`, `batch`, `slice`, printf widths, a lazily
//! repeated list joined or listed, each allocates or iterates far beyond the template's size in
//! one instruction. With [`with_limits`] active on the rendering thread every such cost is
//! charged to one budget of bytes: every string a value is made of is charged when created and
//! when formatted, every step of an iteration costs [`STEP_BYTES`], the sizes of lazily repeated
//! or concatenated sequences are capped at [`Limits::max_items`], and the operations that size an
//! output from an argument reserve that size before allocating. Past the budget (or the
//! deadline) the operation is refused or cut short and the next instruction fails the rendering;
//! [`with_limits`] returns what was exceeded. Outside [`with_limits`] nothing is charged.

use std::cell::Cell;
use std::time::Instant;

use crate::error::{Error, ErrorKind};

/// Bytes one iteration step is charged (about the size of the value it may materialize).
pub const STEP_BYTES: u64 = 16;

/// The limits of one rendering.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of strings created or formatted plus [`STEP_BYTES`] per iteration step.
    pub max_bytes: u64,
    /// Largest length of a lazily repeated, concatenated or zipped sequence.
    pub max_items: u64,
    /// Wall-clock deadline.
    pub deadline: Option<Instant>,
}

/// What a rendering exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// The byte budget ([`Limits::max_bytes`]).
    Memory,
    /// A sequence longer than [`Limits::max_items`].
    Items,
    /// The deadline.
    Time,
}

#[derive(Clone, Copy)]
struct State {
    limits: Limits,
    used: u64,
    ticks: u32,
    hit: Option<Exceeded>,
}

thread_local! {
    static STATE: Cell<Option<State>> = const { Cell::new(None) };
}

struct Restore(Option<State>);

impl Drop for Restore {
    fn drop(&mut self) {
        STATE.with(|s| s.set(self.0));
    }
}

/// Runs `f` (a rendering) on this thread under `limits`; returns its result and what it
/// exceeded, if anything (then the rendering failed or must be treated as failed).
pub fn with_limits<R>(limits: Limits, f: impl FnOnce() -> R) -> (R, Option<Exceeded>) {
    let prev = STATE.with(|s| {
        s.replace(Some(State {
            limits,
            used: 0,
            ticks: 0,
            hit: None,
        }))
    });
    let restore = Restore(prev);
    let r = f();
    let hit = STATE.with(|s| s.get().and_then(|st| st.hit));
    drop(restore);
    (r, hit)
}

fn limit_error(e: Exceeded) -> Error {
    let what = match e {
        Exceeded::Memory => "memory",
        Exceeded::Items => "sequence length",
        Exceeded::Time => "time",
    };
    Error::new(
        ErrorKind::InvalidOperation,
        format!("template {what} limit exceeded"),
    )
}

fn update<T>(f: impl FnOnce(&mut State) -> T) -> Option<T> {
    STATE.with(|s| {
        let mut st = s.get()?;
        let r = f(&mut st);
        s.set(Some(st));
        Some(r)
    })
}

fn add(st: &mut State, bytes: u64) -> bool {
    if st.hit.is_some() {
        return false;
    }
    let used = st.used.saturating_add(bytes);
    if used > st.limits.max_bytes {
        st.hit = Some(Exceeded::Memory);
        return false;
    }
    st.used = used;
    true
}

/// Reserves `bytes` before an operation allocates them; an error (and the rendering fails) when
/// they exceed what is left.
pub fn reserve(bytes: u64) -> Result<(), Error> {
    match update(|st| add(st, bytes).then_some(()).ok_or(st.hit)) {
        None | Some(Ok(())) => Ok(()),
        Some(Err(hit)) => Err(limit_error(hit.unwrap_or(Exceeded::Memory))),
    }
}

/// Like [`reserve`] for callers that cannot return an error (`Display`, `From`): false when the
/// budget is exhausted (the caller skips the work; the next instruction fails the rendering).
pub fn try_charge(bytes: u64) -> bool {
    update(|st| add(st, bytes)).unwrap_or(true)
}

/// Refuses a lazily built sequence longer than [`Limits::max_items`].
pub fn check_items(n: u128) -> Result<(), Error> {
    let bad = update(|st| {
        if n > u128::from(st.limits.max_items) {
            st.hit = Some(Exceeded::Items);
            true
        } else {
            false
        }
    });
    if bad == Some(true) {
        return Err(limit_error(Exceeded::Items));
    }
    Ok(())
}

fn tick_state(st: &mut State, bytes: u64) -> bool {
    if !add(st, bytes) {
        return false;
    }
    st.ticks = st.ticks.wrapping_add(1);
    if st.ticks % 1024 == 0 {
        if let Some(d) = st.limits.deadline {
            if Instant::now() > d {
                st.hit = Some(Exceeded::Time);
                return false;
            }
        }
    }
    true
}

/// One iteration step: false once a limit is exceeded (the iterator ends early and the next
/// instruction fails the rendering).
pub(crate) fn step() -> bool {
    update(|st| tick_state(st, STEP_BYTES)).unwrap_or(true)
}

/// Called before every instruction: fails once a limit was exceeded, checks the deadline.
pub(crate) fn check() -> Result<(), Error> {
    match update(|st| tick_state(st, 0).then_some(()).ok_or(st.hit)) {
        None | Some(Ok(())) => Ok(()),
        Some(Err(hit)) => Err(limit_error(hit.unwrap_or(Exceeded::Memory))),
    }
}

/// A byte vector that charges what is written to it ([`reserve`]); a write past the budget fails.
pub(crate) struct ChargedVec(pub(crate) Vec<u8>);

impl std::io::Write for ChargedVec {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !try_charge(buf.len() as u64) {
            return Err(std::io::Error::other("template memory limit exceeded"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
