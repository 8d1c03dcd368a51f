package dev.tern

/**
 * The JNI entry points (Rust, `ffi/src/jni.rs`, feature `jni`). Each one calls the C ABI and
 * throws [TernException] for a status other than `TERN_OK`. Handles are `Long`s (0 = none).
 * Use [TernModel] and [TernSession] instead.
 */
internal object Native {
    @JvmStatic external fun abiVersion(): Int
    @JvmStatic external fun version(): String
    @JvmStatic external fun liveHandles(): Long
    @JvmStatic external fun modelLoad(
        path: String, device: Int, useThreads: Boolean, maxMemory: Long, cpuThreads: Int
    ): Long
    /**
     * `tern_model_get_info`: device, nVocab, nCtxTrain, nLayer, nEmbd, nHead, nHeadKv, headDim,
     * bos, eos, eot, pad, unk (-1: none), addBos, hasTokenizer, hasChatTemplate, cpuThreads,
     * weightBytes.
     */
    @JvmStatic external fun modelInfo(model: Long): LongArray
    /** `tern_model_get_string` (`TERN_MODEL_STR_*`); null when the model has none. */
    @JvmStatic external fun modelString(model: Long, which: Int): String?
    @JvmStatic external fun tokenize(
        model: Long, text: String, addSpecial: Boolean, parseSpecial: Boolean
    ): IntArray
    @JvmStatic external fun detokenize(model: Long, tokens: IntArray): String
    @JvmStatic external fun chatApplyTemplate(
        model: Long, template: String?, roles: Array<String>, contents: Array<String>,
        addGenerationPrompt: Boolean
    ): String
    @JvmStatic external fun sessionSave(session: Long): ByteArray
    @JvmStatic external fun sessionRestore(session: Long, state: ByteArray)
    @JvmStatic external fun modelFree(model: Long)
    @JvmStatic external fun sessionNew(
        model: Long, nCtx: Int, kvFormat: Int,
        miniCache: Int, miniCacheStartLayer: Int, miniCacheT: Float, miniCacheGamma: Float,
        kiviGroup: Int, kiviWindow: Int, llamaCppNumerics: Boolean
    ): Long
    /**
     * `tern_session_get_report`: device, nCtx, kvFormat, kiviGroup, kiviWindow, miniCache,
     * miniCacheStartLayer, miniCacheT and miniCacheGamma (raw float bits), llamaCppNumerics,
     * maxMemory, kvBytes.
     */
    @JvmStatic external fun sessionReport(session: Long): LongArray
    @JvmStatic external fun sessionFree(session: Long)
    @JvmStatic external fun sessionReset(session: Long)
    @JvmStatic external fun cancel(session: Long)
    @JvmStatic external fun generate(
        session: Long, prompt: String,
        temperature: Float, topK: Int, topP: Float, minP: Float,
        repeatPenalty: Float, repeatLastN: Int, seed: Long,
        maxTokens: Int, stopStrings: Array<String>, stopTokens: IntArray,
        callback: PieceCallback
    )
    /** `[total log-probability, scored tokens]`. */
    @JvmStatic external fun score(session: Long, text: String): DoubleArray
    @JvmStatic external fun chatApply(
        model: Long, roles: Array<String>, contents: Array<String>, addGenerationPrompt: Boolean
    ): String
}

/** Receives generated text; return false to stop. Called on the generating thread. */
interface PieceCallback {
    fun onPiece(piece: String): Boolean
}
