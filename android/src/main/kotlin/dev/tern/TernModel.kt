package dev.tern

import java.util.concurrent.atomic.AtomicLong

/**
 * A loaded `.tern` model (`tern_model`). Share it between sessions and threads; [close] it when
 * done (sessions made from it stay usable: they keep the weights alive).
 *
 * @param device [Device.AUTO] (a hardware GPU when there is one and the model has kernels for it,
 *   else the CPU), [Device.CPU] or [Device.GPU] (`TERN_DEVICE_*`).
 * @param useThreads split matrix products over a thread pool (bit-identical results either way).
 * @param maxMemory memory budget in bytes for the model and its sessions (0 = no cap;
 *   `tern_model_options.max_memory`).
 * @param cpuThreads CPU threads of the matrix products (0 = one per core;
 *   `tern_model_options.cpu_threads`: the process's one pool, sized by the first CPU model).
 * @throws TernException IO for a missing file, CORRUPT_FILE, UNSUPPORTED, OUT_OF_MEMORY, ...
 */
class TernModel @JvmOverloads constructor(
    path: String,
    device: Int = Device.AUTO,
    useThreads: Boolean = true,
    maxMemory: Long = 0,
    cpuThreads: Int = 0
) : AutoCloseable {
    private val handle = AtomicLong(0)

    init {
        Tern.ensureLoaded()
        handle.set(Native.modelLoad(path, device, useThreads, maxMemory, cpuThreads))
    }

    internal fun handle(): Long {
        val h = handle.get()
        check(h != 0L) { "TernModel is closed" }
        return h
    }

    /** Render [messages] with the model's chat template into a prompt for [TernSession.generate]. */
    @JvmOverloads
    fun applyChatTemplate(messages: List<ChatMessage>, addGenerationPrompt: Boolean = true): String =
        Native.chatApply(
            handle(),
            messages.map { it.role }.toTypedArray(),
            messages.map { it.content }.toTypedArray(),
            addGenerationPrompt
        )

    /** Render [messages] with the app's own Jinja [template] (null: the model's). */
    @JvmOverloads
    fun applyChatTemplate(
        template: String?,
        messages: List<ChatMessage>,
        addGenerationPrompt: Boolean = true
    ): String =
        Native.chatApplyTemplate(
            handle(), template,
            messages.map { it.role }.toTypedArray(),
            messages.map { it.content }.toTypedArray(),
            addGenerationPrompt
        )

    /** What the model is (`tern_model_get_info` and `tern_model_get_string`). */
    fun info(): ModelInfo {
        val h = handle()
        val v = Native.modelInfo(h)
        return ModelInfo(
            device = v[0].toInt(), nVocab = v[1].toInt(), nCtxTrain = v[2].toInt(),
            nLayer = v[3].toInt(), bos = v[8].toInt(), eos = v[9].toInt(), eot = v[10].toInt(),
            addBos = v[13] != 0L, hasChatTemplate = v[15] != 0L, cpuThreads = v[16].toInt(),
            weightBytes = v[17],
            name = Native.modelString(h, ModelInfo.STR_NAME) ?: "",
            architecture = Native.modelString(h, ModelInfo.STR_ARCHITECTURE) ?: "",
            chatTemplate = Native.modelString(h, ModelInfo.STR_CHAT_TEMPLATE),
            deviceName = Native.modelString(h, ModelInfo.STR_DEVICE) ?: ""
        )
    }

    /** Token ids of [text] (`tern_tokenize`). */
    @JvmOverloads
    fun tokenize(text: String, addSpecial: Boolean = true, parseSpecial: Boolean = true): IntArray =
        Native.tokenize(handle(), text, addSpecial, parseSpecial)

    /** Text of [tokens] (`tern_detokenize`). */
    fun detokenize(tokens: IntArray): String = Native.detokenize(handle(), tokens)

    /** Free the model handle. Safe to call more than once. */
    override fun close() {
        val h = handle.getAndSet(0)
        if (h != 0L) Native.modelFree(h)
    }
}

/** What a model is ([TernModel.info]); token ids are -1 where the model has none. */
data class ModelInfo(
    val device: Int,
    val nVocab: Int,
    val nCtxTrain: Int,
    val nLayer: Int,
    val bos: Int,
    val eos: Int,
    val eot: Int,
    val addBos: Boolean,
    val hasChatTemplate: Boolean,
    val cpuThreads: Int,
    val weightBytes: Long,
    val name: String,
    val architecture: String,
    val chatTemplate: String?,
    val deviceName: String
) {
    companion object {
        const val STR_NAME = 0
        const val STR_ARCHITECTURE = 1
        const val STR_CHAT_TEMPLATE = 2
        const val STR_DEVICE = 3
    }
}
