// Swift wrapper over tern's C ABI (include/tern.h, module TernFFI). Classes free their handles on
// deinit; generation is an AsyncThrowingStream whose consumer's Task cancellation calls
// tern_cancel. Mirrors tests/c/test_tern.c; see ios/README.md for what has been verified where.
import Foundation
import TernFFI

/// A failed tern call: the C `tern_status` number and `tern_last_error()`'s message.
public struct TernError: Error, CustomStringConvertible {
    public let status: UInt32
    public let message: String
    public var description: String { "tern status \(status): \(message)" }

    /// Read on the thread that made the failed call (the last error is thread-local).
    init(_ status: tern_status) {
        self.status = status.rawValue
        self.message = String(cString: tern_last_error())
    }

    init(status: UInt32, message: String) {
        self.status = status
        self.message = message
    }

    public static let invalidArgument = TERN_INVALID_ARGUMENT.rawValue
    public static let cancelled = TERN_CANCELLED.rawValue
    public static let io = TERN_IO.rawValue
    public static let corruptFile = TERN_CORRUPT_FILE.rawValue
    public static let unsupported = TERN_UNSUPPORTED.rawValue
    public static let outOfMemory = TERN_OUT_OF_MEMORY.rawValue
    public static let contextFull = TERN_CONTEXT_FULL.rawValue
    public static let template = TERN_TEMPLATE.rawValue
    public static let deviceLost = TERN_DEVICE_LOST.rawValue
    /// A saved session from another model, KV format, context size or device.
    public static let stateMismatch = TERN_STATE_MISMATCH.rawValue
}

public enum Tern {
    /// The C ABI version this wrapper was written for.
    public static let abiVersion: UInt32 = 1

    /// Checks, once per process, that the linked library implements `abiVersion`.
    static func checkABI() throws {
        let linked = tern_abi_version()
        guard linked == abiVersion, linked == UInt32(TERN_ABI_VERSION) else {
            throw TernError(
                status: TERN_UNSUPPORTED.rawValue,
                message: "libtern implements C ABI \(linked), this wrapper needs \(abiVersion)")
        }
    }

    public static var version: String { String(cString: tern_version()) }
}

@inline(__always)
func check(_ s: tern_status) throws {
    if s != TERN_OK { throw TernError(s) }
}

/// `tern_model_options.device` (`TERN_DEVICE_*`).
public enum Device: UInt32 {
    /// A hardware GPU when there is one and the model has kernels for it, else the CPU.
    case auto = 0
    case cpu = 1
    /// The GPU engine (software adapters count); `TERN_UNSUPPORTED` without one.
    case gpu = 2
}

/// `tern_session_options.kv_format` (`TERN_KV_*`): how the KV cache stores each value.
public enum KvFormat: UInt32, CaseIterable {
    case f32 = 0, f16 = 1, q8 = 2
    /// KIVI 4/3/2-bit (group `kiviGroup`, window `kiviWindow`).
    case q4 = 3, q3 = 4, q2 = 5
    /// a4.8-style absmax 4/3-bit.
    case a4 = 6, a3 = 7
    /// Rotated KIVI 4/3/2-bit (per-head Walsh–Hadamard rotation first; window `kiviWindow`).
    case q4r = 8, q3r = 9, q2r = 10
}

/// MiniCache cross-layer merging of the KV cache (`TERN_MINICACHE_*`).
public enum MiniCache: Equatable {
    case off
    /// The measured defaults for the model's depth.
    case on
    /// Pairs from `startLayer` on, SLERP `t` in [0, 1], retention threshold `gamma` in [0, 1].
    case custom(startLayer: UInt32, t: Float, gamma: Float)
}

/// How a `Session` is made (`tern_session_options`; checked by the engine, which throws
/// `TERN_INVALID_ARGUMENT` naming a bad value).
public struct SessionOptions {
    /// 0 = the model's training context, capped at 4096.
    public var contextSize: UInt32 = 0
    /// nil = `TERN_KV_DEFAULT`: the library's default (`.q8`; `.f32` with llama.cpp numerics).
    public var kvFormat: KvFormat? = nil
    public var miniCache: MiniCache = .off
    /// KIVI group size and window; 0 = 32 / 128.
    public var kiviGroup: UInt32 = 0
    public var kiviWindow: UInt32 = 0
    /// llama.cpp's CPU numerics (a CPU mode: `TERN_INVALID_ARGUMENT` on a GPU model).
    public var llamaCppNumerics = false
    public init(contextSize: UInt32 = 0, kvFormat: KvFormat? = nil, miniCache: MiniCache = .off,
                kiviGroup: UInt32 = 0, kiviWindow: UInt32 = 0, llamaCppNumerics: Bool = false) {
        self.contextSize = contextSize
        self.kvFormat = kvFormat
        self.miniCache = miniCache
        self.kiviGroup = kiviGroup
        self.kiviWindow = kiviWindow
        self.llamaCppNumerics = llamaCppNumerics
    }
}

/// What a session really uses (`tern_session_get_report`).
public struct SessionReport {
    /// `.cpu` or `.gpu` (auto resolved).
    public let device: Device
    public let contextSize: UInt32
    public let kvFormat: KvFormat
    public let kiviGroup: UInt32
    public let kiviWindow: UInt32
    /// `.off` or `.custom` with the values used (`.on` resolved).
    public let miniCache: MiniCache
    public let llamaCppNumerics: Bool
    /// The model's memory budget in bytes (0 = no cap).
    public let maxMemory: UInt64
    public let kvBytes: UInt64
}

/// A loaded `.tern` model, shareable by sessions and threads. Freed on deinit.
public final class Model: @unchecked Sendable {
    let handle: OpaquePointer

    /// `maxMemory`: bytes the model and its sessions may take (0 = no cap); `useThreads`: split
    /// matrix products over a thread pool (bit-identical results either way).
    /// `cpuThreads`: threads of the CPU backend's pool (0 = one per core; the process's one
    /// pool, sized by the first CPU model: another count later throws `invalidArgument`).
    public init(path: String, device: Device = .auto, useThreads: Bool = true,
                maxMemory: UInt64 = 0, cpuThreads: UInt32 = 0) throws {
        try Tern.checkABI()
        var o = tern_model_options_default()
        o.device = device.rawValue
        o.use_threads = useThreads ? 1 : 0
        o.max_memory = maxMemory
        var lo = tern_load_options_default()
        lo.cpu_threads = cpuThreads
        var out: OpaquePointer?
        try check(tern_model_load_ex(path, &o, &lo, &out))
        handle = out!  // ok: set on TERN_OK
    }

    deinit { tern_model_free(handle) }

    /// What the model is (`tern_model_get_info`, `tern_model_get_string`).
    public func info() throws -> ModelInfo {
        var i = tern_model_info()
        i.struct_size = UInt32(MemoryLayout<tern_model_info>.size)
        try check(tern_model_get_info(handle, &i))
        func string(_ which: Int32) throws -> String? {
            var out: UnsafeMutablePointer<CChar>?
            try check(tern_model_get_string(handle, UInt32(which), &out))
            defer { tern_string_free(out) }
            return out.map { String(cString: $0) }
        }
        return ModelInfo(
            device: Device(rawValue: i.device) ?? .cpu, vocabularySize: i.n_vocab,
            trainingContext: i.n_ctx_train, layers: i.n_layer, bos: i.bos, eos: i.eos, eot: i.eot,
            cpuThreads: i.cpu_threads, weightBytes: i.weight_bytes,
            name: try string(TERN_MODEL_STR_NAME) ?? "",
            architecture: try string(TERN_MODEL_STR_ARCHITECTURE) ?? "",
            chatTemplate: try string(TERN_MODEL_STR_CHAT_TEMPLATE),
            deviceName: try string(TERN_MODEL_STR_DEVICE) ?? "")
    }

    /// Token ids of `text` (`tern_tokenize`).
    public func tokenize(_ text: String, addSpecial: Bool = true, parseSpecial: Bool = true) throws -> [UInt32] {
        var p: UnsafeMutablePointer<UInt32>?
        var n = 0
        try check(tern_tokenize(handle, text, addSpecial ? 1 : 0, parseSpecial ? 1 : 0, &p, &n))
        defer { tern_tokens_free(p, n) }
        return Array(UnsafeBufferPointer(start: p, count: n))
    }

    /// Text of `tokens` (`tern_detokenize`).
    public func detokenize(_ tokens: [UInt32]) throws -> String {
        var out: UnsafeMutablePointer<CChar>?
        try tokens.withUnsafeBufferPointer { b in
            try check(tern_detokenize(handle, b.baseAddress, b.count, &out))
        }
        defer { tern_string_free(out) }
        return String(cString: out!)  // ok: set on TERN_OK
    }

    /// Render a conversation with the app's own Jinja `template` (nil: the model's).
    public func applyChatTemplate(_ messages: [(role: String, content: String)], template: String?,
                                  addGenerationPrompt: Bool = true) throws -> String {
        let strings = messages.flatMap { [strdup($0.role), strdup($0.content)] }
        defer { strings.forEach { free($0) } }
        let msgs = (0..<messages.count).map { i in
            tern_chat_message(role: UnsafePointer(strings[2 * i]), content: UnsafePointer(strings[2 * i + 1]))
        }
        var out: UnsafeMutablePointer<CChar>?
        try check(tern_chat_apply_template(handle, template, msgs, msgs.count,
                                           addGenerationPrompt ? 1 : 0, &out))
        defer { tern_string_free(out) }
        return String(cString: out!)  // ok: set on TERN_OK
    }

    /// Render a conversation with the model's chat template into a prompt for `Session.generate`.
    public func applyChatTemplate(_ messages: [(role: String, content: String)],
                                  addGenerationPrompt: Bool = true) throws -> String {
        let strings = messages.flatMap { [strdup($0.role), strdup($0.content)] }
        defer { strings.forEach { free($0) } }
        let msgs = (0..<messages.count).map { i in
            tern_chat_message(role: UnsafePointer(strings[2 * i]), content: UnsafePointer(strings[2 * i + 1]))
        }
        var out: UnsafeMutablePointer<CChar>?
        try check(tern_chat_apply(handle, msgs, msgs.count, addGenerationPrompt ? 1 : 0, &out))
        defer { tern_string_free(out) }
        return String(cString: out!)  // ok: set on TERN_OK
    }
}

/// What a model is (`Model.info()`); token ids are -1 where the model has none.
public struct ModelInfo {
    public let device: Device
    public let vocabularySize: UInt32
    public let trainingContext: UInt32
    public let layers: UInt32
    public let bos: Int32
    public let eos: Int32
    public let eot: Int32
    public let cpuThreads: UInt32
    public let weightBytes: UInt64
    public let name: String
    public let architecture: String
    public let chatTemplate: String?
    public let deviceName: String
}

/// Shared between a generation thread and the stream's termination handler.
private final class Pieces: @unchecked Sendable {
    let continuation: AsyncThrowingStream<String, Error>.Continuation
    private let lock = NSLock()
    private var _stopped = false
    var stopped: Bool {
        get { lock.lock(); defer { lock.unlock() }; return _stopped }
        set { lock.lock(); _stopped = newValue; lock.unlock() }
    }
    init(_ c: AsyncThrowingStream<String, Error>.Continuation) { continuation = c }
}

/// One conversation (a KV cache) on a model. One call at a time; `cancel()` from anywhere.
public final class Session: @unchecked Sendable {
    let handle: OpaquePointer
    public let model: Model
    /// Held by a generation thread for its whole call: a generation started right after another
    /// was stopped (a `break` out of its loop) waits for it to end instead of getting `TERN_BUSY`.
    private let generating = NSLock()

    /// `contextSize` 0 = the model's training context.
    public convenience init(model: Model, contextSize: UInt32 = 0) throws {
        try self.init(model: model, options: SessionOptions(contextSize: contextSize))
    }

    public init(model: Model, options: SessionOptions) throws {
        var o = tern_session_options_default()
        o.n_ctx = options.contextSize
        o.kv_format = options.kvFormat?.rawValue ?? 0xFFFF_FFFF  // TERN_KV_DEFAULT
        switch options.miniCache {
        case .off: o.minicache = UInt32(TERN_MINICACHE_OFF)
        case .on: o.minicache = UInt32(TERN_MINICACHE_ON)
        case let .custom(startLayer, t, gamma):
            o.minicache = UInt32(TERN_MINICACHE_CUSTOM)
            o.minicache_start_layer = startLayer
            o.minicache_t = t
            o.minicache_gamma = gamma
        }
        o.kivi_group = options.kiviGroup
        o.kivi_window = options.kiviWindow
        o.llama_cpp_numerics = options.llamaCppNumerics ? 1 : 0
        var out: OpaquePointer?
        try check(tern_session_new(model.handle, &o, &out))
        handle = out!  // ok: set on TERN_OK
        self.model = model
    }

    /// What the session really uses: device, context, KV cache, numerics, budget.
    public func report() throws -> SessionReport {
        var r = tern_session_report()
        r.struct_size = UInt32(MemoryLayout<tern_session_report>.size)
        try check(tern_session_get_report(handle, &r))
        return SessionReport(
            device: Device(rawValue: r.device) ?? .cpu,
            contextSize: r.n_ctx,
            kvFormat: KvFormat(rawValue: r.kv_format) ?? .f32,
            kiviGroup: r.kivi_group,
            kiviWindow: r.kivi_window,
            miniCache: r.minicache == UInt32(TERN_MINICACHE_OFF)
                ? .off
                : .custom(startLayer: r.minicache_start_layer, t: r.minicache_t, gamma: r.minicache_gamma),
            llamaCppNumerics: r.llama_cpp_numerics != 0,
            maxMemory: r.max_memory,
            kvBytes: r.kv_bytes)
    }

    deinit { tern_session_free(handle) }

    /// Generate after `prompt` (the whole context), greedily by default. Cancelling the consuming
    /// Task (or breaking out of the loop) cancels the native generation.
    /// `stop`: strings that end generation (the text before one is yielded); `stopTokens`: ids
    /// that end it.
    public func generate(_ prompt: String, sampling: tern_sampling = tern_sampling_default(),
                         maxTokens: Int32 = 256, stop: [String] = [],
                         stopTokens: [UInt32] = []) -> AsyncThrowingStream<String, Error> {
        AsyncThrowingStream { continuation in
            let pieces = Pieces(continuation)
            continuation.onTermination = { termination in
                if case .cancelled = termination {
                    pieces.stopped = true
                    tern_cancel(self.handle)
                }
            }
            let thread = Thread {
                self.generating.lock()
                defer { self.generating.unlock() }
                var params = sampling
                let box = Unmanaged.passRetained(pieces)
                let stopC = stop.map { UnsafePointer(strdup($0)) }
                defer { stopC.forEach { free(UnsafeMutablePointer(mutating: $0)) } }
                var go = tern_generate_options_default()
                go.max_tokens = maxTokens
                let status = stopC.withUnsafeBufferPointer { sb in
                    stopTokens.withUnsafeBufferPointer { tb in
                        go.stop_strings = sb.count > 0 ? sb.baseAddress : nil
                        go.n_stop_strings = sb.count
                        go.stop_tokens = tb.count > 0 ? tb.baseAddress : nil
                        go.n_stop_tokens = tb.count
                        return tern_generate_ex(self.handle, prompt, &params, &go, { piece, len, ud in
                    let pieces = Unmanaged<Pieces>.fromOpaque(ud!).takeUnretainedValue()
                    let bytes = UnsafeRawBufferPointer(start: piece, count: len)
                    pieces.continuation.yield(String(decoding: bytes, as: UTF8.self))
                    return pieces.stopped ? 1 : 0
                }, box.toOpaque())
                    }
                }
                box.release()
                if status == TERN_OK {
                    continuation.finish()
                } else {
                    continuation.finish(throwing: TernError(status))
                }
            }
            thread.start()
        }
    }

    /// Total natural-log probability of `text`'s tokens after the first, and how many were scored.
    public func score(_ text: String) throws -> (totalLogprob: Double, tokens: Int) {
        var total = 0.0
        var n = 0
        try check(tern_score(handle, text, &total, &n))
        return (total, n)
    }

    public func reset() throws { try check(tern_session_reset(handle)) }

    /// The session's tokens and KV cache as bytes (`tern_session_save`): restore them into a
    /// session of the same model, options and device to continue exactly from here.
    public func save() throws -> [UInt8] {
        var p: UnsafeMutablePointer<UInt8>?
        var n = 0
        try check(tern_session_save(handle, &p, &n))
        defer { tern_bytes_free(p, n) }
        return Array(UnsafeBufferPointer(start: p, count: n))
    }

    /// Make this session hold a state from `save()` (`tern_session_restore`); throws
    /// `stateMismatch`, `corruptFile` or `unsupported` (and leaves the session as it was).
    public func restore(_ state: [UInt8]) throws {
        try state.withUnsafeBufferPointer { b in
            try check(tern_session_restore(handle, b.baseAddress, b.count))
        }
    }

    /// Make a running generation or score end with `TERN_CANCELLED`. Any thread.
    public func cancel() { tern_cancel(handle) }
}
