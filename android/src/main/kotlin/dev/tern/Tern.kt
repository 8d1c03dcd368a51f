package dev.tern

/**
 * Loads the native library (`libtern.so`) once and checks that it implements the C ABI version
 * this wrapper was written for. Every class here calls [Tern.ensureLoaded] first.
 */
object Tern {
    /** The `TERN_ABI_VERSION` of `include/tern.h` that this wrapper matches. */
    const val ABI_VERSION = 1

    @Volatile private var loaded = false

    @JvmStatic
    fun ensureLoaded() {
        if (loaded) return
        synchronized(this) {
            if (loaded) return
            System.loadLibrary("tern")
            val abi = Native.abiVersion()
            if (abi != ABI_VERSION) {
                throw UnsatisfiedLinkError(
                    "libtern implements C ABI version $abi, this wrapper needs $ABI_VERSION: " +
                        "use the libtern built from the same tern release as this library"
                )
            }
            loaded = true
        }
    }

    /** tern's version, e.g. "0.1.0". */
    @JvmStatic
    fun version(): String {
        ensureLoaded()
        return Native.version()
    }

    /** Models and sessions made and not yet closed in this process (a leak check). */
    @JvmStatic
    fun liveHandles(): Long {
        ensureLoaded()
        return Native.liveHandles()
    }
}

/** A failed tern call: [status] is the C ABI's `tern_status` number (see the constants). */
class TernException(val status: Int, message: String) : Exception(message) {
    companion object {
        const val INVALID_ARGUMENT = 1
        const val NULL_ARGUMENT = 2
        const val IO = 3
        const val CORRUPT_FILE = 4
        const val UNSUPPORTED = 5
        const val OUT_OF_MEMORY = 6
        const val CONTEXT_FULL = 7
        const val CANCELLED = 8
        const val INTERNAL = 9
        const val BUSY = 10
        const val NO_TOKENIZER = 11
        const val TEMPLATE = 12
        const val NUMERIC = 13
        /** The GPU was lost: close the model and its sessions, load it again (CPU works). */
        const val DEVICE_LOST = 14
        /** A saved session state from another model, KV format, context or device. */
        const val STATE_MISMATCH = 15
    }
}

/** Sampling parameters; the defaults are greedy (`tern_sampling_default()`). */
data class Sampling(
    val temperature: Float = 0f,
    val topK: Int = 0,
    val topP: Float = 1f,
    val minP: Float = 0f,
    val repeatPenalty: Float = 1f,
    val repeatLastN: Int = 64,
    val seed: Long = 0
)

/**
 * When generation stops besides `maxTokens` and the model's end tokens
 * (`tern_generate_options`): a stop string ends it (the text before it is passed on), a stop
 * token ends it (not passed on).
 */
data class Stop(val strings: List<String> = emptyList(), val tokens: List<Int> = emptyList())

/** One turn of a conversation for [TernModel.applyChatTemplate]. */
data class ChatMessage(val role: String, val content: String)

/** The result of [TernSession.score]: natural-log probability summed over [tokens] tokens. */
data class Score(val totalLogprob: Double, val tokens: Long) {
    /** `exp(-totalLogprob / tokens)`. */
    val perplexity: Double get() = Math.exp(-totalLogprob / tokens.toDouble())
}

/** `tern_model_options.device` (`TERN_DEVICE_*`). */
object Device {
    /** A hardware GPU when there is one and the model has kernels for it, else the CPU. */
    const val AUTO = 0
    const val CPU = 1
    /** The GPU engine (software adapters count); UNSUPPORTED without one. */
    const val GPU = 2
}

/** `tern_session_options.kv_format` (`TERN_KV_*`): how the KV cache stores each value. */
object KvFormat {
    /** `TERN_KV_DEFAULT`: the library's default (Q8; F32 with llama.cpp numerics). */
    const val DEFAULT = -1
    const val F32 = 0
    const val F16 = 1
    const val Q8 = 2
    /** KIVI 4/3/2-bit (group [SessionOptions.kiviGroup], window [SessionOptions.kiviWindow]). */
    const val Q4 = 3
    const val Q3 = 4
    const val Q2 = 5
    /** a4.8-style absmax 4/3-bit. */
    const val A4 = 6
    const val A3 = 7
    /** Rotated KIVI 4/3/2-bit (per-head Walsh–Hadamard rotation first; window [SessionOptions.kiviWindow]). */
    const val Q4R = 8
    const val Q3R = 9
    const val Q2R = 10
}

/** MiniCache cross-layer merging of the KV cache (`TERN_MINICACHE_*`). */
sealed class MiniCache {
    object Off : MiniCache()
    /** The measured defaults for the model's depth. */
    object On : MiniCache()
    /** Pairs from [startLayer] on, SLERP [t] in [0, 1], retention threshold [gamma] in [0, 1]. */
    data class Custom(val startLayer: Int, val t: Float, val gamma: Float) : MiniCache()

    companion object {
        const val OFF = 0
        const val ON = 1
        const val CUSTOM = 2
    }
}

/**
 * How a [TernSession] is made (`tern_session_options`): context ([nCtx] 0 = the model's training
 * context, capped at 4096), KV-cache format, KIVI group / window (0 = 32 / 128), MiniCache, and
 * llama.cpp's CPU numerics (a CPU mode: INVALID_ARGUMENT on a GPU model).
 */
data class SessionOptions(
    val nCtx: Int = 0,
    val kvFormat: Int = KvFormat.DEFAULT,
    val miniCache: MiniCache = MiniCache.Off,
    val kiviGroup: Int = 0,
    val kiviWindow: Int = 0,
    val llamaCppNumerics: Boolean = false
)

/**
 * What a session really uses ([TernSession.report], `tern_session_report`): [device] is
 * [Device.CPU] or [Device.GPU] (auto resolved), [miniCache] is [MiniCache.Off] or the values
 * used, [maxMemory] the model's budget (0 = no cap), [kvBytes] the KV cache's size.
 */
data class SessionReport(
    val device: Int,
    val nCtx: Int,
    val kvFormat: Int,
    val kiviGroup: Int,
    val kiviWindow: Int,
    val miniCache: MiniCache,
    val llamaCppNumerics: Boolean,
    val maxMemory: Long,
    val kvBytes: Long
)
