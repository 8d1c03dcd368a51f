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

/** One turn of a conversation for [TernModel.applyChatTemplate]. */
data class ChatMessage(val role: String, val content: String)

/** The result of [TernSession.score]: natural-log probability summed over [tokens] tokens. */
data class Score(val totalLogprob: Double, val tokens: Long) {
    /** `exp(-totalLogprob / tokens)`. */
    val perplexity: Double get() = Math.exp(-totalLogprob / tokens.toDouble())
}
